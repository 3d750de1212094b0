// The "nccl" communicator backend: every collective x dtype x op against the plain-loop
// reference (groups of one rank on cuda0, and of every visible GPU from threads of this
// process when there are several), device-memory checks, the deadline of joining, and
// CollectiveComm forward and backward on CUDA comp nodes against the local backend on CPU
// comp nodes. Everything that needs a device skips itself without one.
#include "cuda_checker.h"

#include "../collective/collective_reference.h"
#include "../comm/collective_checker.h"
#include "collective/collective_comm.h"
#include "comm/communicator.h"

#if BRAID_WITH_NCCL
#include "comm/cuda_nccl_communicator.h"
#endif

#include <algorithm>
#include <atomic>
#include <thread>

using namespace braid;
using namespace braid::test;
using namespace braid::comm::test;
using braid::comm::Communicator;
using opr::CollectiveMode;

namespace {

bool nccl_registered() {
    auto names = comm::CommunicatorRegistry::instance().names();
    return std::find(names.begin(), names.end(), "nccl") != names.end();
}

//! Skips the test without a device, or in a build without the NCCL backend.
#define BRAID_REQUIRE_NCCL()                                                                       \
    do {                                                                                           \
        BRAID_REQUIRE_CUDA();                                                                      \
        if (!nccl_registered()) GTEST_SKIP() << "this build has no NCCL backend";                  \
    } while (0)

std::atomic<int> g_key_counter{0};

//! Group sizes to test: one rank, and every visible GPU when there are several.
std::vector<uint32_t> group_sizes() {
    std::vector<uint32_t> sizes = {1};
    int devices = CompNode::cuda_device_count();
    if (devices > 1) sizes.push_back(uint32_t(devices));
    return sizes;
}

//! Runs `body(comm)` on `n` threads, rank r on comp node cuda<r>, one fresh NCCL group.
template <typename Body> void run_nccl_ranks(uint32_t n, Body&& body) {
    auto client = std::make_shared<comm::InProcessGroupClient>();
    std::string key = fmt::format("nccl-test-{}", g_key_counter++);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            try {
                auto cn = CompNode::load(fmt::format("cuda{}", r));
                auto member = comm::join_group(client, "nccl", key, n, false, comm::UNASSIGNED_RANK,
                                               cn.id(), cn, std::chrono::seconds(60));
                ASSERT_EQ(member.info.rank, r) << "ranks follow comp node ids";
                ASSERT_STREQ(member.communicator->backend(), "nccl");
                body(*member.communicator);
            } catch (const std::exception& e) {
                ADD_FAILURE() << "rank " << r << ": " << e.what();
            }
        });
    for (auto& t : threads) t.join();
}

void check_sweep(Collective collective) {
    for (uint32_t n : group_sizes()) {
        SCOPED_TRACE(fmt::format("{} ranks", n));
        auto cases = sweep(collective, n);
        run_nccl_ranks(n, [&](Communicator& comm) {
            for (auto& c : cases) {
                std::string error = run_and_check(comm, c);
                ASSERT_EQ(error, "") << c.to_string();
            }
        });
    }
}

} // namespace

TEST(NcclBackend, IsRegisteredInBuildsWithNccl) {
#if BRAID_WITH_NCCL
    EXPECT_TRUE(nccl_registered());
#else
    EXPECT_FALSE(nccl_registered());
#endif
}

TEST(NcclBackend, NeedsACudaCompNode) {
    if (!nccl_registered()) GTEST_SKIP() << "this build has no NCCL backend";
    // Runs without a device too: the comp node is checked before any CUDA call.
    auto client = std::make_shared<comm::InProcessGroupClient>();
    auto cpu = CompNode::load("cpu0");
    try {
        comm::join_group(client, "nccl", "nccl-on-cpu", 1, false, comm::UNASSIGNED_RANK, cpu.id(),
                         cpu, std::chrono::seconds(10));
        FAIL() << "an nccl communicator on a CPU comp node must be refused";
    } catch (const ValueError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("key \"nccl-on-cpu\""), std::string::npos) << msg;
        EXPECT_NE(msg.find("needs a CUDA comp node"), std::string::npos) << msg;
        EXPECT_NE(msg.find("cpu0"), std::string::npos) << msg;
    }
}

