// Tensor parallelism: one training step (forward and the gradients of every weight) of the
// Megatron-style MLP of parallel/tensor_parallel.h, 128 x 2048 -> 8192 -> 2048 with gelu, on
// N ranks as graphs of this process (rank r on comp node cpu<r>, the local backend), against
// the same MLP on one device (the anchor) in the same run.
//
// Reported per case: the median step time on N ranks and on one device, the share of the
// ranks' step time spent inside collectives (the all-reduces, waits for peers included: the
// step observer's time of every CollectiveComm operator, over the ranks' summed step time),
// and the arena bytes of the memory plan of one rank against one device's. Weights and the
// input are fed inputs, outside the arena, on both sides.
//
//     bench_tensor_parallel [--json] [--ranks 2] [--iterations 5] [--tokens 128]
//                           [--d-model 2048] [--d-ff 8192]
#include "base/thread_pool.h"
#include "bench/bench_cli.h"
#include "braid.h"
#include "parallel/pmap.h"
#include "parallel/sharded_tensor.h"
#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

using namespace braid;
using namespace braid::parallel;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    bool json = false;
    uint32_t ranks = 2;
    int iterations = 5;
    size_t tokens = 128, d_model = 2048, d_ff = 8192;
};

double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

std::vector<PmapArg> mlp_args(const Mesh& mesh, const Options& o) {
    size_t t = o.tokens, d = o.d_model, f = o.d_ff;
    auto f32 = dtype::Float32();
    return {{"x", {t, d}, f32, replicated_spec(mesh, 2)},
            {"g", {t, d}, f32, replicated_spec(mesh, 2)},
            {"w1", {d, f}, f32, column_parallel_spec(mesh, "tp", 2)},
            {"b1", {f}, f32, column_parallel_spec(mesh, "tp", 1)},
            {"w2", {f, d}, f32, row_parallel_spec(mesh, "tp", 2)},
            {"b2", {d}, f32, replicated_spec(mesh, 1)}};
}

//! y and the gradients of sum(y * g) w.r.t. the weights.
SymbolVarArray step_outputs(SymbolVar y, const SymbolVarArray& in) {
    auto grads = grad(opr::reduce_sum(y * in[1]), {in[2], in[3], in[4], in[5]});
    SymbolVarArray outs = {y};
    outs.insert(outs.end(), grads.begin(), grads.end());
    return outs;
}

std::vector<Tensor> random_values(const std::vector<PmapArg>& args) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    std::vector<Tensor> values;
    for (auto& a : args) {
        Tensor t(a.global_shape, a.dtype);
        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) t.ptr<float>()[i] = u(rng);
        values.push_back(t);
    }
    return values;
}

size_t arena_of(const Executable& exec) {
    size_t bytes = 0;
    for (auto& n : exec.memory_report().nodes) bytes += n.arena_bytes;
    return bytes;
}

struct Single {
    double step_ms = 0;
    size_t arena = 0;
};

Single run_single(const std::vector<PmapArg>& args, const std::vector<Tensor>& values,
                  const Options& o) {
    GraphOptions opt;
    opt.default_comp_node = "cpu0";
    auto g = ComputingGraph::make(opt);
    SymbolVarArray in;
    for (auto& a : args) in.push_back(opr::Input::make(*g, a.name, a.dtype, a.global_shape));
    auto y = opr::matmul(opr::gelu(opr::matmul(in[0], in[2]) + in[3]), in[4]) + in[5];
    auto outs = step_outputs(y, in);
    auto exec = g->compile(std::vector<OutputSpec>(outs.begin(), outs.end()));
    for (size_t i = 0; i < args.size(); ++i) exec->feed(args[i].name, values[i]);
    exec->run(); // warm-up
    std::vector<double> times;
    for (int it = 0; it < o.iterations; ++it) {
        auto t0 = Clock::now();
        exec->run();
        times.push_back(ms_since(t0));
    }
    return {median(times), arena_of(*exec)};
}

struct Parallel {
    double step_ms = 0, comm_fraction = 0;
    size_t arena_per_rank = 0;
};

