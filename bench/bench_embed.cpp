// The embedding C API (embed/include/braid/braid_c.h): per-run overhead and heap allocations,
// memory per context of a model with shared weights, throughput of concurrent contexts, and
// cancellation latency.
//
//     bench_embed [--json]      (one JSON line per case either way)
//
// Cases, each against its target in the same run:
//   overhead_1op   1-operator model (relu of 16 floats), braid_context_run + _output on the
//                  calling thread: ns and heap allocations per run (target 1000 ns, 0 allocs);
//                  the same graph run by a bare Executable is the anchor.
//   shared_weights 64 MiB of weights mapped from a file, 8 contexts: RSS per extra context
//                  against its arena + 1 MiB.
//   throughput     the examples' mlp, 1 and 2 threads with a context each, max_threads = 1.
//   deterministic  the mlp on one thread in deterministic mode against the default: latency
//                  ratio (target 1.15).
//   cancel         a chain of 40 matmuls 256x256 cancelled 100 times at random points: time
//                  from braid_cancel_token_cancel to braid_context_run returning, against the
//                  time of one matmul (the longest kernel).
//
// Heap allocations are counted by bench/alloc_count.h.
#include "base/thread_pool.h"
#include "bench/alloc_count.h"
#include "bench/bench_cli.h"
#include "braid.h"
#include "braid/braid_c.h"
#include "tools/example_models.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace braid;
using Clock = std::chrono::steady_clock;

namespace {

double ns_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

//! Exits with the message of a failed call.
void check(braid_status* s, const char* what) {
    if (!s) return;
    std::fprintf(stderr, "bench_embed: %s: %s\n", what, braid_status_message(s));
    std::exit(1);
}

braid_model* load_buffer(const std::vector<uint8_t>& bytes) {
    braid_model* m = nullptr;
    check(braid_model_load_buffer(bytes.data(), bytes.size(), 0, &m), "load_buffer");
    return m;
}

braid_context* make_context(braid_model* m, const int64_t* shape, size_t ndim, const float* x) {
    braid_context* ctx = nullptr;
    check(braid_context_create(m, &ctx), "context_create");
    check(braid_context_set_input(ctx, "x", BRAID_FLOAT32, shape, ndim, x), "set_input");
    return ctx;
}

std::shared_ptr<Tensor> uniform(const TensorShape& shape, float scale, unsigned seed) {
    auto t = std::make_shared<Tensor>(shape, dtype::Float32());
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t->ptr<float>()[i] = dist(rng);
    return t;
}

size_t rss_bytes() {
    size_t pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%zu %zu", &pages, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    return resident * size_t(sysconf(_SC_PAGESIZE));
}

//! The "RssFile:" line of /proc/self/status in bytes: resident pages of mapped files.
size_t rss_file_bytes() {
    size_t kib = 0;
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
        char line[256];
        while (std::fgets(line, sizeof line, f))
            if (std::sscanf(line, "RssFile: %zu kB", &kib) == 1) break;
        std::fclose(f);
    }
    return kib * 1024;
}

void overhead_1op() {
    auto graph = ComputingGraph::make({});
    auto x = opr::Input::make(*graph, "x", dtype::Float32(), {16});
    SymbolVar y = opr::relu(x).rename("y");
    std::vector<uint8_t> bytes;
    dump({y}, bytes);
    float in[16];
    double sum = 0;
    for (int i = 0; i < 16; ++i) in[i] = float(i) - 8.f;
    const int64_t shape[] = {16};
    braid_model* m = load_buffer(bytes);
    braid_context* ctx = make_context(m, shape, 1, in);
    braid_run_options opt = {};
    const void* out = nullptr;
    size_t out_bytes = 0;
    const int warmup = 1000, runs = 1000000;
    for (int i = 0; i < warmup; ++i) check(braid_context_run(ctx, &opt), "run");
    uint64_t allocs0 = g_allocs.load();
    auto t0 = Clock::now();
    for (int i = 0; i < runs; ++i) {
        check(braid_context_run(ctx, &opt), "run");
        check(braid_context_output(ctx, "y", &out, &out_bytes), "output");
        sum += static_cast<const float*>(out)[15];
    }
    double ns = ns_since(t0) / runs;
    double allocs = double(g_allocs.load() - allocs0) / runs;
    if (out_bytes != 64 || sum != 7.0 * runs) {
        std::fprintf(stderr, "bench_embed: overhead_1op: wrong output\n");
        std::exit(1);
    }
    check(braid_context_destroy(ctx), "context_destroy");
    check(braid_model_release(m), "model_release");

    // Anchor: the same graph run by a bare Executable on the calling thread.
    GraphOptions go;
    go.default_comp_node = "cpu:default";
    auto g2 = ComputingGraph::make(go);
    auto x2 = opr::Input::make(*g2, "x", dtype::Float32(), {16});
    auto exec = g2->compile({opr::relu(x2)});
    Tensor xin(TensorShape{16}, dtype::Float32());
    std::copy(in, in + 16, xin.ptr<float>());
    exec->feed("x", xin);
    for (int i = 0; i < warmup; ++i) exec->run();
    allocs0 = g_allocs.load();
    t0 = Clock::now();
    for (int i = 0; i < runs; ++i) exec->run();
    double exec_ns = ns_since(t0) / runs;
    double exec_allocs = double(g_allocs.load() - allocs0) / runs;
    std::printf("{\"bench\":\"embed\",\"case\":\"overhead_1op\",\"ns_per_run\":%.1f,"
                "\"allocs_per_run\":%.2f,\"executable_ns_per_run\":%.1f,"
                "\"executable_allocs_per_run\":%.2f,\"vs_executable\":%.2f,\"runs\":%d,"
                "\"target_ns\":1000,\"target_allocs\":0}\n",
                ns, allocs, exec_ns, exec_allocs, ns / exec_ns, runs);
}

