// Collective throughput of a communicator backend, as bus bandwidth (nccl-tests' definition)
// next to its anchor measured in the same run: single-thread memcpy bandwidth for "local",
// the raw MPI collective on the same buffers for "mpi", braid's mpi backend (and raw MPI) for
// "gloo", device-to-device copy bandwidth on cuda0 for "nccl".
//
//     bench_comm --backend local --ranks 2 --bytes 67108864 --json
//     mpirun -np 2 bench_comm --backend mpi --bytes 67108864 --json
//     mpirun -np 2 bench_comm --backend gloo --sweep --json   # gloo beside mpi, 4 KiB..64 MiB
//     bench_comm --backend nccl --bytes 67108864 --json     # every visible GPU, one thread each
//     bench_comm --backend local --ranks 2 --bytes 1048576 --via-graph
//     mpirun -np 2 bench_comm --backend mpi --bytes 1048576 --via-graph
//
// --via-graph also runs each op as a CollectiveComm operator in a compiled graph (one graph per
// rank: rank r's on comp node cpu<r> for "local", cpu0 of each process for "mpi"), alternating
// in blocks with the bare communicator call, and prints both times and their ratio: the
// cost of running the collective through an executable. A run hands the collective to the
// comp node's worker thread and waits for it (two thread wake-ups); --inline puts the graphs on
// "cpu:default" instead, which runs kernels in the calling thread, leaving the executable's
// and the operator's own cost.
//
// Times are medians of per-call times (the slowest rank's median), which shared, noisy
// machines disturb least. Bus bandwidth = bytes / time x factor: all_reduce 2(n-1)/n; all_gather,
// reduce_scatter and all_to_all (n-1)/n; broadcast 1. `bytes` is the whole buffer of the op
// (all_gather's recv, reduce_scatter's send, all_to_all's either); elements are float32.
#include "braid.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_rendezvous.h"
#include "memory/tensor.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

using namespace braid;
using namespace braid::comm;

namespace {

using Clock = std::chrono::steady_clock;

const std::vector<std::string> OPS = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                      "broadcast"};

double bus_factor(const std::string& op, size_t n) {
    if (n == 1) return op == "broadcast" ? 1.0 : 0.0;
    if (op == "all_reduce") return 2.0 * double(n - 1) / double(n);
    if (op == "broadcast") return 1.0;
    return double(n - 1) / double(n);
}

//! Per-rank buffers sized for the op (float32 elements).
struct Buffers {
    std::vector<float> send, recv;
    size_t count = 0; //!< the count argument of the call
};

Buffers make_buffers(const std::string& op, size_t bytes, size_t n) {
    size_t elems = bytes / sizeof(float);
    Buffers b;
    if (op == "all_reduce" || op == "broadcast") {
        b.send.assign(elems, 1.0f);
        b.recv.assign(elems, 0.0f);
        b.count = elems;
    } else if (op == "all_gather") {
        b.count = elems / n;
        b.send.assign(b.count, 1.0f);
        b.recv.assign(b.count * n, 0.0f);
    } else if (op == "reduce_scatter") {
        b.count = elems / n;
        b.send.assign(b.count * n, 1.0f);
        b.recv.assign(b.count, 0.0f);
    } else { // all_to_all
        b.count = elems / n;
        b.send.assign(b.count * n, 1.0f);
        b.recv.assign(b.count * n, 0.0f);
    }
    return b;
}

void run_op(Communicator& comm, const std::string& op, const float* send, float* recv,
            size_t count) {
    DType f32 = dtype::Float32();
    if (op == "all_reduce")
        comm.all_reduce(send, recv, count, f32, ReduceOp::SUM);
    else if (op == "all_gather")
        comm.all_gather(send, recv, count, f32);
    else if (op == "reduce_scatter")
        comm.reduce_scatter(send, recv, count, f32, ReduceOp::SUM);
    else if (op == "all_to_all")
        comm.all_to_all(send, recv, count, f32);
    else
        comm.broadcast(send, recv, count, f32, 0);
}

void run_op(Communicator& comm, const std::string& op, Buffers& b) {
    run_op(comm, op, b.send.data(), b.recv.data(), b.count);
}

