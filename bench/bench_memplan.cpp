// Memory planning quality and speed: for each graph and each planner algorithm, the arena
// size against the lower bound (largest total size alive at one step; the anchor) and
// against no reuse, and the planning time (wall and CPU). Graphs are compiled, not run.
//
//   mlp_fwd           batch 128, 2048 -> 8192 -> 2048, relu, float32 (braid ops)
//   mlp_train         the same MLP with a squared-error loss against a target input:
//                     forward, backward and an SGD update of every parameter (opr::minimize)
//   mlp2_train        the network of the Alpa stage dump (docs/performance.md): two such
//                     blocks, relu after every layer, trained the same way
//   deep_mlp_fwd      64 layers of 1024 x 1024 + bias + relu, batch 128 (braid ops)
//   random_10k/100k   random DAGs of 10,000 / 100,000 braid operators: inputs mostly from
//                     the last 16 vars, skip connections from the last 1,024
//   random_wide_100k  the same with skip connections from any earlier var: thousands of
//                     vars alive at once (a stress case)
//   intervals_10k/100k  random block sets given to the planner directly (a stress case)
//
//     bench_memplan [--json] [--graph NAME] [--algo NAME]
#include "bench/bench_cli.h"
#include "braid.h"
#include "memory/planner.h"
#include "tests/support/random_blocks.h"
#include "tests/support/random_graph.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>

using namespace braid;

namespace {

//! One measured case.
struct Result {
    size_t vars = 0, arena = 0, lower_bound = 0, no_reuse = 0, forwarded = 0;
    double plan_ms = 0, plan_cpu_ms = 0;
};

double thread_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Result from_executable(ComputingGraph& g, const std::vector<OutputSpec>& outputs) {
    auto exec = g.compile(outputs);
    Result r;
    const auto& report = exec->memory_report();
    r.plan_ms = report.total_plan_ms;
    r.plan_cpu_ms = report.total_plan_cpu_ms;
    for (auto& n : report.nodes) {
        r.vars += n.nr_planned_vars;
        r.arena += n.arena_bytes;
        r.lower_bound += n.lower_bound_bytes;
        r.no_reuse += n.no_reuse_bytes;
        r.forwarded += n.nr_forwarded();
    }
    return r;
}

GraphOptions options_for(const std::string& algo) {
    GraphOptions o;
    o.memory_planner = algo;
    return o;
}

std::shared_ptr<Tensor> param(const TensorShape& shape) {
    return std::make_shared<Tensor>(shape, dtype::Float32()); // values are never read
}

Result mlp_fwd(const std::string& algo) {
    auto g = ComputingGraph::make(options_for(algo));
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {128, 2048});
    auto w1 = opr::SharedParam::make(*g, param({2048, 8192}), "w1");
    auto b1 = opr::SharedParam::make(*g, param({8192}), "b1");
    auto w2 = opr::SharedParam::make(*g, param({8192, 2048}), "w2");
    auto b2 = opr::SharedParam::make(*g, param({2048}), "b2");
    auto h = opr::relu(opr::matmul(x, w1) + b1);
    return from_executable(*g, {opr::matmul(h, w2) + b2});
}

//! Batch 128, `blocks` x (2048 -> 8192 -> 2048), relu after the hidden layer (and after the
//! output layer too with `relu_out`), squared error against a target input, SGD.
Result mlp_train_blocks(const std::string& algo, int blocks, bool relu_out) {
    auto g = ComputingGraph::make(options_for(algo));
    SymbolVar h = opr::Input::make(*g, "x", dtype::Float32(), {128, 2048});
    auto target = opr::Input::make(*g, "target", dtype::Float32(), {128, 2048});
    SymbolVarArray params;
    for (int b = 0; b < blocks; ++b) {
        auto w1 = opr::SharedParam::make(*g, param({2048, 8192}));
        auto b1 = opr::SharedParam::make(*g, param({8192}));
        auto w2 = opr::SharedParam::make(*g, param({8192, 2048}));
        auto b2 = opr::SharedParam::make(*g, param({2048}));
        params.insert(params.end(), {w1, b1, w2, b2});
        h = opr::matmul(opr::relu(opr::matmul(h, w1) + b1), w2) + b2;
        if (relu_out) h = opr::relu(h);
    }
    auto diff = h - target;
    auto loss = opr::reduce_mean(diff * diff);
    opr::OptimizerConfig sgd;
    sgd.lr = 0.01f;
    std::vector<OutputSpec> outputs{loss};
    for (auto& u : opr::minimize(loss, params, sgd)) outputs.emplace_back(u);
    return from_executable(*g, outputs);
}

Result mlp_train(const std::string& algo) {
    return mlp_train_blocks(algo, 1, false);
}

Result mlp2_train(const std::string& algo) {
    return mlp_train_blocks(algo, 2, true);
}

Result deep_mlp_fwd(const std::string& algo) {
    auto g = ComputingGraph::make(options_for(algo));
    SymbolVar h = opr::Input::make(*g, "x", dtype::Float32(), {128, 1024});
    for (int layer = 0; layer < 64; ++layer) {
        auto w = opr::SharedParam::make(*g, param({1024, 1024}));
        auto b = opr::SharedParam::make(*g, param({1024}));
        h = opr::relu(opr::matmul(h, w) + b);
    }
    return from_executable(*g, {h});
}