TEST(NcclCollectives, AllReduceMatchesReference) {
    BRAID_REQUIRE_NCCL();
    check_sweep(Collective::ALL_REDUCE);
}
TEST(NcclCollectives, ReduceMatchesReference) {
    BRAID_REQUIRE_NCCL();
    check_sweep(Collective::REDUCE);
}
TEST(NcclCollectives, BroadcastMatchesReference) {
    BRAID_REQUIRE_NCCL();
    check_sweep(Collective::BROADCAST);
}
TEST(NcclCollectives, AllGatherMatchesReference) {
    BRAID_REQUIRE_NCCL();
    check_sweep(Collective::ALL_GATHER);
}
TEST(NcclCollectives, ReduceScatterMatchesReference) {
    BRAID_REQUIRE_NCCL();
    check_sweep(Collective::REDUCE_SCATTER);
}
TEST(NcclCollectives, GatherMatchesReference) {
    BRAID_REQUIRE_NCCL();
    check_sweep(Collective::GATHER);
}
TEST(NcclCollectives, ScatterMatchesReference) {
    BRAID_REQUIRE_NCCL();
    check_sweep(Collective::SCATTER);
}
TEST(NcclCollectives, AllToAllMatchesReference) {
    BRAID_REQUIRE_NCCL();
    check_sweep(Collective::ALL_TO_ALL);
}
TEST(NcclCollectives, SendRecvMatchesReference) {
    BRAID_REQUIRE_NCCL();
    check_sweep(Collective::SEND_RECV);
}

TEST(NcclCollectives, HostBuffersAreRefusedWithoutBreakingTheGroup) {
    BRAID_REQUIRE_NCCL();
    run_nccl_ranks(1, [](Communicator& comm) {
        std::vector<float> host(4, 1.0f);
        try {
            comm.all_reduce(host.data(), host.data(), host.size(), dtype::Float32(),
                            comm::ReduceOp::SUM);
            FAIL() << "a host buffer must be refused";
        } catch (const ValueError& e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find("host memory"), std::string::npos) << msg;
            EXPECT_NE(msg.find("CUDA device 0"), std::string::npos) << msg;
        }
        EXPECT_FALSE(comm.broken());
        // The group still works on device memory.
        std::string error =
            run_and_check(comm, {Collective::ALL_REDUCE, dtype::Float32(), comm::ReduceOp::SUM, 8});
        EXPECT_EQ(error, "");
    });
}

#if BRAID_WITH_NCCL
TEST(NcclBackend, JoiningTimesOutNamingKeyAndRank) {
    BRAID_REQUIRE_NCCL();
    // Rank 1 takes the unique id but never initializes: rank 0's ncclCommInitRank cannot
    // finish, and must give up at its deadline.
    auto client = std::make_shared<comm::InProcessGroupClient>();
    comm::CommunicatorDesc desc;
    desc.key = "nccl-missing-peer";
    desc.hash = 0x5eed0000 + uint64_t(g_key_counter++);
    desc.nranks = 2;
    desc.rank = 0;
    desc.root_rank = 0;
    desc.comp_node = CompNode::load("cuda0");
    desc.group_client = client;
    desc.timeout = std::chrono::milliseconds(1500);
    std::thread peer([&] {
        client->bcast_bytes(comm::nccl_unique_id_key(desc.hash), 2, 1, 0, {},
                            std::chrono::seconds(30));
    });
    auto start = std::chrono::steady_clock::now();
    try {
        comm::CommunicatorRegistry::instance().make("nccl", desc);
        ADD_FAILURE() << "joining without the peer must time out";
    } catch (const TimeoutError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("key \"nccl-missing-peer\""), std::string::npos) << msg;
        EXPECT_NE(msg.find("rank 0 of 2"), std::string::npos) << msg;
        EXPECT_NE(msg.find("timed out after 1.5 s"), std::string::npos) << msg;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
    peer.join();
}
#endif

// ---------------------------------------------------------------- CollectiveComm