void run_raw_mpi(MPI_Comm comm, const std::string& op, const float* send, float* recv,
                 size_t count) {
    int n = int(count);
    if (op == "all_reduce")
        BRAID_MPI_CHECK(MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, comm));
    else if (op == "all_gather")
        BRAID_MPI_CHECK(MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, comm));
    else if (op == "reduce_scatter")
        BRAID_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, comm));
    else if (op == "all_to_all")
        BRAID_MPI_CHECK(MPI_Alltoall(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, comm));
    else {
        // Same as braid's broadcast: the root's send becomes every recv.
        int rank;
        MPI_Comm_rank(comm, &rank);
        if (rank == 0) std::memcpy(recv, send, count * sizeof(float));
        BRAID_MPI_CHECK(MPI_Bcast(recv, n, MPI_FLOAT, 0, comm));
    }
}

void run_raw_mpi(MPI_Comm comm, const std::string& op, Buffers& b) {
    run_raw_mpi(comm, op, b.send.data(), b.recv.data(), b.count);
}

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

//! The median: robust against the preemptions of a shared machine.
double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values.empty() ? 0 : values[values.size() / 2];
}

//! Single-thread memcpy bandwidth over `bytes` (median of the runs), GB/s.
double memcpy_gbps(size_t bytes) {
    std::vector<char> src(bytes, 1), dst(bytes, 0);
    std::vector<double> runs;
    for (size_t i = 0; i < std::max<size_t>(5, (size_t(64) << 20) / bytes); ++i) {
        auto start = Clock::now();
        std::memcpy(dst.data(), src.data(), bytes);
        runs.push_back(seconds_since(start));
    }
    return double(bytes) / median(runs) / 1e9;
}

size_t iterations_for(size_t bytes) {
    return std::clamp<size_t>((size_t(256) << 20) / std::max<size_t>(bytes, 1), 5, 2000);
}

void print(bool json, const std::string& backend, const std::string& op, size_t n, size_t bytes,
           double us, double memcpy_bw, double raw_us) {
    double busbw = double(bytes) / (us * 1e-6) / 1e9 * bus_factor(op, n);
    if (json) {
        std::printf("{\"bench\":\"comm\",\"backend\":\"%s\",\"op\":\"%s\",\"ranks\":%zu,"
                    "\"bytes\":%zu,\"us\":%.2f,\"busbw_gbps\":%.3f,\"memcpy_gbps\":%.3f,"
                    "\"busbw_vs_memcpy\":%.3f",
                    backend.c_str(), op.c_str(), n, bytes, us, busbw, memcpy_bw, busbw / memcpy_bw);
        if (raw_us > 0)
            std::printf(",\"raw_mpi_us\":%.2f,\"vs_raw_mpi\":%.3f", raw_us, us / raw_us);
        std::printf("}\n");
    } else {
        std::printf("%-6s %-15s ranks %zu  %10zu B  %10.2f us  busbw %7.3f GB/s  (memcpy %.3f "
                    "GB/s)",
                    backend.c_str(), op.c_str(), n, bytes, us, busbw, memcpy_bw);
        if (raw_us > 0) std::printf("  raw MPI %.2f us (x%.3f)", raw_us, us / raw_us);
        std::printf("\n");
    }
    std::fflush(stdout);
}

//! The communicators of `ranks` local ranks of one group (joined from one thread each).
std::vector<std::shared_ptr<Communicator>>
join_local_ranks(const std::shared_ptr<GroupClient>& client, size_t ranks) {
    std::vector<std::shared_ptr<Communicator>> comms(ranks);
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            comms[r] =
                join_group(client, "local", "bench", uint32_t(ranks), false, UNASSIGNED_RANK, r)
                    .communicator;
        });
    for (auto& t : threads) t.join();
    return comms;
}

int bench_local(size_t ranks, size_t bytes, bool json, const std::vector<std::string>& ops,
                int reps) {
    double memcpy_bw = memcpy_gbps(bytes);
    auto client = std::make_shared<InProcessGroupClient>();
    auto comms = join_local_ranks(client, ranks);
    size_t iters = iterations_for(bytes);
    for (auto& op : ops) {
        std::vector<Buffers> buffers;
        for (size_t r = 0; r < ranks; ++r) buffers.push_back(make_buffers(op, bytes, ranks));
        std::barrier<> sync{std::ptrdiff_t(ranks)};
        std::vector<double> seconds(ranks, 0);
        std::vector<std::thread> threads;
        for (size_t r = 0; r < ranks; ++r)
            threads.emplace_back([&, r] {
                for (int i = 0; i < 2; ++i) run_op(*comms[r], op, buffers[r]); // warm-up
                std::vector<double> calls;
                for (int rep = 0; rep < reps; ++rep) {
                    sync.arrive_and_wait();
                    for (size_t i = 0; i < iters; ++i) {
                        auto start = Clock::now();
                        run_op(*comms[r], op, buffers[r]);
                        calls.push_back(seconds_since(start));
                    }
                }
                seconds[r] = median(calls);
            });
        for (auto& t : threads) t.join();
        double us = *std::max_element(seconds.begin(), seconds.end()) * 1e6;
        print(json, "local", op, ranks, bytes, us, memcpy_bw, 0);
    }
    return 0;
}

