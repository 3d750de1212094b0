// Trains a 2-layer MLP (relu hidden units, log-softmax cross-entropy) on a synthetic,
// deterministic classification task (mlp_classifier.h) and prints the loss every few steps.
// Forward, backward and the SGD update run as one executable; the parameters are updated in
// place.
//
//     ./build/examples/train_mlp [steps]   exits 1 unless the mean loss of the last 25
//                                          steps is below 0.2
#include "braid.h"
#include "mlp_classifier.h"

#include <algorithm>
#include <cstdio>
#include <random>

using namespace braid;
using namespace braid::example;

namespace {

constexpr size_t kBatch = 128;
constexpr double kTargetLoss = 0.2; //!< mean loss over the last 25 steps

} // namespace

int main(int argc, char** argv) {
    int steps = argc > 1 ? std::atoi(argv[1]) : 300;
    try {
        register_all_operators();
        std::mt19937 rng(2024);
        auto graph = ComputingGraph::make();
        auto model = build_mlp_loss(*graph, MlpParams::init(rng), kBatch);

        opr::OptimizerConfig sgd;
        sgd.lr = 0.2f;
        sgd.momentum = 0.9f;
        auto updates = opr::minimize(model.loss, model.params, sgd);
        std::vector<OutputSpec> outputs{model.loss};
        outputs.insert(outputs.end(), updates.begin(), updates.end());
        auto step = graph->compile(outputs);

        auto teacher = make_teacher(rng);
        Tensor xb(TensorShape{kBatch, kIn}, dtype::Float32());
        Tensor yb(TensorShape{kBatch, kClasses}, dtype::Float32());
        double recent = 0;
        int recent_n = 0;
        for (int s = 0; s < steps; ++s) {
            make_batch(rng, *teacher, xb, yb);
            step->feed("x", xb).feed("labels", yb).run();
            double loss_value = step->output(0).at(0);
            if (s % 25 == 0 || s == steps - 1) std::printf("step %4d  loss %.4f\n", s, loss_value);
            if (s >= steps - 25) recent += loss_value, ++recent_n;
        }
        recent /= std::max(recent_n, 1);
        bool learned = recent < kTargetLoss;
        std::printf("mean loss of the last %d steps %.4f (%s %.2f)\n", recent_n, recent,
                    learned ? "below" : "NOT below", kTargetLoss);
        return learned ? 0 : 1;
    } catch (const Error& e) {
        std::fprintf(stderr, "train_mlp: %s\n", e.what());
        return 2;
    }
}