Result random_graph(size_t nr_oprs, size_t skip_reach, const std::string& algo) {
    testing::RandomGraphConfig cfg;
    cfg.nr_oprs = nr_oprs;
    cfg.seed = 2024;
    cfg.fetch_probability = 0.002;
    cfg.callback_probability = 0;
    cfg.window = 16;
    cfg.skip_reach = skip_reach;
    auto rg = testing::make_random_graph(cfg, options_for(algo));
    // The whole graph: every var nobody reads is observed through a callback (callback
    // outputs stay in the arena; fetched ones would not).
    std::vector<OutputSpec> outputs;
    for (auto& v : rg.sinks()) outputs.emplace_back(v, [](const Tensor&) {});
    return from_executable(*rg.graph, outputs);
}

Result intervals(size_t n, const std::string& algo) {
    auto set = testing::make_random_blocks(n, 2024);
    auto t0 = std::chrono::steady_clock::now();
    double cpu0 = thread_cpu_ms();
    auto p = MemPlanner::make(algo, 64);
    for (size_t i = 0; i < set.blocks.size(); ++i)
        p->add(set.blocks[i].begin, set.blocks[i].end, set.blocks[i].size, i);
    for (auto [dst, src] : set.overwrites) p->add_overwrite(dst, src);
    p->solve();
    Result r;
    r.plan_ms = ms_since(t0);
    r.plan_cpu_ms = thread_cpu_ms() - cpu0;
    p->validate();
    r.vars = p->nr_blocks();
    r.arena = p->arena_size();
    r.lower_bound = p->lower_bound();
    r.no_reuse = p->no_reuse_size();
    r.forwarded = p->nr_overwrites();
    return r;
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::pair<std::string, std::function<Result(const std::string&)>>> graphs{
        {"mlp_fwd", mlp_fwd},
        {"mlp_train", mlp_train},
        {"mlp2_train", mlp2_train},
        {"deep_mlp_fwd", deep_mlp_fwd},
        {"random_10k", [](const std::string& a) { return random_graph(10000, 1024, a); }},
        {"random_100k", [](const std::string& a) { return random_graph(100000, 1024, a); }},
        {"random_wide_100k", [](const std::string& a) { return random_graph(100000, 0, a); }},
        {"intervals_10k", [](const std::string& a) { return intervals(10000, a); }},
        {"intervals_100k", [](const std::string& a) { return intervals(100000, a); }},
    };
    std::vector<std::string> graph_names;
    for (auto& graph : graphs) graph_names.push_back(graph.first);
    bool json = false;
    std::string only_graph, only_algo;
    CLI::App app{"bench_memplan: arena size and planning time of each memory planner against the "
                 "lower bound"};
    app.add_flag("--json", json, "one JSON object per graph and algorithm instead of a table");
    app.add_option("--graph", only_graph, "run only this graph (default: all)")
        ->check(CLI::IsMember(graph_names));
    app.add_option("--algo", only_algo, "run only this planner algorithm (default: all)")
        ->check(CLI::IsMember(MemPlanner::algorithms()));
    if (auto status = bench::parse_command_line(app, argc, argv)) return *status;
    register_all_operators();
    if (!json)
        std::printf("%-17s %-9s %7s %12s %12s %7s %13s %9s %9s\n", "graph", "algo", "vars",
                    "arena_bytes", "lower_bound", "ratio", "no_reuse", "plan_ms", "cpu_ms");
    try {
        for (auto& [name, fn] : graphs) {
            if (!only_graph.empty() && name != only_graph) continue;
            for (auto& algo : MemPlanner::algorithms()) {
                if (!only_algo.empty() && algo != only_algo) continue;
                Result r = fn(algo);
                double ratio = r.lower_bound ? double(r.arena) / double(r.lower_bound) : 1.0;
                if (json)
                    std::printf("{\"bench\":\"memplan\",\"graph\":\"%s\",\"algo\":\"%s\","
                                "\"vars\":%zu,\"arena_bytes\":%zu,\"lower_bound_bytes\":%zu,"
                                "\"no_reuse_bytes\":%zu,\"plan_ms\":%.2f,\"plan_cpu_ms\":%.2f,"
                                "\"arena_vs_lower_bound\":%.4f,\"forwarded\":%zu}\n",
                                name.c_str(), algo.c_str(), r.vars, r.arena, r.lower_bound,
                                r.no_reuse, r.plan_ms, r.plan_cpu_ms, ratio, r.forwarded);
                else
                    std::printf("%-17s %-9s %7zu %12zu %12zu %7.4f %13zu %9.2f %9.2f\n",
                                name.c_str(), algo.c_str(), r.vars, r.arena, r.lower_bound, ratio,
                                r.no_reuse, r.plan_ms, r.plan_cpu_ms);
                std::fflush(stdout);
            }
        }
    } catch (const Error& e) {
        std::fprintf(stderr, "bench_memplan: %s\n", e.what());
        return 1;
    }
    return 0;
}