int bench_mpi(size_t bytes, bool json, const std::vector<std::string>& ops, int reps) {
    auto rendezvous = std::make_unique<MpiRendezvous>();
    int rank = rendezvous->world_rank(), size = rendezvous->world_size();
    auto comm = join_group(rendezvous->client(), "mpi", "bench", uint32_t(size), false,
                           UNASSIGNED_RANK, uint64_t(rank))
                    .communicator;
    MPI_Comm raw = static_cast<MpiCommunicator&>(*comm).mpi_comm();
    double memcpy_bw = memcpy_gbps(bytes);
    size_t iters = iterations_for(bytes);
    auto slowest = [&](double local) {
        double out = 0;
        BRAID_MPI_CHECK(MPI_Allreduce(&local, &out, 1, MPI_DOUBLE, MPI_MAX, raw));
        return out;
    };
    for (auto& op : ops) {
        Buffers b = make_buffers(op, bytes, size_t(size));
        for (int i = 0; i < 2; ++i) {
            run_op(*comm, op, b);
            run_raw_mpi(raw, op, b);
        }
        // Alternate the two call by call so both see the same machine noise.
        std::vector<double> braid_calls, raw_calls;
        for (int rep = 0; rep < reps; ++rep) {
            BRAID_MPI_CHECK(MPI_Barrier(raw));
            for (size_t i = 0; i < iters; ++i) {
                auto start = Clock::now();
                run_op(*comm, op, b);
                braid_calls.push_back(seconds_since(start));
                start = Clock::now();
                run_raw_mpi(raw, op, b);
                raw_calls.push_back(seconds_since(start));
            }
        }
        double braid_s = slowest(median(braid_calls)), raw_s = slowest(median(raw_calls));
        if (rank == 0)
            print(json, "mpi", op, size_t(size), bytes, braid_s * 1e6, memcpy_bw, raw_s * 1e6);
    }
    comm.reset();
    CommunicatorCache::instance().clear();
    BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    rendezvous.reset();
    return 0;
}

// ---------------------------------------------------------------- gloo
std::vector<double> alternating_block_medians(const std::vector<std::function<void()>>& calls,
                                              size_t blocks, size_t block,
                                              const std::function<void()>& sync);

// Ranks are processes started by mpirun, so that the same run measures gloo, braid's mpi
// backend and raw MPI side by side: the gloo group meets through the group manager that MPI
// rank 0 hosts (MpiRendezvous), over TCP like any gloo job. Calls of the three alternate, so
// all see the same machine noise; each size reports the slowest rank's medians.
int bench_gloo(const std::vector<size_t>& sizes, bool json, const std::vector<std::string>& ops,
               int reps) {
    auto rendezvous = std::make_unique<MpiRendezvous>();
    int rank = rendezvous->world_rank(), size = rendezvous->world_size();
    auto gloo = join_group(rendezvous->client(), "gloo", "bench-gloo", uint32_t(size), false,
                           int32_t(rank), uint64_t(rank))
                    .communicator;
    auto mpi = join_group(rendezvous->client(), "mpi", "bench-mpi", uint32_t(size), false,
                          int32_t(rank), uint64_t(rank))
                   .communicator;
    MPI_Comm raw = static_cast<MpiCommunicator&>(*mpi).mpi_comm();
    auto slowest = [&](double local) {
        double out = 0;
        BRAID_MPI_CHECK(MPI_Allreduce(&local, &out, 1, MPI_DOUBLE, MPI_MAX, raw));
        return out;
    };
    for (auto& op : ops)
        for (size_t bytes : sizes) {
            Buffers b = make_buffers(op, bytes, size_t(size));
            for (int i = 0; i < 2; ++i) {
                run_op(*gloo, op, b);
                run_op(*mpi, op, b);
                run_raw_mpi(raw, op, b);
            }
            // Blocks of calls, alternating between the three: interleaving single calls would
            // put gloo's thread wake-ups behind MPI's busy-polling peer, which measures the
            // interplay of the two, not gloo.
            size_t iters = std::min<size_t>(iterations_for(bytes), 400);
            auto t = alternating_block_medians({[&] { run_op(*gloo, op, b); },
                                                [&] { run_op(*mpi, op, b); },
                                                [&] { run_raw_mpi(raw, op, b); }},
                                               size_t(reps) * 4, std::max<size_t>(iters / 4, 1),
                                               [&] { BRAID_MPI_CHECK(MPI_Barrier(raw)); });
            double gloo_us = slowest(t[0]) * 1e6;
            double mpi_us = slowest(t[1]) * 1e6;
            double raw_us = slowest(t[2]) * 1e6;
            if (rank != 0) continue;
            auto busbw = [&](double us) {
                return double(bytes) / (us * 1e-6) / 1e9 * bus_factor(op, size_t(size));
            };
            if (json)
                std::printf("{\"bench\":\"comm\",\"backend\":\"gloo\",\"op\":\"%s\","
                            "\"ranks\":%d,\"bytes\":%zu,\"us\":%.2f,\"busbw_gbps\":%.3f,"
                            "\"mpi_us\":%.2f,\"mpi_busbw_gbps\":%.3f,\"raw_mpi_us\":%.2f,"
                            "\"gloo_vs_mpi\":%.3f}\n",
                            op.c_str(), size, bytes, gloo_us, busbw(gloo_us), mpi_us, busbw(mpi_us),
                            raw_us, mpi_us / gloo_us);
            else
                std::printf("gloo   %-15s ranks %d  %10zu B  gloo %10.2f us  busbw %7.3f GB/s  |  "
                            "mpi %10.2f us  busbw %7.3f GB/s  (raw MPI %.2f us)  gloo/mpi %.3f\n",
                            op.c_str(), size, bytes, gloo_us, busbw(gloo_us), mpi_us, busbw(mpi_us),
                            raw_us, mpi_us / gloo_us);
            std::fflush(stdout);
        }
    gloo.reset();
    mpi.reset();
    CommunicatorCache::instance().clear();
    BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    rendezvous.reset();
    return 0;
}