void shared_weights() {
    const size_t n = 4096, nr_contexts = 8;
    auto path = std::filesystem::temp_directory_path() /
                ("bench_embed_" + std::to_string(getpid()) + ".braid");
    {
        auto graph = ComputingGraph::make({});
        auto x = opr::Input::make(*graph, "x", dtype::Float32(), {1, n});
        auto w = opr::SharedParam::make(*graph, uniform({n, n}, 0.05f, 1), "w");
        dump({opr::matmul(x, w).rename("y")}, path.string());
    }
    braid_model* m = nullptr;
    check(braid_model_load_file(path.c_str(), &m), "load_file");
    size_t weights = 0, arena = 0;
    check(braid_model_weight_bytes(m, &weights), "weight_bytes");
    std::vector<float> in(n, 1.f);
    const int64_t shape[] = {1, int64_t(n)};
    std::vector<braid_context*> ctxs;
    size_t rss_1 = 0, rss_file_1 = 0; // the mapped weights are file pages, not anonymous
    for (size_t i = 0; i < nr_contexts; ++i) {
        ctxs.push_back(make_context(m, shape, 2, in.data()));
        check(braid_context_run(ctxs.back(), nullptr), "run");
        if (i == 0) rss_1 = rss_bytes(), rss_file_1 = rss_file_bytes();
    }
    size_t rss_all = rss_bytes();
    check(braid_context_arena_bytes(ctxs[0], &arena), "arena_bytes");
    double per_context = (double(rss_all) - double(rss_1)) / double(nr_contexts - 1);
    size_t target = arena + (size_t(1) << 20);
    for (auto* c : ctxs) check(braid_context_destroy(c), "context_destroy");
    check(braid_model_release(m), "model_release");
    std::filesystem::remove(path);
    std::printf("{\"bench\":\"embed\",\"case\":\"shared_weights\",\"contexts\":%zu,"
                "\"weights_bytes\":%zu,\"arena_bytes\":%zu,\"rss_after_1_bytes\":%zu,"
                "\"rss_file_after_1_bytes\":%zu,\"rss_after_%zu_bytes\":%zu,\"rss_per_extra_"
                "context_bytes\":%.0f,"
                "\"target_bytes\":%zu,\"vs_target\":%.3f}\n",
                nr_contexts, weights, arena, rss_1, rss_file_1, nr_contexts, rss_all, per_context,
                target, per_context / double(target));
}

double thread_cpu_s() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

