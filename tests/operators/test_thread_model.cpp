// One thread model for the CPU kernels (operators/dense_kernels.h): the kernel libraries
// (OpenBLAS, oneDNN) run on the threads braid gives them, start no threads of their own while
// braid runs, and nothing spins once a run is over.
#include "checker.h"

#include "base/thread_pool.h"
#include "operators/kernel_utils.h"

#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <dirent.h>
#include <mutex>
#include <set>
#include <thread>

using namespace braid;
using namespace braid::test;

namespace {

size_t process_threads() {
    size_t n = 0;
    if (DIR* d = opendir("/proc/self/task")) {
        while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
        closedir(d);
    }
    return n;
}

double process_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

//! A GEMM, a convolution and attention, large enough that every kernel library and braid's
//! pool take part.
void run_dense_graph() {
    register_all_operators();
    std::mt19937 rng(1);
    GraphOptions opt;
    opt.default_comp_node = "cpu:default"; // the calling thread: no comp node worker
    auto g = ComputingGraph::make(opt);
    auto x = opr::ImmutableTensor::make(*g, random_tensor({128, 512}, dtype::Float32(), rng));
    auto w = opr::ImmutableTensor::make(*g, random_tensor({512, 256}, dtype::Float32(), rng));
    auto img =
        opr::ImmutableTensor::make(*g, random_tensor({1, 16, 32, 32}, dtype::Float32(), rng));
    auto f = opr::ImmutableTensor::make(*g, random_tensor({32, 16, 3, 3}, dtype::Float32(), rng));
    auto q = opr::ImmutableTensor::make(*g, random_tensor({1, 2, 64, 32}, dtype::Float32(), rng));
    auto exec = g->compile(
        {opr::matmul(x, w), opr::conv2d(img, f, 1, 1), opr::Attention::make(q, q, q)[0]});
    for (int i = 0; i < 3; ++i) exec->run();
}

} // namespace

TEST(ThreadModel, KernelLibrariesStartNoThreadsAndNothingSpinsAfterARun) {
    size_t saved = kernel_threads();
    set_kernel_threads(2); // starts braid's worker
    size_t threads = process_threads();
    // This thread and braid's worker: OpenBLAS's load-time server threads were stopped.
    EXPECT_EQ(threads, 2u);
    for (int i = 0; i < 3; ++i) run_dense_graph();
    EXPECT_EQ(process_threads(), threads) << "a kernel library started threads of its own";
    double before = process_cpu_ms();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    double idle = process_cpu_ms() - before;
    set_kernel_threads(saved);
    EXPECT_LT(idle, 30.0) << "the process used " << idle << " ms of CPU in 300 ms after its runs";
}

TEST(ThreadModel, MidSizedKernelsStayOnTheCallerWhileTheWorkersSleep) {
    // A kernel of PARALLEL_MIN_ELEMS .. PARALLEL_WAKE_ELEMS elements of work runs on the
    // calling thread when the pool's workers sleep (waking one costs more than the pass), and
    // a kernel of more is split.
    size_t saved = kernel_threads();
    set_kernel_threads(2);
    auto threads_used = [](size_t work) {
        std::mutex m;
        std::set<std::thread::id> ids;
        opr::parallel_range(work / 64, 64, [&](size_t, size_t) {
            // Long enough per chunk that a woken worker finds chunks left.
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            std::lock_guard lock(m);
            ids.insert(std::this_thread::get_id());
        });
        return ids;
    };
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // past the workers' poll
    EXPECT_FALSE(pool_workers_awake());
    auto mid = threads_used(opr::PARALLEL_WAKE_ELEMS / 2);
    EXPECT_EQ(mid.size(), 1u);
    EXPECT_TRUE(mid.count(std::this_thread::get_id()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(threads_used(opr::PARALLEL_WAKE_ELEMS * 2).size(), 2u);
    set_kernel_threads(saved);
}