// ---------------------------------------------------------------- nccl
// GPUs as ranks: rank r runs on comp node cuda<r> from a thread of this process. A call
// returns once queued, so each timed repetition queues `iters` calls back to back and then
// waits for the stream (as nccl-tests does); the time of a call is the repetition's time over
// `iters`, the median over repetitions, of the slowest rank. Algorithm bandwidth is bytes /
// time, bus bandwidth that times nccl-tests' factor: all_reduce 2(n-1)/n; all_gather,
// reduce_scatter and all_to_all (n-1)/n; broadcast and reduce 1.

const std::vector<std::string> NCCL_OPS = {"all_reduce", "all_gather", "reduce_scatter",
                                           "all_to_all", "broadcast",  "reduce"};

//! One rank's device buffers for `op` (float32, sized as make_buffers sizes host ones).
struct DeviceBuffers {
    Tensor send, recv;
    size_t count = 0;
};

DeviceBuffers make_device_buffers(CompNode cn, const std::string& op, size_t bytes, size_t n) {
    bool per_rank_blocks = op == "all_gather" || op == "reduce_scatter" || op == "all_to_all";
    size_t elems = bytes / sizeof(float), count = per_rank_blocks ? elems / n : elems;
    size_t send_elems = op == "all_gather" ? count : per_rank_blocks ? count * n : count;
    size_t recv_elems = op == "reduce_scatter" ? count : per_rank_blocks ? count * n : count;
    DeviceBuffers b;
    b.count = count;
    b.send = Tensor(TensorShape{std::max<size_t>(send_elems, 1)}, dtype::Float32(), cn.allocator());
    b.recv = Tensor(TensorShape{std::max<size_t>(recv_elems, 1)}, dtype::Float32(), cn.allocator());
    Tensor ones(b.send.shape(), dtype::Float32());
    std::fill_n(ones.ptr<float>(), ones.shape().total_nr_elems(), 1.0f);
    cn.copy(b.send, ones);
    cn.device_sync();
    return b;
}

void run_device_op(Communicator& comm, const std::string& op, DeviceBuffers& b) {
    if (op == "reduce")
        comm.reduce(b.send.raw_ptr(), b.recv.raw_ptr(), b.count, dtype::Float32(), ReduceOp::SUM,
                    0);
    else if (op == "broadcast")
        comm.broadcast(b.send.raw_ptr(), b.recv.raw_ptr(), b.count, dtype::Float32(), 0);
    else if (op == "all_reduce")
        comm.all_reduce(b.send.raw_ptr(), b.recv.raw_ptr(), b.count, dtype::Float32(),
                        ReduceOp::SUM);
    else if (op == "all_gather")
        comm.all_gather(b.send.raw_ptr(), b.recv.raw_ptr(), b.count, dtype::Float32());
    else if (op == "reduce_scatter")
        comm.reduce_scatter(b.send.raw_ptr(), b.recv.raw_ptr(), b.count, dtype::Float32(),
                            ReduceOp::SUM);
    else
        comm.all_to_all(b.send.raw_ptr(), b.recv.raw_ptr(), b.count, dtype::Float32());
}

