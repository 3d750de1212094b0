// Every collective x dtype x op of the "local" backend against the plain-loop reference,
// with ranks as threads of this process, for group sizes 1, 2, 3, 4 and 8.
#include "base/error.h"
#include "collective_checker.h"
#include "comm/local_communicator.h"

#include <fmt/format.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace braid::comm::test {
namespace {

std::atomic<int> g_key_counter{0};

//! Runs `body(comm)` on `n` threads, each one rank of a fresh local group.
template <typename Body> void run_ranks(uint32_t n, Body&& body) {
    auto client = std::make_shared<InProcessGroupClient>();
    std::string key = fmt::format("local-test-{}", g_key_counter++);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            try {
                auto member = join_group(client, "local", key, n, false, UNASSIGNED_RANK,
                                         /*comp_node_id=*/100 + r, {}, std::chrono::seconds(60));
                ASSERT_EQ(member.info.rank, r) << "ranks follow comp node ids";
                body(*member.communicator);
            } catch (const std::exception& e) {
                ADD_FAILURE() << "rank " << r << ": " << e.what();
            }
        });
    for (auto& t : threads) t.join();
}

void check_sweep(Collective collective, uint32_t n) {
    auto cases = sweep(collective, n);
    run_ranks(n, [&](Communicator& comm) {
        for (auto& c : cases) {
            std::string error = run_and_check(comm, c);
            ASSERT_EQ(error, "") << c.to_string();
        }
    });
}

class LocalCollectives : public ::testing::TestWithParam<uint32_t> {};

TEST_P(LocalCollectives, AllReduceMatchesReference) {
    check_sweep(Collective::ALL_REDUCE, GetParam());
}
TEST_P(LocalCollectives, ReduceMatchesReference) {
    check_sweep(Collective::REDUCE, GetParam());
}
TEST_P(LocalCollectives, BroadcastMatchesReference) {
    check_sweep(Collective::BROADCAST, GetParam());
}
TEST_P(LocalCollectives, AllGatherMatchesReference) {
    check_sweep(Collective::ALL_GATHER, GetParam());
}
TEST_P(LocalCollectives, ReduceScatterMatchesReference) {
    check_sweep(Collective::REDUCE_SCATTER, GetParam());
}
TEST_P(LocalCollectives, GatherMatchesReference) {
    check_sweep(Collective::GATHER, GetParam());
}
TEST_P(LocalCollectives, ScatterMatchesReference) {
    check_sweep(Collective::SCATTER, GetParam());
}
TEST_P(LocalCollectives, AllToAllMatchesReference) {
    check_sweep(Collective::ALL_TO_ALL, GetParam());
}
TEST_P(LocalCollectives, SendRecvMatchesReference) {
    check_sweep(Collective::SEND_RECV, GetParam());
}

TEST_P(LocalCollectives, DeterministicSumsAddTheRanksInRankOrder) {
    run_ranks(GetParam(),
              [&](Communicator& comm) { ASSERT_EQ(check_rank_ordered_sums(comm), ""); });
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalCollectives, ::testing::Values(1u, 2u, 3u, 4u, 8u),
                         [](const auto& info) { return fmt::format("N{}", info.param); });

class LocalLargeBuffers : public ::testing::TestWithParam<uint32_t> {};

TEST_P(LocalLargeBuffers, AllReduceOf64MiBMatchesReference) {
    size_t count = (64u << 20) / sizeof(float);
    uint32_t n = GetParam();
    run_ranks(n, [&](Communicator& comm) {
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = float((i * 31 + comm.rank() * 7) % 1024);
        comm.all_reduce(data.data(), data.data(), count, dtype::Float32(), ReduceOp::SUM);
        for (size_t i = 0; i < count; ++i) {
            float want = 0;
            for (uint32_t r = 0; r < n; ++r) want += float((i * 31 + r * 7) % 1024);
            if (data[i] != want) {
                ADD_FAILURE() << "rank " << comm.rank() << " element " << i << " is " << data[i]
                              << ", expected " << want;
                return;
            }
        }
    });
}

TEST_P(LocalLargeBuffers, AllGatherOf64MiBMatchesReference) {
    uint32_t n = GetParam();
    size_t count = (64u << 20) / n;
    run_ranks(n, [&](Communicator& comm) {
        std::vector<uint8_t> send(count, uint8_t(comm.rank() + 1)), recv(count * n);
        comm.all_gather(send.data(), recv.data(), count, dtype::Uint8());
        for (size_t i = 0; i < recv.size(); i += 4093)
            ASSERT_EQ(recv[i], uint8_t(i / count + 1)) << "element " << i;
    });
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalLargeBuffers, ::testing::Values(2u, 3u),
                         [](const auto& info) { return fmt::format("N{}", info.param); });

