// Dispatch overhead: a chain of 1,000 elementwise adds on 1-element float32 tensors,
// compiled once and executed many times; prints ns per operator.
//
//     bench_dispatch [--json] [--comp-node cpu0|cpu:default|cuda0] [--ops N] [--runs N]
//
// On cuda0 each add is a kernel launch on the comp node's stream; a run ends with a stream
// synchronisation and the copy of the 1-element result to the host.
#include "bench/bench_cli.h"
#include "braid.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

using namespace braid;

int main(int argc, char** argv) {
    std::string cn = "cpu0";
    size_t ops = 1000;
    int runs = 2000;
    bool json = false;
    CLI::App app{"bench_dispatch: per-operator cost of running a compiled chain of 1-element adds"};
    app.option_defaults()->always_capture_default();
    app.add_flag("--json", json, "one JSON object instead of a sentence");
    app.add_option("--comp-node", cn, "comp node the graph runs on (cpu0, cpu:default, cuda0)");
    app.add_option("--ops", ops, "adds in the chain")
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    app.add_option("--runs", runs, "timed runs of the chain (after 50 warm-up runs)")
        ->check(CLI::Range(1, 1 << 30));
    if (auto status = bench::parse_command_line(app, argc, argv)) return *status;
    register_all_operators(); // device kernels (cuda0)
    try {
        CompNode::load(cn);
    } catch (const Error& e) {
        std::fprintf(stderr, "bench_dispatch: %s\n", e.what());
        return 1;
    }
    GraphOptions options;
    options.default_comp_node = cn;
    // Dispatch is what is timed: without fusion the adds stay 1,000 operators (fused, they are
    // one elementwise chain, and the run's time is that one kernel's).
    options.enable_fusion = false;
    auto graph = ComputingGraph::make(options);
    auto x = opr::Input::make(*graph, "x", dtype::Float32(), {1});
    auto one = opr::ImmutableTensor::make_scalar(*graph, 1.0, dtype::Float32());
    SymbolVar y = x;
    // Each add reads the previous result, so none deduplicates and the chain is serial.
    for (size_t i = 0; i < ops; ++i) y = y + one;
    auto exec = graph->compile({y});
    Tensor xin(TensorShape{1}, dtype::Float32());
    xin.ptr<float>()[0] = 0.f;
    exec->feed("x", xin);
    for (int i = 0; i < 50; ++i) exec->run(); // warm-up
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < runs; ++i) exec->run();
    double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    double ns_per_op = ns / (double(runs) * double(exec->nr_operators()));
    float result = exec->output(0).ptr<float>()[0];
    if (result != float(ops)) {
        std::fprintf(stderr, "bench_dispatch: wrong result %f, expected %zu\n", result, ops);
        return 1;
    }
    if (json)
        std::printf("{\"bench\":\"dispatch\",\"ops\":%zu,\"ns_per_op\":%.1f,\"comp_node\":\"%s\","
                    "\"runs\":%d}\n",
                    ops, ns_per_op, cn.c_str(), runs);
    else
        std::printf("dispatch on %s: %.1f ns per operator (%zu ops x %d runs)\n", cn.c_str(),
                    ns_per_op, ops, runs);
    return 0;
}