//! Device-to-device copy bandwidth of `bytes` on `cn` (median of batches), GB/s.
double d2d_copy_gbps(CompNode cn, size_t bytes) {
    TensorShape shape{std::max<size_t>(bytes, 1)};
    Tensor src(shape, dtype::Uint8(), cn.allocator()), dst(shape, dtype::Uint8(), cn.allocator());
    size_t iters = iterations_for(bytes);
    cn.copy(dst, src);
    cn.device_sync();
    std::vector<double> runs;
    for (int rep = 0; rep < 5; ++rep) {
        auto start = Clock::now();
        for (size_t i = 0; i < iters; ++i) cn.copy(dst, src);
        cn.device_sync();
        runs.push_back(seconds_since(start) / double(iters));
    }
    return double(bytes) / median(runs) / 1e9;
}

void print_nccl(bool json, const std::string& op, size_t n, size_t bytes, double us,
                double copy_bw) {
    double algbw = double(bytes) / (us * 1e-6) / 1e9;
    double factor = op == "broadcast" || op == "reduce" ? 1.0 : bus_factor(op, n);
    double busbw = algbw * factor;
    if (json)
        std::printf("{\"bench\":\"comm\",\"backend\":\"nccl\",\"op\":\"%s\",\"ranks\":%zu,"
                    "\"bytes\":%zu,\"us\":%.2f,\"algbw_gbps\":%.3f,\"busbw_gbps\":%.3f,"
                    "\"d2d_copy_gbps\":%.3f,\"busbw_vs_d2d_copy\":%.3f}\n",
                    op.c_str(), n, bytes, us, algbw, busbw, copy_bw, busbw / copy_bw);
    else
        std::printf("nccl   %-15s ranks %zu  %10zu B  %10.2f us  algbw %8.3f GB/s  busbw %8.3f "
                    "GB/s  (d2d copy %.3f GB/s)\n",
                    op.c_str(), n, bytes, us, algbw, busbw, copy_bw);
    std::fflush(stdout);
}

int bench_nccl(size_t ranks, bool ranks_given, size_t bytes, bool json,
               const std::vector<std::string>& ops, int reps) {
    auto names = CommunicatorRegistry::instance().names();
    if (std::find(names.begin(), names.end(), "nccl") == names.end()) {
        std::printf("bench_comm: this build has no NCCL backend (CUDA or NCCL not found)\n");
        return 0;
    }
    int devices = CompNode::cuda_device_count();
    if (devices == 0) {
        std::printf("bench_comm: no CUDA device found; nothing to measure\n");
        return 0;
    }
    if (!ranks_given) ranks = size_t(devices);
    if (ranks > size_t(devices)) {
        std::fprintf(stderr, "bench_comm: --ranks %zu needs %zu GPUs, %d found\n", ranks, ranks,
                     devices);
        return 1;
    }
    std::vector<CompNode> cns;
    for (size_t r = 0; r < ranks; ++r) cns.push_back(CompNode::load(fmt::format("cuda{}", r)));
    double copy_bw = d2d_copy_gbps(cns[0], bytes);
    auto client = std::make_shared<InProcessGroupClient>();
    std::vector<std::shared_ptr<Communicator>> comms(ranks);
    std::vector<std::string> errors(ranks);
    auto on_ranks = [&](auto&& body) {
        std::vector<std::thread> threads;
        for (size_t r = 0; r < ranks; ++r)
            threads.emplace_back([&, r] {
                try {
                    body(r);
                } catch (const std::exception& e) {
                    errors[r] = e.what();
                }
            });
        for (auto& t : threads) t.join();
        for (size_t r = 0; r < ranks; ++r)
            if (!errors[r].empty())
                throw std::runtime_error(fmt::format("rank {}: {}", r, errors[r]));
    };
    on_ranks([&](size_t r) {
        comms[r] = join_group(client, "nccl", "bench", uint32_t(ranks), false, UNASSIGNED_RANK,
                              cns[r].id(), cns[r])
                       .communicator;
    });
    size_t iters = iterations_for(bytes);
    for (auto& op : ops) {
        std::vector<double> seconds(ranks, 0);
        std::barrier<> sync{std::ptrdiff_t(ranks)};
        on_ranks([&](size_t r) {
            DeviceBuffers b = make_device_buffers(cns[r], op, bytes, ranks);
            Communicator& comm = *comms[r];
            for (int i = 0; i < 2; ++i) run_device_op(comm, op, b); // warm-up
            comm.synchronize();
            std::vector<double> runs;
            for (int rep = 0; rep < reps; ++rep) {
                sync.arrive_and_wait();
                auto start = Clock::now();
                for (size_t i = 0; i < iters; ++i) run_device_op(comm, op, b);
                comm.synchronize();
                runs.push_back(seconds_since(start) / double(iters));
            }
            seconds[r] = median(runs);
        });
        double us = *std::max_element(seconds.begin(), seconds.end()) * 1e6;
        print_nccl(json, op, ranks, bytes, us, copy_bw);
    }
    comms.clear();
    CommunicatorCache::instance().clear();
    return 0;
}

