// A 2-layer MLP forward pass (batch 64, 784 -> 256 -> 10, relu) built through the C++ API,
// run on the CPU. Prints the output's shape, its first values and the time per run.
//
//     ./build/examples/mlp [comp_node] [iterations]      e.g. ./build/examples/mlp cpu0 50
#include "braid.h"

#include <chrono>
#include <cstdio>
#include <random>

using namespace braid;

namespace {

std::shared_ptr<Tensor> random_param(const TensorShape& shape, std::mt19937& rng, float scale) {
    auto t = std::make_shared<Tensor>(shape, dtype::Float32());
    std::uniform_real_distribution<float> dist(-scale, scale);
    float* p = t->ptr<float>();
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) p[i] = dist(rng);
    return t;
}

} // namespace

int main(int argc, char** argv) {
    std::string cn_name = argc > 1 ? argv[1] : "cpu0";
    int iters = argc > 2 ? std::atoi(argv[2]) : 20;
    try {
        register_all_operators();
        GraphOptions options;
        options.default_comp_node = cn_name;
        auto graph = ComputingGraph::make(options);

        std::mt19937 rng(42);
        auto w1 = opr::SharedParam::make(*graph, random_param({784, 256}, rng, 0.05f), "w1");
        auto b1 = opr::SharedParam::make(*graph, random_param({256}, rng, 0.05f), "b1");
        auto w2 = opr::SharedParam::make(*graph, random_param({256, 10}, rng, 0.05f), "w2");
        auto b2 = opr::SharedParam::make(*graph, random_param({10}, rng, 0.05f), "b2");

        auto x = opr::Input::make(*graph, "x", dtype::Float32(), {64, 784});
        auto h = opr::relu(opr::matmul(x, w1) + b1);
        auto y = (opr::matmul(h, w2) + b2).rename("logits");

        auto exec = graph->compile({y});
        exec->feed("x", *random_param({64, 784}, rng, 1.f));

        exec->run(); // warm-up
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) exec->run();
        double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count() /
            iters;

        const Tensor& out = exec->output(0);
        std::printf("mlp on %s: output \"%s\" shape %s dtype %s\n", cn_name.c_str(),
                    y.name().c_str(), out.shape().to_string().c_str(), out.dtype().name());
        std::printf("first values:");
        for (size_t i = 0; i < 5; ++i) std::printf(" %.6f", out.at(i));
        std::printf("\ntime per run: %.3f ms over %d runs\n", ms, iters);
        return 0;
    } catch (const Error& e) {
        std::fprintf(stderr, "mlp: %s\n", e.what());
        return 1;
    }
}
