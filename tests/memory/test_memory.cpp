// DType, TensorShape, TensorLayout, Storage and Tensor.
#include "base/error.h"
#include "base/thread_pool.h"
#include "memory/memory_budget.h"
#include "memory/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <dirent.h>
#include <fstream>
#include <limits>
#include <sched.h>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>

using namespace braid;

TEST(DType, NamesSizesAndParsing) {
    EXPECT_EQ(dtype::Float32().size(), 4u);
    EXPECT_EQ(dtype::BFloat16().size(), 2u);
    EXPECT_EQ(dtype::Int64().size(), 8u);
    EXPECT_EQ(dtype::Bool().size(), 1u);
    EXPECT_STREQ(dtype::Float16().name(), "float16");
    EXPECT_EQ(DType::from_name("uint8"), dtype::Uint8());
    EXPECT_THROW(DType::from_name("float128"), DTypeError);
    EXPECT_FALSE(DType().valid());
}

TEST(DType, HalfConversionRoundsToNearestEven) {
    EXPECT_EQ(float_to_half(1.0f), 0x3c00);
    EXPECT_EQ(float_to_half(-2.0f), 0xc000);
    EXPECT_EQ(float_to_half(65504.f), 0x7bff);
    EXPECT_EQ(float_to_half(65520.f), 0x7c00);                // overflow to infinity
    EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);     // tie -> even
    EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);     // tie -> even (up)
    EXPECT_EQ(float_to_half(5.960464477539063e-08f), 0x0001); // smallest subnormal
    EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
    for (uint32_t h = 0; h < 0x7c00; h += 7) // round trip of every 7th finite half
        EXPECT_EQ(float_to_half(half_to_float(uint16_t(h))), h);
}

TEST(DType, BFloat16ConversionRoundsToNearestEven) {
    EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
    EXPECT_FLOAT_EQ(bf16_to_float(float_to_bf16(3.140625f)), 3.140625f);
    uint32_t bits = 0x3f808000; // exactly halfway between 0x3f80 and 0x3f81 -> even
    float f;
    std::memcpy(&f, &bits, 4);
    EXPECT_EQ(float_to_bf16(f), 0x3f80);
    bits = 0x3f818000;
    std::memcpy(&f, &bits, 4);
    EXPECT_EQ(float_to_bf16(f), 0x3f82);
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(DType, ConversionsSaturateAndTruncate) {
    uint8_t u8[3];
    float src[3] = {-5.f, 300.f, 7.9f};
    convert_elements(dtype::Float32(), src, dtype::Uint8(), u8, 3);
    EXPECT_EQ(u8[0], 0);
    EXPECT_EQ(u8[1], 255);
    EXPECT_EQ(u8[2], 7);
    int32_t i32[2] = {-3, 4};
    uint8_t b[2];
    convert_elements(dtype::Int32(), i32, dtype::Bool(), b, 2);
    EXPECT_EQ(b[0], 1);
    EXPECT_EQ(load_as_double(dtype::Int8(), "\xff", 0), -1.0);
}

TEST(TensorShape, ElementsEqualityPrinting) {
    TensorShape s{2, 3, 4};
    EXPECT_EQ(s.total_nr_elems(), 24u);
    EXPECT_EQ(s.to_string(), "{2,3,4}");
    EXPECT_EQ(TensorShape{}.total_nr_elems(), 1u);
    EXPECT_EQ(TensorShape{}.to_string(), "{}");
    EXPECT_TRUE((TensorShape{0, 5}).is_empty());
    EXPECT_NE(s, (TensorShape{2, 3}));
    EXPECT_THROW(TensorShape({1, 1, 1, 1, 1, 1, 1, 1}), ShapeError);
    TensorShape out;
    TensorShape a{3, 1}, b{4};
    const TensorShape* both[] = {&a, &b};
    ASSERT_TRUE(broadcast_shapes(both, 2, out));
    EXPECT_EQ(out, (TensorShape{3, 4}));
    TensorShape c{3};
    const TensorShape* bad[] = {&b, &c};
    EXPECT_FALSE(broadcast_shapes(bad, 2, out));
}

TEST(TensorLayout, StridesContiguityBroadcast) {
    TensorLayout l({2, 3, 4}, dtype::Float32());
    EXPECT_EQ(l.stride[0], 12);
    EXPECT_EQ(l.stride[2], 1);
    EXPECT_TRUE(l.is_contiguous());
    EXPECT_EQ(l.span_bytes(), 96u);
    auto b = TensorLayout({3, 1}, dtype::Float32()).broadcast({2, 3, 5});
    EXPECT_EQ(b.stride[0], 0);
    EXPECT_EQ(b.stride[2], 0);
    EXPECT_FALSE(b.is_contiguous());
    EXPECT_THROW(l.broadcast({2, 3, 5}), ShapeError);
}

TEST(Tensor, ViewsShareStorageAndCopiesDoNot) {
    Tensor t(TensorShape{4, 4}, dtype::Float32());
    for (int i = 0; i < 16; ++i) t.ptr<float>()[i] = float(i);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_ptr()) % 64, 0u);
    // Column 1 as a strided view.
    TensorLayout col({4}, dtype::Float32());
    col.stride[0] = 4;
    Tensor c = t.view(col, 4);
    EXPECT_EQ(c.at(2), 9.0);
    EXPECT_EQ(c.storage().block_id(), t.storage().block_id());
    Tensor cc = c.contiguous();
    EXPECT_NE(cc.storage().block_id(), t.storage().block_id());
    EXPECT_EQ(cc.at(3), 13.0);
    Tensor r = t.reshape({2, 8});
    EXPECT_EQ(r.at(15), 15.0);
    t.ptr<float>()[15] = -1;
    EXPECT_EQ(r.at(15), -1.0);
    EXPECT_THROW(c.reshape({2, 2}), ShapeError);
    EXPECT_THROW(t.reshape({5}), ShapeError);
    EXPECT_THROW(t.view(TensorLayout({5, 4}, dtype::Float32())), ShapeError); // overruns
    EXPECT_THROW(t.ptr<double>(), DTypeError);
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
    std::vector<std::atomic<int>> hits(100000);
    parallel_for(hits.size(), 1000, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    EXPECT_THROW(parallel_for(10000, 10,
                              [](size_t b, size_t) {
                                  if (b > 5000) throw ValueError("chunk failed");
                              }),
                 ValueError);
}