//! Runs per second of `nr_threads` threads, each with its own context, for `seconds`; sets
//! `cpu_share` to the threads' mean CPU time over wall time (below 1: the cores were shared).
double runs_per_s(braid_model* m, size_t nr_threads, double seconds, double& cpu_share,
                  int deterministic = 0) {
    const int64_t shape[] = {64, 784};
    std::vector<float> in(64 * 784, 0.5f);
    std::vector<braid_context*> ctxs;
    for (size_t i = 0; i < nr_threads; ++i) ctxs.push_back(make_context(m, shape, 2, in.data()));
    std::atomic<size_t> ready{0};
    std::vector<double> rate(nr_threads), share(nr_threads);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < nr_threads; ++t)
        threads.emplace_back([&, t] {
            braid_run_options opt = {};
            opt.max_threads = 1;
            opt.deterministic = deterministic;
            for (int i = 0; i < 20; ++i) check(braid_context_run(ctxs[t], &opt), "run"); // warm-up
            // Start together, once every context is compiled and warm.
            for (++ready; ready < nr_threads;) std::this_thread::yield();
            auto t0 = Clock::now();
            double cpu0 = thread_cpu_s();
            size_t runs = 0;
            for (; ns_since(t0) < seconds * 1e9; ++runs)
                check(braid_context_run(ctxs[t], &opt), "run");
            double wall = ns_since(t0) / 1e9;
            rate[t] = double(runs) / wall;
            share[t] = (thread_cpu_s() - cpu0) / wall;
        });
    for (auto& t : threads) t.join();
    for (auto* c : ctxs) check(braid_context_destroy(c), "context_destroy");
    double total = 0;
    cpu_share = 0;
    for (size_t t = 0; t < nr_threads; ++t) {
        total += rate[t];
        cpu_share += share[t] / double(nr_threads);
    }
    return total;
}

void throughput() {
    auto graph = ComputingGraph::make({});
    std::vector<uint8_t> bytes;
    dump(examples::build_mlp(*graph), bytes);
    braid_model* m = load_buffer(bytes);
    double share_1 = 0, share_2 = 0;
    double one = runs_per_s(m, 1, 1.0, share_1), two = runs_per_s(m, 2, 1.0, share_2);
    check(braid_model_release(m), "model_release");
    std::printf("{\"bench\":\"embed\",\"case\":\"throughput\",\"model\":\"mlp\",\"batch\":64,"
                "\"max_threads\":1,\"hardware_threads\":%u,\"runs_per_s_1\":%.0f,"
                "\"runs_per_s_2\":%.0f,\"speedup\":%.2f,\"cpu_share_1\":%.2f,\"cpu_share_2\":%.2f,"
                "\"target\":1.8}\n",
                std::thread::hardware_concurrency(), one, two, two / one, share_1, share_2);
}

//! Microseconds to create a context of `bytes`'s model (median of 50), and its first run's.
void context_create(const char* name, const std::vector<uint8_t>& bytes) {
    braid_model* m = load_buffer(bytes);
    std::vector<double> create_us;
    for (int i = 0; i < 50; ++i) {
        braid_context* ctx = nullptr;
        auto t0 = Clock::now();
        check(braid_context_create(m, &ctx), "context_create");
        create_us.push_back(ns_since(t0) / 1e3);
        check(braid_context_destroy(ctx), "context_destroy");
    }
    std::sort(create_us.begin(), create_us.end());
    check(braid_model_release(m), "model_release");
    std::printf("{\"bench\":\"embed\",\"case\":\"context_create\",\"model\":\"%s\","
                "\"create_us_p50\":%.1f,\"create_us_max\":%.1f,\"target_us\":1000}\n",
                name, create_us[create_us.size() / 2], create_us.back());
}

void context_create() {
    auto g1 = ComputingGraph::make({});
    std::vector<uint8_t> mlp, block;
    dump(examples::build_mlp(*g1), mlp);
    auto g2 = ComputingGraph::make({});
    dump(examples::build_transformer_block(*g2), block);
    context_create("mlp", mlp);
    context_create("transformer_block", block);
}