// ---------------------------------------------------------------- --via-graph
// The same collectives as CollectiveComm operators in a compiled graph, beside the bare calls.

opr::CollectiveMode collective_mode_of(const std::string& op) {
    if (op == "all_reduce") return opr::CollectiveMode::ALL_REDUCE_SUM;
    if (op == "all_gather") return opr::CollectiveMode::ALL_GATHER;
    if (op == "reduce_scatter") return opr::CollectiveMode::REDUCE_SCATTER_SUM;
    if (op == "all_to_all") return opr::CollectiveMode::ALL_TO_ALL;
    return opr::CollectiveMode::BROADCAST;
}

/*!
 * One rank's graph running `op` on the data of the bare call on `b`. After warm_up(), the bare
 * calls use the graph's own input and output memory (send(), recv()), so both read and write
 * the same bytes and differ only in how the collective is started.
 */
struct CollectiveGraph {
    std::unique_ptr<Executable> exec;
    Tensor input, output;
    size_t count = 0;         //!< the count argument of the bare call
    float expected_first = 0; //!< output element 0 after the first run (inputs are all 1)

    CollectiveGraph(const std::string& op, const Buffers& b, size_t n, uint32_t rank,
                    const std::string& comp_node, std::shared_ptr<GroupClient> client,
                    const std::string& backend)
        : count(b.count) {
        GraphOptions options;
        options.default_comp_node = comp_node;
        auto graph = ComputingGraph::make(options);
        opr::CollectiveParam p;
        p.key = "bench-graph-" + op;
        p.nr_devices = uint32_t(n);
        p.rank = int32_t(rank);
        p.is_root = rank == 0;
        p.group_client = std::move(client);
        p.mode = collective_mode_of(op);
        p.backend = backend;
        SymbolVar x;
        input = Tensor(TensorShape{b.send.size()}, dtype::Float32());
        std::fill_n(input.ptr<float>(), b.send.size(), 1.0f);
        if (op != "broadcast" || rank == 0)
            x = opr::Input::make(*graph, "x", dtype::Float32(), input.shape());
        auto y = opr::CollectiveComm::make(x, *graph, p);
        exec = graph->compile({y});
        if (x.valid()) exec->feed("x", input);
        expected_first = op == "all_reduce" || op == "reduce_scatter" ? float(n) : 1.0f;
    }

    //! The first run (joins the group and checks the peers, which later runs do not repeat)
    //! and a check of its result.
    void warm_up() {
        exec->run();
        output = exec->output(0); // the same memory in every run: the plan does not change
        float got = output.ptr<float>()[0];
        if (got != expected_first)
            BRAID_THROW(InternalError, "bench_comm --via-graph: output[0] is {}, expected {}", got,
                        expected_first);
        exec->run();
    }
    const float* send() const { return input.ptr<float>(); }
    float* recv() const { return output.ptr<float>(); }
};