TEST(ThreadPool, RegionsAfterTheWorkersSleptCoverEveryIndexOnce) {
    // Workers asleep (past their poll) wake to regions the caller may have finished and closed
    // alone; they must neither run a chunk twice nor touch a region that is gone. Small and
    // large regions, each after a pause longer than the workers' poll.
    size_t saved = kernel_threads();
    for (size_t threads : {size_t(2), size_t(3)}) {
        set_kernel_threads(threads);
        for (int r = 0; r < 40; ++r) {
            std::this_thread::sleep_for(std::chrono::microseconds(r % 2 ? 300 : 50));
            std::vector<std::atomic<int>> hits(r % 4 < 2 ? 64 : 20000);
            parallel_for(hits.size(), 8, [&](size_t b, size_t e) {
                for (size_t i = b; i < e; ++i) hits[i]++;
            });
            for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "threads " << threads << " round " << r;
        }
    }
    set_kernel_threads(saved);
}

namespace {

//! The ids of this process's threads.
std::set<std::string> thread_ids() {
    std::set<std::string> ids;
    if (DIR* d = opendir("/proc/self/task")) {
        while (dirent* e = readdir(d))
            if (e->d_name[0] != '.') ids.insert(e->d_name);
        closedir(d);
    }
    return ids;
}

//! Milliseconds of CPU thread `id` of this process has used (its schedstat).
double thread_cpu_ms(const std::string& id) {
    std::ifstream in("/proc/self/task/" + id + "/schedstat");
    double ns = 0;
    in >> ns;
    return ns / 1e6;
}

} // namespace

TEST(ThreadPool, IdleWorkersSleep) {
    // Workers poll for a moment after a region, then sleep: an idle pool costs no CPU. Only
    // the pool's own threads are measured (a library loaded into the test may run threads of
    // its own at start-up).
    size_t saved = kernel_threads();
    auto others = thread_ids();
    set_kernel_threads(3); // starts new workers
    std::vector<std::string> workers;
    for (auto& id : thread_ids())
        if (!others.count(id)) workers.push_back(id);
    ASSERT_EQ(workers.size(), 2u);
    std::vector<float> v(1 << 16, 1.f);
    for (int r = 0; r < 100; ++r)
        parallel_for(v.size(), 1024, [&](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) v[i] = v[i] * 0.5f + 1.f;
        });
    auto pool_cpu_ms = [&] {
        double ms = 0;
        for (auto& id : workers) ms += thread_cpu_ms(id);
        return ms + thread_cpu_ms(std::to_string(gettid()));
    };
    double before = pool_cpu_ms();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    double used = pool_cpu_ms() - before;
    set_kernel_threads(saved);
    EXPECT_LT(used, 30.0) << "the pool used " << used << " ms of CPU during 300 ms of idling";
}

