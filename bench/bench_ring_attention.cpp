// Context-parallel ring attention: the scaling efficiency of N ranks over one.
//
//     efficiency = T(one rank, whole sequence) / (N × T(per rank, N ranks))
//
// Every rank gets the same hardware: one kernel thread (one core) on its own comp node, ranks
// as threads of this process on the local backend. T(one rank) is ring attention with N = 1
// (the same kernels, no transfers) on one thread; T(per rank) is the wall time of one step of
// all N ranks started together. Causal, load-balanced (zigzag) layout, batch 1. For each
// rotation (all_gather, ring) and pass (fwd; fwd_bwd: forward and the gradients of q, k and v
// of sum(out · w)) it prints one line; the single-rank Attention operator's time on the whole
// sequence is printed beside it for reference (its backward materialises S × S matrices).
//
//     bench_ring_attention [--json] [--ranks 2] [--iterations 3] [--seq 4096] [--heads 8]
//                          [--head-dim 64] [--no-attention]
#include "base/thread_pool.h"
#include "bench/bench_cli.h"
#include "braid.h"
#include "collective/ring_attention.h"
#include "parallel/context_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>

using namespace braid;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    bool json = false, attention = true;
    uint32_t ranks = 2;
    int iterations = 3;
    size_t seq = 4096, heads = 8, head_dim = 64;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

Tensor random_tensor(const TensorShape& shape, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    Tensor t(shape, dtype::Float32());
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t.ptr<float>()[i] = u(rng);
    return t;
}

struct Values {
    Tensor q, k, v, w;
};

//! One rank's compiled step: ring attention (or, with `single`, the Attention operator) on
//! its shard, and with `backward` the gradients of sum(out · w).
struct RankStep {
    std::shared_ptr<ComputingGraph> graph;
    decltype(std::declval<ComputingGraph&>().compile({})) exec;
};

RankStep build_rank(const Values& full, uint32_t n, uint32_t rank, bool backward,
                    opr::RingRotation rotation, bool single_attention,
                    const std::shared_ptr<comm::GroupClient>& client, const std::string& key) {
    RankStep s;
    GraphOptions go;
    go.default_comp_node = fmt::format("cpu{}", rank);
    s.graph = ComputingGraph::make(go);
    auto& g = *s.graph;
    auto shard = [&](const Tensor& t) { return parallel::shard_sequence(t, 2, n, true)[rank]; };
    Values v{shard(full.q), shard(full.k), shard(full.v), shard(full.w)};
    auto in = [&](const char* name, const Tensor& t) {
        return opr::Input::make(g, name, dtype::Float32(), t.shape());
    };
    auto q = in("q", v.q), k = in("k", v.k), vv = in("v", v.v), w = in("w", v.w);
    SymbolVar out;
    if (single_attention) {
        out = opr::Attention::make(q, k, vv, {true, std::nullopt})[0];
    } else {
        opr::RingGroup group{key, n, rank, client};
        out = opr::ring_attention(q, k, vv, group, {.causal = true, .rotation = rotation})[0];
    }
    std::vector<OutputSpec> outs{out};
    if (backward)
        for (auto& gr : grad(opr::reduce_sum(out * w), {q, k, vv})) outs.emplace_back(gr);
    s.exec = g.compile(outs);
    s.exec->feed("q", v.q);
    s.exec->feed("k", v.k);
    s.exec->feed("v", v.v);
    if (backward) s.exec->feed("w", v.w);
    return s;
}