void print_via_graph(bool json, const std::string& backend, const std::string& op, size_t n,
                     size_t bytes, bool inline_run, double bare_us, double graph_us,
                     double raw_us) {
    const char* where = inline_run ? "inline" : "worker";
    if (json) {
        std::printf("{\"bench\":\"comm_via_graph\",\"backend\":\"%s\",\"op\":\"%s\",\"ranks\":%zu,"
                    "\"bytes\":%zu,\"graph_runs_on\":\"%s\",\"bare_us\":%.2f,\"graph_us\":%.2f,"
                    "\"graph_vs_bare\":%.4f",
                    backend.c_str(), op.c_str(), n, bytes, where, bare_us, graph_us,
                    graph_us / bare_us);
        if (raw_us > 0)
            std::printf(",\"raw_mpi_us\":%.2f,\"graph_vs_raw_mpi\":%.4f", raw_us,
                        graph_us / raw_us);
        std::printf("}\n");
    } else {
        std::printf("%-6s %-15s ranks %zu  %10zu B  bare %10.2f us  graph (%s) %10.2f us  (x%.4f)",
                    backend.c_str(), op.c_str(), n, bytes, bare_us, where, graph_us,
                    graph_us / bare_us);
        if (raw_us > 0) std::printf("  raw MPI %.2f us", raw_us);
        std::printf("\n");
    }
    std::fflush(stdout);
}

//! Per-call seconds of each of `calls`, measured in alternating blocks of `block` calls of one
//! kind that every rank starts together (`sync` before each block), so that a peer still
//! finishing one kind of call is not charged to the next kind; the median over `blocks` blocks.
std::vector<double> alternating_block_medians(const std::vector<std::function<void()>>& calls,
                                              size_t blocks, size_t block,
                                              const std::function<void()>& sync) {
    std::vector<std::vector<double>> per_call(calls.size());
    for (size_t b = 0; b < blocks; ++b)
        for (size_t k = 0; k < calls.size(); ++k) {
            sync();
            auto start = Clock::now();
            for (size_t i = 0; i < block; ++i) calls[k]();
            per_call[k].push_back(seconds_since(start) / double(block));
        }
    std::vector<double> out;
    for (auto& v : per_call) out.push_back(median(v));
    return out;
}

//! The comp node of rank r's graph: its worker thread, or the calling thread (`inline_run`).
std::string graph_comp_node(bool inline_run, size_t r) {
    return inline_run ? "cpu:default" : fmt::format("cpu{}", r);
}

int bench_local_via_graph(size_t ranks, size_t bytes, bool json,
                          const std::vector<std::string>& ops, int reps, bool inline_run) {
    register_all_operators();
    auto client = std::make_shared<InProcessGroupClient>();
    auto comms = join_local_ranks(client, ranks);
    size_t iters = iterations_for(bytes);
    for (auto& op : ops) {
        std::vector<Buffers> buffers;
        for (size_t r = 0; r < ranks; ++r) buffers.push_back(make_buffers(op, bytes, ranks));
        std::barrier<> sync{std::ptrdiff_t(ranks)};
        std::vector<double> bare(ranks, 0), graph(ranks, 0);
        std::vector<std::string> errors(ranks);
        std::vector<std::thread> threads;
        for (size_t r = 0; r < ranks; ++r)
            threads.emplace_back([&, r] {
                try {
                    CollectiveGraph g(op, buffers[r], ranks, uint32_t(r),
                                      graph_comp_node(inline_run, r), client, "local");
                    g.warm_up();
                    for (int i = 0; i < 2; ++i) run_op(*comms[r], op, g.send(), g.recv(), g.count);
                    // Blocks of each kind alternate, so both see the same machine noise.
                    auto t = alternating_block_medians(
                        {[&] { run_op(*comms[r], op, g.send(), g.recv(), g.count); },
                         [&] { g.exec->run(); }},
                        size_t(reps) * 8, std::max<size_t>(iters / 8, 1),
                        [&] { sync.arrive_and_wait(); });
                    bare[r] = t[0];
                    graph[r] = t[1];
                } catch (const std::exception& e) {
                    errors[r] = e.what();
                }
            });
        for (auto& t : threads) t.join();
        for (auto& e : errors)
            if (!e.empty()) BRAID_THROW(Error, "{}", e);
        print_via_graph(json, "local", op, ranks, bytes, inline_run,
                        *std::max_element(bare.begin(), bare.end()) * 1e6,
                        *std::max_element(graph.begin(), graph.end()) * 1e6, 0);
    }
    return 0;
}