TEST(ThreadPool, KnowsTheCpuItsWorkerLastRanARegionOn) {
    // A thread about to wait for a run on a comp node's thread moves off the CPU where the
    // pool's worker polls for the next region (Executable::wait): on_pool_worker_cpu() holds on
    // that one CPU alone, and on none without workers.
    cpu_set_t allowed;
    ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs, this process may use " << cpus.size();
    // The CPUs on which the calling thread, moved there, finds on_pool_worker_cpu().
    auto cpus_found = [&] {
        std::vector<int> found;
        for (int c : cpus) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            EXPECT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
            if (on_pool_worker_cpu()) found.push_back(c);
        }
        EXPECT_EQ(sched_setaffinity(0, sizeof allowed, &allowed), 0);
        return found;
    };
    size_t saved = kernel_threads();
    set_kernel_threads(1);
    EXPECT_EQ(cpus_found().size(), 0u) << "one thread: no worker";
    set_kernel_threads(2);
    // Regions of two chunks whose first chunk waits (at most 2 ms) for the worker's.
    auto caller = std::this_thread::get_id();
    std::atomic<bool> joined{false};
    for (int attempt = 0; attempt < 200 && !joined; ++attempt)
        parallel_for(2, 1, [&](size_t, size_t) {
            if (std::this_thread::get_id() != caller) joined = true;
            auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
            while (!joined && std::chrono::steady_clock::now() < until) {
            }
        });
    ASSERT_TRUE(joined) << "the worker joined none of 200 regions";
    EXPECT_EQ(cpus_found().size(), 1u);
    set_kernel_threads(saved);
}

TEST(TensorShape, SizesAreOverflowCheckedInOnePlace) {
    // {2^58, 784} float32: the byte size wraps to a multiple of 2^64 without the check.
    TensorShape wraps{size_t(1) << 58, 784};
    EXPECT_FALSE(wraps.packed_bytes(dtype::Float32()));
    EXPECT_THROW(wraps.total_nr_elems(), ShapeError);
    EXPECT_THROW(TensorLayout(wraps, dtype::Float32()).nr_bytes(), ShapeError);
    EXPECT_THROW(Tensor(wraps, dtype::Float32()), ShapeError);
    // Exactly 2^64 elements would wrap to 0.
    EXPECT_THROW((TensorShape{size_t(1) << 32, size_t(1) << 32}.total_nr_elems()), ShapeError);
    // The bound is on bytes: 2^54 float32 is exactly 2^56 bytes, one more element is over.
    EXPECT_EQ(*TensorShape{size_t(1) << 54}.packed_bytes(dtype::Float32()), size_t(1) << 56);
    EXPECT_FALSE(TensorShape{(size_t(1) << 54) + 1}.packed_bytes(dtype::Float32()));
    EXPECT_EQ(*TensorShape{(size_t(1) << 54) + 1}.packed_bytes(dtype::Int8()),
              (size_t(1) << 54) + 1);
    // A zero dim makes the tensor empty, but the other dims still count towards the bound, so
    // no partial product of a shape in bounds overflows.
    EXPECT_EQ(*TensorShape({0, 1000, 1000}).packed_bytes(dtype::Float32()), 0u);
    EXPECT_FALSE((TensorShape{0, size_t(1) << 40, size_t(1) << 40}.packed_bytes(dtype::Int8())));
    try {
        TensorShape({size_t(1) << 60, 4}).nr_bytes(dtype::Float16());
        FAIL();
    } catch (const ShapeError& e) {
        EXPECT_STREQ(e.what(),
                     "shape {1152921504606846976,4} of float16 is too large: more than 2^56 bytes");
    }
}

TEST(MemoryBudget, ByteSizesParseWithUnits) {
    EXPECT_EQ(parse_byte_size("1048576", "x"), 1048576u);
    EXPECT_EQ(parse_byte_size("512M", "x"), size_t(512) << 20);
    EXPECT_EQ(parse_byte_size("8G", "x"), size_t(8) << 30);
    EXPECT_EQ(parse_byte_size("8GiB", "x"), size_t(8) << 30);
    EXPECT_EQ(parse_byte_size("1.5t", "x"), size_t(3) << 39);
    EXPECT_EQ(parse_byte_size("4k", "x"), 4096u);
    for (auto* bad : {"", "G", "-1G", "0", "8Q", "1e3", "8 G", "99999999999T"})
        EXPECT_THROW(parse_byte_size(bad, "x"), ValueError) << bad;
    try {
        parse_byte_size("lots", "--memory-budget");
        FAIL();
    } catch (const ValueError& e) {
        EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("--memory-budget: \"lots\""));
    }
    EXPECT_EQ(format_bytes(3u << 30), "3.00 GiB");
    EXPECT_EQ(format_bytes(100), "100 B");
}

TEST(MemoryBudget, ConfiguredThenEnvironmentThenPhysicalMemory) {
    EXPECT_EQ(MemoryBudget::resolve(12345).bytes, 12345u);
    EXPECT_EQ(MemoryBudget::resolve(12345).source, "GraphOptions::memory_budget");
    ::setenv("BRAID_MEMORY_BUDGET", "3G", 1);
    EXPECT_EQ(MemoryBudget::resolve(0).bytes, size_t(3) << 30);
    EXPECT_EQ(MemoryBudget::resolve(0).source, "BRAID_MEMORY_BUDGET");
    ::setenv("BRAID_MEMORY_BUDGET", "three gigs", 1);
    EXPECT_THROW(MemoryBudget::resolve(0), ValueError);
    ::unsetenv("BRAID_MEMORY_BUDGET");
    auto physical = MemoryBudget::resolve(0);
    EXPECT_EQ(physical.source, "physical memory");
    EXPECT_GT(physical.bytes, size_t(64) << 20);
}
