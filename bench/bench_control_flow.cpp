// Control flow's run-time costs, each against its anchor in the same run:
//
//     bench_control_flow [--json]      (one JSON line per case either way)
//
//   loop_allocs  a Loop of 1,000 iterations over a small body (16 floats, one multiply-add),
//                run by an Executable after a warm-up: heap allocations per iteration after
//                the first, from runs of 1,000 and of 10 iterations (target 0); and the time
//                per iteration.
//   if_static    an If whose condition is a constant, its taken branch a chain of 8 matmuls
//                64x64, against the same chain with the branch removed by hand: time per run
//                (target: ratio at most 1.05).
#include "bench/alloc_count.h"
#include "bench/bench_cli.h"
#include "braid.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

using namespace braid;
using Clock = std::chrono::steady_clock;

namespace {

double ns_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

GraphOptions on_caller() {
    GraphOptions go;
    go.default_comp_node = "cpu:default";
    return go;
}

//! An executable running h <- h * 0.5 + 1 `trips` times over 16 floats.
std::unique_ptr<Executable> counting_loop(int64_t trips) {
    auto g = ComputingGraph::make(on_caller());
    auto h = opr::Input::make(*g, "h", dtype::Float32(), {16});
    auto n = opr::ImmutableTensor::make_scalar(*g, double(trips), dtype::Int64());
    auto out = opr::loop(n, SymbolVar(), {h}, {},
                         [](ComputingGraph&, SymbolVar, SymbolVar cond, const SymbolVarArray& c,
                            const SymbolVarArray&) {
                             return SymbolVarArray{cond, c[0] * 0.5 + 1.0};
                         })[0];
    auto exec = g->compile({out});
    Tensor x(TensorShape{16}, dtype::Float32());
    std::fill(x.ptr<float>(), x.ptr<float>() + 16, 0.f);
    exec->feed("h", x);
    return exec;
}

//! Heap allocations of one run after `warmup` runs.
double allocs_per_run(Executable& exec, int warmup, int runs) {
    for (int i = 0; i < warmup; ++i) exec.run();
    uint64_t a0 = g_allocs.load();
    for (int i = 0; i < runs; ++i) exec.run();
    return double(g_allocs.load() - a0) / runs;
}

void loop_allocs() {
    auto long_loop = counting_loop(1000), short_loop = counting_loop(10);
    double a_long = allocs_per_run(*long_loop, 3, 20), a_short = allocs_per_run(*short_loop, 3, 20);
    float h = long_loop->output(0).ptr<float>()[0];
    if (!(h > 1.99f && h <= 2.f)) {
        std::fprintf(stderr, "bench_control_flow: loop_allocs: wrong output %g\n", double(h));
        std::exit(1);
    }
    const int runs = 200;
    auto t0 = Clock::now();
    for (int i = 0; i < runs; ++i) long_loop->run();
    double ns_per_iteration = ns_since(t0) / runs / 1000;
    std::printf("{\"bench\":\"control_flow\",\"case\":\"loop_allocs\",\"allocs_per_run_1000\":%.2f,"
                "\"allocs_per_run_10\":%.2f,\"allocs_per_iteration\":%.4f,"
                "\"ns_per_iteration\":%.0f,\"target_allocs_per_iteration\":0}\n",
                a_long, a_short, (a_long - a_short) / 990, ns_per_iteration);
}

//! 8 matmuls of x {64,64} by w, chained.
SymbolVar chain(SymbolVar x, SymbolVar w) {
    for (int i = 0; i < 8; ++i) x = opr::matmul(x, w) * 0.125;
    return x;
}

double median_ns(Executable& exec, int runs) {
    for (int i = 0; i < 20; ++i) exec.run();
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) {
        auto t0 = Clock::now();
        exec.run();
        t.push_back(ns_since(t0));
    }
    std::nth_element(t.begin(), t.begin() + runs / 2, t.end());
    return t[size_t(runs / 2)];
}

void if_static() {
    Tensor xv(TensorShape{64, 64}, dtype::Float32());
    for (size_t i = 0; i < 64 * 64; ++i) xv.ptr<float>()[i] = float(i % 7) * 0.1f;
    auto build = [&](bool with_if) {
        auto g = ComputingGraph::make(on_caller());
        auto x = opr::Input::make(*g, "x", dtype::Float32(), {64, 64});
        auto w = opr::Input::make(*g, "w", dtype::Float32(), {64, 64});
        SymbolVar y;
        if (with_if) {
            auto yes = opr::ImmutableTensor::make_scalar(*g, 1, dtype::Bool());
            y = opr::cond(
                yes, {x, w},
                [](ComputingGraph&, const SymbolVarArray& in) {
                    return SymbolVarArray{chain(in[0], in[1])};
                },
                [](ComputingGraph&, const SymbolVarArray& in) { return SymbolVarArray{in[0]}; })[0];
        } else {
            y = chain(x, w);
        }
        auto exec = g->compile({y});
        exec->feed("x", xv).feed("w", xv);
        return exec;
    };
    auto with_if = build(true), by_hand = build(false);
    const int runs = 2000;
    double a = median_ns(*with_if, runs), b = median_ns(*by_hand, runs);
    if (with_if->output(0).ptr<float>()[5] != by_hand->output(0).ptr<float>()[5]) {
        std::fprintf(stderr, "bench_control_flow: if_static: the two graphs disagree\n");
        std::exit(1);
    }
    std::printf("{\"bench\":\"control_flow\",\"case\":\"if_static\",\"if_ns\":%.0f,"
                "\"inlined_ns\":%.0f,\"ratio\":%.3f,\"target_ratio\":1.05}\n",
                a, b, a / b);
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"bench_control_flow: allocations per Loop iteration and the cost of an If with "
                 "a static condition"};
    bool json = false;
    app.add_flag("--json", json, "accepted for symmetry: the output is always JSON lines");
    if (auto status = bench::parse_command_line(app, argc, argv)) return *status;
    register_all_operators();
    loop_allocs();
    if_static();
    return 0;
}