int bench_mpi_via_graph(size_t bytes, bool json, const std::vector<std::string>& ops, int reps,
                        bool inline_run) {
    register_all_operators();
    mpi_ensure_initialized();
    auto rendezvous = std::make_unique<MpiRendezvous>();
    int rank = rendezvous->world_rank(), size = rendezvous->world_size();
    auto comm = join_group(rendezvous->client(), "mpi", "bench", uint32_t(size), false,
                           UNASSIGNED_RANK, uint64_t(rank))
                    .communicator;
    MPI_Comm raw = static_cast<MpiCommunicator&>(*comm).mpi_comm();
    size_t iters = iterations_for(bytes);
    auto slowest = [&](double local) {
        double out = 0;
        BRAID_MPI_CHECK(MPI_Allreduce(&local, &out, 1, MPI_DOUBLE, MPI_MAX, raw));
        return out;
    };
    for (auto& op : ops) {
        Buffers b = make_buffers(op, bytes, size_t(size));
        CollectiveGraph g(op, b, size_t(size), uint32_t(rank), graph_comp_node(inline_run, 0),
                          rendezvous->client(), "mpi");
        g.warm_up();
        for (int i = 0; i < 2; ++i) {
            run_op(*comm, op, g.send(), g.recv(), g.count);
            run_raw_mpi(raw, op, g.send(), g.recv(), g.count);
        }
        auto t = alternating_block_medians(
            {[&] { run_op(*comm, op, g.send(), g.recv(), g.count); }, [&] { g.exec->run(); },
             [&] { run_raw_mpi(raw, op, g.send(), g.recv(), g.count); }},
            size_t(reps) * 8, std::max<size_t>(iters / 8, 1),
            [&] { BRAID_MPI_CHECK(MPI_Barrier(raw)); });
        double bare_s = slowest(t[0]), graph_s = slowest(t[1]), raw_s = slowest(t[2]);
        if (rank == 0)
            print_via_graph(json, "mpi", op, size_t(size), bytes, inline_run, bare_s * 1e6,
                            graph_s * 1e6, raw_s * 1e6);
    }
    comm.reset();
    CommunicatorCache::instance().clear();
    BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    rendezvous.reset();
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    std::string backend = "local";
    size_t ranks = 2, bytes = size_t(64) << 20;
    bool json = false;
    int reps = 3;
    std::vector<std::string> ops = OPS;
    CLI::App app{"bench_comm: collective bus bandwidth against memcpy / raw MPI"};
    app.add_option("--backend", backend,
                   "local, mpi, gloo (under mpirun: beside braid's mpi backend and raw MPI) or "
                   "nccl")
        ->check(CLI::IsMember({"local", "mpi", "gloo", "nccl"}));
    bool sweep = false;
    app.add_flag("--sweep", sweep, "gloo: every size from 4 KiB to 64 MiB (x4 steps)");
    auto* ranks_opt = app.add_option("--ranks", ranks,
                                     "ranks (threads) for the local and nccl backends; nccl: "
                                     "GPUs cuda0.., every visible one by default")
                          ->check(CLI::Range(1, 1024));
    app.add_option("--bytes", bytes, "bytes per buffer (see the header)")
        ->check(CLI::Range(4, 1 << 30));
    auto* ops_opt = app.add_option("--ops", ops, "ops to run (reduce: nccl only)")
                        ->check(CLI::IsMember(NCCL_OPS));
    app.add_option("--reps", reps, "timed repetitions per op (the best is kept)")
        ->check(CLI::Range(1, 100));
    app.add_flag("--json", json, "one JSON object per op");
    bool via_graph = false, inline_run = false;
    app.add_flag("--via-graph", via_graph,
                 "also run each op as a CollectiveComm operator in a compiled graph");
    app.add_flag("--inline", inline_run,
                 "with --via-graph: graphs on cpu:default (kernels in the calling thread)");
    CLI11_PARSE(app, argc, argv);
    if (backend != "nccl" && std::count(ops.begin(), ops.end(), "reduce")) {
        std::fprintf(stderr, "bench_comm: reduce is measured on the nccl backend only\n");
        return 1;
    }
    try {
        if (backend == "nccl")
            return bench_nccl(ranks, ranks_opt->count() > 0, bytes, json,
                              ops_opt->count() > 0 ? ops : NCCL_OPS, reps);
        if (backend == "gloo") {
            std::vector<size_t> sizes{bytes};
            if (sweep) {
                sizes.clear();
                for (size_t b = size_t(4) << 10; b <= size_t(64) << 20; b *= 4) sizes.push_back(b);
            }
            return bench_gloo(sizes, json,
                              ops_opt->count() > 0 ? ops : std::vector<std::string>{"all_reduce"},
                              reps);
        }
        if (via_graph)
            return backend == "mpi"
                       ? bench_mpi_via_graph(bytes, json, ops, reps, inline_run)
                       : bench_local_via_graph(ranks, bytes, json, ops, reps, inline_run);
        return backend == "mpi" ? bench_mpi(bytes, json, ops, reps)
                                : bench_local(ranks, bytes, json, ops, reps);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_comm: %s\n", e.what());
        return 1;
    }
}