namespace {

//! Rank's output shape for an input of {2n, 3} (see docs/collectives.md).
TensorShape output_shape(CollectiveMode mode, uint32_t n, bool root) {
    size_t rows = 2 * n;
    switch (mode) {
    case CollectiveMode::ALL_GATHER:
        return {rows * n, 3};
    case CollectiveMode::GATHER:
        return root ? TensorShape{rows * n, 3} : TensorShape{1};
    case CollectiveMode::REDUCE_SUM:
        return root ? TensorShape{rows, 3} : TensorShape{1};
    case CollectiveMode::REDUCE_SCATTER_SUM:
    case CollectiveMode::SCATTER:
        return {rows / n, 3};
    default:
        return {rows, 3};
    }
}

//! What one run of a collective graph produced, per rank.
struct CollectiveRun {
    std::vector<Tensor> outputs; //!< y of every rank
    std::vector<Tensor> grads;   //!< d loss / d x of every rank with an input (else empty)
};

/*!
 * One graph per rank, each on its own thread: rank r builds on comp node `<device><r>`
 * y_r = CollectiveComm(x_r) with `backend` and loss_r = sum(y_r * w_r), and fetches y_r and
 * d loss_r / d x_r after `runs` runs with the same inputs. A rank without input (BROADCAST
 * and SCATTER non-roots) differentiates w.r.t. a stand-in input added to its loss, so that it
 * still takes part in the gradient collective.
 */
CollectiveRun run_collective_ranks(CollectiveMode mode, const std::string& backend,
                                   const std::string& device, uint32_t n,
                                   const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& weights, int runs = 2) {
    register_all_operators();
    auto client = std::make_shared<comm::InProcessGroupClient>();
    const uint32_t root = 0;
    CollectiveRun result;
    result.outputs.resize(n);
    result.grads.resize(n);
    std::vector<std::string> errors(n);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            try {
                auto cn = CompNode::load(fmt::format("{}{}", device, r));
                GraphOptions options;
                options.default_comp_node = cn.locator();
                auto g = ComputingGraph::make(options);
                SymbolVar x;
                if (!inputs[r].empty())
                    x = opr::Input::make(*g, "x", dtype::Float32(), inputs[r].shape());
                opr::CollectiveParam p;
                p.key = "graph"; // every rank's key (each call has its own group manager)
                p.nr_devices = n;
                p.rank = int32_t(r);
                p.is_root = r == root;
                p.group_client = client;
                p.mode = mode;
                p.backend = backend;
                auto y = opr::CollectiveComm::make(x, *g, p);
                auto loss = opr::reduce_sum(y * opr::ImmutableTensor::make(*g, weights[r]));
                SymbolVar wrt = x;
                if (!x.valid()) {
                    wrt = opr::Input::make(*g, "stand_in", dtype::Float32(), {1});
                    loss = loss + opr::reduce_sum(wrt);
                }
                auto exec = g->compile({y, grad(loss, wrt)});
                if (x.valid())
                    exec->feed("x", inputs[r]);
                else
                    exec->feed("stand_in", make_tensor({1}, {0}));
                for (int i = 0; i < runs; ++i) exec->run();
                result.outputs[r] = exec->output(0).copy();
                if (x.valid()) result.grads[r] = exec->output(1).copy();
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (uint32_t r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << backend << " rank " << r;
    return result;
}

} // namespace

TEST(NcclCollectiveComm, ForwardAndBackwardMatchTheLocalBackendOnCpu) {
    BRAID_REQUIRE_NCCL();
    for (uint32_t n : group_sizes())
        for (auto mode : all_collective_modes()) {
            SCOPED_TRACE(fmt::format("{} with {} ranks", opr::collective_mode_name(mode), n));
            std::mt19937 rng(n * 131 + uint32_t(mode));
            std::vector<Tensor> inputs(n), weights(n);
            for (uint32_t r = 0; r < n; ++r)
                if (collective_has_input(mode, r == 0))
                    inputs[r] = random_tensor({n * 2, 3}, dtype::Float32(), rng);
            for (uint32_t r = 0; r < n; ++r)
                weights[r] = random_tensor(output_shape(mode, n, r == 0), dtype::Float32(), rng);
            CollectiveRun cpu = run_collective_ranks(mode, "local", "cpu", n, inputs, weights);
            CollectiveRun gpu = run_collective_ranks(mode, "nccl", "cuda", n, inputs, weights);
            if (HasFailure()) return;
            for (uint32_t r = 0; r < n; ++r) {
                expect_tensor_near(gpu.outputs[r], cpu.outputs[r], 1e-5, 1e-5,
                                   fmt::format("output of rank {}", r));
                ASSERT_EQ(gpu.grads[r].empty(), cpu.grads[r].empty());
                if (!cpu.grads[r].empty())
                    expect_tensor_near(gpu.grads[r], cpu.grads[r], 1e-5, 1e-5,
                                       fmt::format("gradient of rank {}", r));
            }
        }
}

TEST(NcclCollectiveComm, HostBackendOnCudaCompNodeIsAClearError) {
    BRAID_REQUIRE_CUDA();
    register_all_operators();
    auto client = std::make_shared<comm::InProcessGroupClient>();
    GraphOptions options;
    options.default_comp_node = "cuda0";
    auto g = ComputingGraph::make(options);
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    opr::CollectiveParam p;
    p.key = "local-on-cuda";
    p.group_client = client;
    p.backend = "local";
    auto y = opr::CollectiveComm::make(x, *g, p);
    auto exec = g->compile({y});
    std::mt19937 rng(3);
    exec->feed("x", random_tensor({4}, dtype::Float32(), rng));
    try {
        exec->run();
        FAIL() << "the local backend cannot work on device memory";
    } catch (const CommError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("backend \"local\" works on CPU memory"), std::string::npos) << msg;
        EXPECT_NE(msg.find("cuda0"), std::string::npos) << msg;
        EXPECT_NE(msg.find("\"nccl\""), std::string::npos) << msg;
    }
}