Parallel run_parallel(const Mesh& mesh, const std::vector<PmapArg>& args,
                      const std::vector<Tensor>& values, const Options& o) {
    SpmdOptions so;
    so.client = std::make_shared<comm::InProcessGroupClient>();
    so.key_prefix = "bench_tp";
    std::vector<SpmdRank> ranks;
    std::vector<std::unique_ptr<Executable>> execs;
    std::atomic<int64_t> comm_ns{0};
    auto fn = [](SpmdContext& ctx, const SymbolVarArray& in) {
        auto y = tensor_parallel_mlp(in[0], {in[2], in[3], in[4], in[5]}, ctx.groups(), "tp");
        return step_outputs(y, in);
    };
    Parallel result;
    for (uint32_t r : mesh.devices()) {
        ranks.push_back(build_spmd_rank(fn, mesh, args, r, so));
        auto& outs = ranks.back().outputs;
        execs.push_back(
            ranks.back().graph->compile(std::vector<OutputSpec>(outs.begin(), outs.end())));
        for (size_t i = 0; i < args.size(); ++i)
            execs.back()->feed(args[i].name,
                               ShardedTensor::split(values[i], args[i].spec).shard_of(mesh, r));
        result.arena_per_rank = std::max(result.arena_per_rank, arena_of(*execs.back()));
    }
    auto step = [&] {
        for (auto& e : execs) e->execute();
        for (auto& e : execs) e->wait();
    };
    step(); // warm-up: the collectives join their groups
    for (auto& e : execs)
        e->set_step_observer(
            [&](const OperatorNode& opr, Clock::time_point b, Clock::time_point e) {
                if (std::strcmp(opr.type_name(), "CollectiveComm") == 0)
                    comm_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(e - b).count();
            });
    std::vector<double> times;
    double total_ms = 0;
    for (int it = 0; it < o.iterations; ++it) {
        auto t0 = Clock::now();
        step();
        times.push_back(ms_since(t0));
        total_ms += times.back();
    }
    result.step_ms = median(times);
    result.comm_fraction = double(comm_ns.load()) / 1e6 / (total_ms * double(execs.size()));
    return result;
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"bench_tensor_parallel: a training step of the Megatron-style MLP on N ranks "
                 "against one device"};
    app.option_defaults()->always_capture_default();
    app.add_flag("--json", o.json, "one JSON object instead of a summary");
    app.add_option("--ranks", o.ranks,
                   "ranks (graphs of this process, rank r on cpu<r>); must divide --d-ff")
        ->check(CLI::Range(1u, 1024u));
    app.add_option("--iterations", o.iterations,
                   "timed steps, after one warm-up step (the median is reported)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--tokens", o.tokens, "rows of the input (batch x sequence)")
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    app.add_option("--d-model", o.d_model, "the MLP's input and output width")
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    app.add_option("--d-ff", o.d_ff, "the MLP's hidden width, split across the ranks")
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    if (auto status = bench::parse_command_line(app, argc, argv)) return *status;
    if (o.d_ff % o.ranks != 0) {
        std::fprintf(stderr, "bench_tensor_parallel: --ranks %u must divide --d-ff %zu\n", o.ranks,
                     o.d_ff);
        return 2;
    }
    try {
        register_all_operators();
        Mesh mesh({o.ranks}, {"tp"});
        auto args = mlp_args(mesh, o);
        auto values = random_values(args);
        auto single = run_single(args, values, o);
        auto par = run_parallel(mesh, args, values, o);
        if (o.json)
            std::printf(
                "{\"bench\":\"tensor_parallel\",\"ranks\":%u,\"tokens\":%zu,\"d_model\":%zu,"
                "\"d_ff\":%zu,\"threads\":%zu,\"iterations\":%d,\"step_ms\":%.3f,"
                "\"single_step_ms\":%.3f,\"speedup\":%.3f,\"comm_fraction\":%.4f,"
                "\"arena_bytes_per_rank\":%zu,\"arena_bytes_single\":%zu,"
                "\"arena_ratio\":%.4f}\n",
                o.ranks, o.tokens, o.d_model, o.d_ff, kernel_threads(), o.iterations, par.step_ms,
                single.step_ms, single.step_ms / par.step_ms, par.comm_fraction, par.arena_per_rank,
                single.arena, double(par.arena_per_rank) / double(single.arena));
        else
            std::printf("MLP %zu x %zu -> %zu -> %zu, forward and weight gradients, %zu kernel "
                        "threads\n  %u ranks: step %.2f ms (%.1f%% in collectives), arena %zu "
                        "bytes per rank\n  1 device: step %.2f ms, arena %zu bytes\n  speedup "
                        "%.2fx, arena per rank / single %.3f\n",
                        o.tokens, o.d_model, o.d_ff, o.d_model, kernel_threads(), o.ranks,
                        par.step_ms, 100 * par.comm_fraction, par.arena_per_rank, single.step_ms,
                        single.arena, single.step_ms / par.step_ms,
                        double(par.arena_per_rank) / double(single.arena));
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_tensor_parallel: %s\n", e.what());
        return 1;
    }
}