//! Milliseconds of one run of `ctx` (median of `runs`).
double median_run_ms(braid_context* ctx, int runs) {
    std::vector<double> ms;
    for (int i = 0; i < runs; ++i) {
        auto t0 = Clock::now();
        check(braid_context_run(ctx, nullptr), "run");
        ms.push_back(ns_since(t0) / 1e6);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

void cancel() {
    const size_t n = 256, chain = 40;
    auto w = uniform({n, n}, 1.f, 2);
    auto model_of = [&](size_t matmuls, double scale) {
        auto graph = ComputingGraph::make({});
        SymbolVar y = opr::Input::make(*graph, "x", dtype::Float32(), {n, n});
        auto wv = opr::SharedParam::make(*graph, w, "w");
        for (size_t i = 0; i < matmuls; ++i)
            y = scale == 1.0 ? opr::matmul(y, wv) : opr::matmul(y, wv) * scale;
        std::vector<uint8_t> bytes;
        dump({y.rename("y")}, bytes);
        return bytes;
    };
    std::vector<float> in(n * n, 1.f);
    const int64_t shape[] = {int64_t(n), int64_t(n)};
    // The longest kernel: one matmul alone (the scale is an elementwise op of its own).
    auto one_bytes = model_of(1, 1.0);
    braid_model* one = load_buffer(one_bytes);
    braid_context* one_ctx = make_context(one, shape, 2, in.data());
    median_run_ms(one_ctx, 5);
    double kernel_ms = median_run_ms(one_ctx, 51);
    check(braid_context_destroy(one_ctx), "context_destroy");
    check(braid_model_release(one), "model_release");

    auto chain_bytes = model_of(chain, 0.05);
    braid_model* m = load_buffer(chain_bytes);
    braid_context* ctx = make_context(m, shape, 2, in.data());
    median_run_ms(ctx, 3);
    double run_ms = median_run_ms(ctx, 11);
    braid_cancel_token* token = nullptr;
    check(braid_cancel_token_create(&token), "cancel_token_create");
    braid_run_options opt = {};
    opt.cancel = token;
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> delay_ms(0.0, run_ms);
    std::vector<double> latency_ms;
    int finished = 0; // runs that ended before the cancel came
    while (latency_ms.size() < 100 && finished < 1000) {
        check(braid_cancel_token_reset(token), "cancel_token_reset");
        Clock::time_point cancelled_at;
        auto delay = std::chrono::duration<double, std::milli>(delay_ms(rng));
        std::thread canceller([&] {
            std::this_thread::sleep_for(delay);
            cancelled_at = Clock::now();
            check(braid_cancel_token_cancel(token), "cancel");
        });
        braid_status* s = braid_context_run(ctx, &opt);
        auto returned_at = Clock::now();
        canceller.join();
        braid_code code = braid_status_code(s);
        braid_status_free(s);
        if (code == BRAID_OK) {
            ++finished;
        } else if (code == BRAID_CANCELLED) {
            latency_ms.push_back(
                std::chrono::duration<double, std::milli>(returned_at - cancelled_at).count());
        } else {
            std::fprintf(stderr, "bench_embed: cancel: run ended with %s\n", braid_code_name(code));
            std::exit(1);
        }
    }
    check(braid_cancel_token_destroy(token), "cancel_token_destroy");
    check(braid_context_destroy(ctx), "context_destroy");
    check(braid_model_release(m), "model_release");
    std::sort(latency_ms.begin(), latency_ms.end());
    auto pct = [&](double p) { return latency_ms[size_t(p * double(latency_ms.size() - 1))]; };
    double target = std::max(1.0, kernel_ms);
    std::printf("{\"bench\":\"embed\",\"case\":\"cancel\",\"cancellations\":%zu,"
                "\"finished_first\":%d,\"run_ms\":%.2f,\"kernel_threads\":%zu,\"p50_ms\":%.3f,"
                "\"p99_ms\":%.3f,\"max_ms\":%.3f,\"longest_kernel_ms\":%.3f,\"target_ms\":%.3f,"
                "\"vs_target\":%.2f}\n",
                latency_ms.size(), finished, run_ms, kernel_threads(), pct(0.5), pct(0.99),
                latency_ms.back(), kernel_ms, target, pct(0.99) / target);
}

//! Deterministic mode (braid_run_options.deterministic) against the default in the same run:
//! the examples' mlp at batch 64 on one thread, three alternating rounds, best of each.
void deterministic_cost() {
    auto graph = ComputingGraph::make({});
    std::vector<uint8_t> bytes;
    dump(examples::build_mlp(*graph), bytes);
    braid_model* m = load_buffer(bytes);
    double share = 0, plain = 0, det = 0;
    for (int round = 0; round < 3; ++round) {
        plain = std::max(plain, runs_per_s(m, 1, 0.5, share, 0));
        det = std::max(det, runs_per_s(m, 1, 0.5, share, 1));
    }
    check(braid_model_release(m), "model_release");
    std::printf("{\"bench\":\"embed\",\"case\":\"deterministic\",\"model\":\"mlp\","
                "\"batch\":64,\"max_threads\":1,\"runs_per_s_default\":%.0f,"
                "\"runs_per_s_deterministic\":%.0f,\"latency_ratio\":%.2f,\"target\":1.15}\n",
                plain, det, plain / det);
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"bench_embed: the embedding C API's run overhead, memory per context, "
                 "throughput and cancellation latency"};
    bool json = false;
    app.add_flag("--json", json, "accepted for symmetry: the output is always JSON lines");
    if (auto status = bench::parse_command_line(app, argc, argv)) return *status;
    overhead_1op();
    shared_weights();
    throughput();
    cancel();
    context_create();
    deterministic_cost();
    return 0;
}
