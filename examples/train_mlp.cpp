// Trains a 2-layer MLP (relu hidden units, log-softmax cross-entropy) on a synthetic,
// deterministic classification task and prints the loss every few steps. The task: 16-dim
// points from a fixed seed, labelled by which of 4 fixed directions they align with most.
// Forward, backward and the SGD update run as one executable; the parameters are updated in
// place.
//
//     ./build/examples/train_mlp [steps]   exits 1 unless the mean loss of the last 25
//                                          steps is below 0.2
#include "braid.h"

#include <algorithm>
#include <cstdio>
#include <random>

using namespace braid;

namespace {

constexpr size_t kBatch = 128, kIn = 16, kHidden = 64, kClasses = 4;
constexpr double kTargetLoss = 0.2; //!< mean loss over the last 25 steps

std::shared_ptr<Tensor> uniform(const TensorShape& shape, std::mt19937& rng, float scale) {
    auto t = std::make_shared<Tensor>(shape, dtype::Float32());
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t->ptr<float>()[i] = dist(rng);
    return t;
}

//! Inputs and one-hot labels: label = argmax over the 4 teacher directions.
void make_batch(std::mt19937& rng, const Tensor& teacher, Tensor& x, Tensor& onehot) {
    std::normal_distribution<float> dist(0.f, 1.f);
    for (size_t b = 0; b < kBatch; ++b) {
        float* xb = x.ptr<float>() + b * kIn;
        for (size_t i = 0; i < kIn; ++i) xb[i] = dist(rng);
        size_t best = 0;
        float best_score = -1e30f;
        for (size_t c = 0; c < kClasses; ++c) {
            float s = 0;
            for (size_t i = 0; i < kIn; ++i) s += xb[i] * teacher.ptr<float>()[i * kClasses + c];
            if (s > best_score) best_score = s, best = c;
        }
        for (size_t c = 0; c < kClasses; ++c) onehot.ptr<float>()[b * kClasses + c] = c == best;
    }
}

} // namespace

int main(int argc, char** argv) {
    int steps = argc > 1 ? std::atoi(argv[1]) : 300;
    try {
        register_all_operators();
        std::mt19937 rng(2024);
        auto graph = ComputingGraph::make();
        auto w1 = opr::SharedParam::make(*graph, uniform({kIn, kHidden}, rng, 0.4f), "w1");
        auto b1 = opr::SharedParam::make(*graph, uniform({kHidden}, rng, 0.f), "b1");
        auto w2 = opr::SharedParam::make(*graph, uniform({kHidden, kClasses}, rng, 0.2f), "w2");
        auto b2 = opr::SharedParam::make(*graph, uniform({kClasses}, rng, 0.f), "b2");

        auto x = opr::Input::make(*graph, "x", dtype::Float32(), {kBatch, kIn});
        auto onehot = opr::Input::make(*graph, "labels", dtype::Float32(), {kBatch, kClasses});
        auto hidden = opr::relu(opr::matmul(x, w1) + b1);
        auto logits = opr::matmul(hidden, w2) + b2;
        // Cross-entropy: mean over the batch of -<onehot, log_softmax(logits)>.
        auto log_probs = opr::log_softmax(logits, 1);
        auto loss = (-opr::reduce_mean(opr::reduce_sum(onehot * log_probs, {1}))).rename("loss");

        opr::OptimizerConfig sgd;
        sgd.lr = 0.2f;
        sgd.momentum = 0.9f;
        auto updates = opr::minimize(loss, {w1, b1, w2, b2}, sgd);
        std::vector<OutputSpec> outputs{loss};
        outputs.insert(outputs.end(), updates.begin(), updates.end());
        auto step = graph->compile(outputs);

        auto teacher = uniform({kIn, kClasses}, rng, 1.f);
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