//! Median wall time (ms) of one step of every rank started together (one warm-up step first).
double time_ranks(std::vector<RankStep>& ranks, int iterations) {
    std::vector<double> times;
    for (int it = 0; it <= iterations; ++it) {
        auto start = Clock::now();
        std::vector<std::thread> threads;
        std::vector<std::string> errors(ranks.size());
        for (size_t r = 0; r < ranks.size(); ++r)
            threads.emplace_back([&, r] {
                try {
                    ranks[r].exec->run();
                } catch (const std::exception& e) {
                    errors[r] = e.what();
                }
            });
        for (auto& t : threads) t.join();
        for (size_t r = 0; r < ranks.size(); ++r)
            if (!errors[r].empty()) {
                std::fprintf(stderr, "rank %zu: %s\n", r, errors[r].c_str());
                std::exit(1);
            }
        if (it > 0)
            times.push_back(
                std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    return median(times);
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"bench_ring_attention: scaling efficiency of context-parallel ring attention on "
                 "N ranks over one"};
    app.option_defaults()->always_capture_default();
    app.add_flag("--json", o.json, "one JSON object per case instead of a table line");
    app.add_option("--ranks", o.ranks, "ranks (threads, one core each)")
        ->check(CLI::Range(1u, 1024u));
    app.add_option("--iterations", o.iterations,
                   "timed steps per measurement, after one warm-up step (the median is reported)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--seq", o.seq, "sequence length, a multiple of 2 x ranks")
        ->check(CLI::Range(size_t(1), size_t(1) << 24));
    app.add_option("--heads", o.heads, "attention heads")
        ->check(CLI::Range(size_t(1), size_t(1) << 16));
    app.add_option("--head-dim", o.head_dim, "size of each head")
        ->check(CLI::Range(size_t(1), size_t(1) << 16));
    bool no_attention = false;
    app.add_flag("--no-attention", no_attention,
                 "skip the single-rank Attention operator printed for reference");
    if (auto status = bench::parse_command_line(app, argc, argv)) return *status;
    o.attention = !no_attention;
    if (o.seq % (2 * o.ranks) != 0) {
        std::fprintf(stderr,
                     "bench_ring_attention: --seq %zu must be a multiple of 2 x --ranks (%u): "
                     "each rank holds two chunks of the zigzag layout\n",
                     o.seq, o.ranks);
        return 2;
    }
    register_all_operators();
    set_kernel_threads(1); // one core per rank, for the single rank as for each of the N
    std::mt19937 rng(11);
    TensorShape shape{1, o.heads, o.seq, o.head_dim};
    Values full{random_tensor(shape, rng), random_tensor(shape, rng), random_tensor(shape, rng),
                random_tensor(shape, rng)};
    auto client =
        std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
    if (!o.json)
        std::printf("%-10s %-7s %12s %12s %10s %14s\n", "rotation", "pass", "1 rank ms",
                    fmt::format("{} ranks ms", o.ranks).c_str(), "efficiency", "Attention ms");
    int key = 0;
    for (bool backward : {false, true}) {
        double attention_ms = 0;
        if (o.attention) {
            std::vector<RankStep> single;
            single.push_back(
                build_rank(full, 1, 0, backward, opr::RingRotation::RING, true, client, "unused"));
            attention_ms = time_ranks(single, o.iterations);
        }
        for (auto rotation : {opr::RingRotation::ALL_GATHER, opr::RingRotation::RING}) {
            std::vector<RankStep> one, many;
            one.push_back(build_rank(full, 1, 0, backward, rotation, false, client,
                                     fmt::format("bench{}", key++)));
            double t1 = time_ranks(one, o.iterations);
            std::string k = fmt::format("bench{}", key++);
            for (uint32_t r = 0; r < o.ranks; ++r)
                many.push_back(build_rank(full, o.ranks, r, backward, rotation, false, client, k));
            double tn = time_ranks(many, o.iterations);
            double efficiency = t1 / (o.ranks * tn);
            std::string rot = rotation == opr::RingRotation::RING ? "ring" : "all_gather";
            const char* pass = backward ? "fwd_bwd" : "fwd";
            if (o.json)
                std::printf("{\"bench\":\"ring_attention\",\"ranks\":%u,\"rotation\":\"%s\","
                            "\"pass\":\"%s\",\"efficiency\":%.3f,\"one_rank_ms\":%.2f,"
                            "\"per_rank_ms\":%.2f,\"attention_ms\":%.2f,\"seq\":%zu,\"heads\":%zu,"
                            "\"head_dim\":%zu,\"causal\":true,\"load_balance\":true}\n",
                            o.ranks, rot.c_str(), pass, efficiency, t1, tn, attention_ms, o.seq,
                            o.heads, o.head_dim);
            else
                std::printf("%-10s %-7s %12.1f %12.1f %10.3f %14.1f\n", rot.c_str(), pass, t1, tn,
                            efficiency, attention_ms);
            std::fflush(stdout);
        }
    }
}