TEST(LocalCommunicator, HalfPrecisionSumsAccumulateInFloat32) {
    // 1 + 4 * 2^-11 in float16: rounding to float16 after each addition would drop every
    // 2^-11 (half an ulp of values in [1, 2), a tie that rounds to even); accumulating in
    // float32 and rounding once keeps their sum 2^-9.
    run_ranks(5, [&](Communicator& comm) {
        uint16_t value = comm.rank() == 0 ? float_to_half(1.0f) : float_to_half(1.0f / 2048);
        uint16_t out = 0;
        comm.all_reduce(&value, &out, 1, dtype::Float16(), ReduceOp::SUM);
        EXPECT_EQ(half_to_float(out), 1.0f + 4.0f / 2048);
    });
}

TEST(LocalCommunicator, MismatchedCountsFailOnEveryRank) {
    std::atomic<int> failures{0};
    run_ranks(3, [&](Communicator& comm) {
        std::vector<float> buf(10);
        size_t count = comm.rank() == 2 ? 9 : 10;
        try {
            comm.all_reduce(buf.data(), buf.data(), count, dtype::Float32(), ReduceOp::SUM);
        } catch (const CommError& e) {
            EXPECT_NE(std::string(e.what()).find("peers disagree"), std::string::npos) << e.what();
            ++failures;
        }
        EXPECT_TRUE(comm.broken());
        EXPECT_THROW(comm.synchronize(), CommError); // broken: every call refuses
    });
    EXPECT_EQ(failures.load(), 3);
}

TEST(LocalCommunicator, WorksOnHostMemoryAndHasNothingToSynchronize) {
    run_ranks(2, [&](Communicator& comm) {
        EXPECT_EQ(comm.buffer_kind(), Device::Kind::CPU);
        float x = float(comm.rank() + 1);
        comm.all_reduce(&x, &x, 1, dtype::Float32(), ReduceOp::SUM);
        EXPECT_EQ(x, 3.0f); // synchronous: the result is there when the call returns
        EXPECT_NO_THROW(comm.synchronize());
        EXPECT_FALSE(comm.broken());
    });
}

TEST(LocalCommunicator, TimeoutNamesTheMissingRank) {
    // Ranks 0 and 1 call all_reduce; rank 2 never does.
    run_ranks(3, [&](Communicator& comm) {
        comm.set_timeout(std::chrono::milliseconds(500));
        if (comm.rank() == 2) return;
        float x = 1;
        try {
            comm.all_reduce(&x, &x, 1, dtype::Float32(), ReduceOp::SUM);
            ADD_FAILURE() << "all_reduce without rank 2 returned";
        } catch (const TimeoutError& e) {
            std::string what = e.what();
            EXPECT_NE(what.find("2 of 3 ranks arrived"), std::string::npos) << what;
            EXPECT_NE(what.find("missing ranks: 2"), std::string::npos) << what;
        } catch (const CommError& e) {
            // The peer that timed out first aborted the group.
            EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
        }
    });
}

TEST(LocalCommunicator, CacheReturnsOneCommunicatorPerGroupAndRank) {
    auto client = std::make_shared<InProcessGroupClient>();
    auto a = join_group(client, "local", "cache-test", 1, true, UNASSIGNED_RANK, 0);
    CommunicatorDesc desc;
    desc.key = "cache-test";
    desc.hash = a.info.hash;
    desc.nranks = 1;
    EXPECT_EQ(CommunicatorCache::instance().get("local", desc), a.communicator);
    // Registering the key again starts a new group with a new hash.
    auto b = join_group(client, "local", "cache-test", 1, true, UNASSIGNED_RANK, 0);
    EXPECT_NE(a.info.hash, b.info.hash);
    EXPECT_NE(a.communicator, b.communicator);
}

TEST(CommunicatorRegistry, ListsBuiltInBackendsAndRejectsUnknownNames) {
    auto names = CommunicatorRegistry::instance().names();
    EXPECT_NE(std::find(names.begin(), names.end(), "local"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "mpi"), names.end());
    CommunicatorDesc desc;
    desc.key = "k";
    try {
        CommunicatorRegistry::instance().make("nccl-nope", desc);
        FAIL() << "unknown backend accepted";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("nccl-nope"), std::string::npos);
    }
}

TEST(LocalCommunicator, RejectsBadArgumentsBeforeTouchingPeers) {
    run_ranks(1, [&](Communicator& comm) {
        float x = 0;
        EXPECT_THROW(comm.broadcast(&x, &x, 1, dtype::Float32(), 3), ValueError);
        EXPECT_THROW(comm.all_reduce(&x, &x, 1, dtype::Bool(), ReduceOp::SUM), DTypeError);
        EXPECT_THROW(comm.all_reduce(nullptr, &x, 1, dtype::Float32(), ReduceOp::SUM), ValueError);
        EXPECT_THROW(comm.send(&x, 1, dtype::Float32(), 0), ValueError);
        EXPECT_FALSE(comm.broken());
    });
}

} // namespace
} // namespace braid::comm::test
