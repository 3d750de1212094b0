// The collective checks of the "mpi" backend: one process per rank under mpirun. Ranks meet
// through comm::MpiRendezvous (rank 0 hosts a RendezvousServer in-process), so every
// process registers through a TcpGroupClient and the TCP path is exercised as well.
#include "base/error.h"
#include "collective_checker.h"
#include "comm/mpi_communicator.h"
#include "mpi_test_main.h"

#include <gtest/gtest.h>

namespace braid::comm::test {
namespace {

int g_test_counter = 0;

//! Joins a fresh mpi group of all processes (key unique per call, equal across ranks since
//! every process runs the same tests in the same order).
std::shared_ptr<Communicator> join_world() {
    std::string key = fmt::format("mpi-test-{}", g_test_counter++);
    auto member = join_group(mpi_test_client(), "mpi", key, uint32_t(mpi_world_size()), false,
                             UNASSIGNED_RANK, uint64_t(mpi_world_rank()));
    EXPECT_EQ(int(member.info.rank), mpi_world_rank());
    return member.communicator;
}

void check_sweep(Collective collective) {
    auto comm = join_world();
    for (auto& c : sweep(collective, uint32_t(comm->nranks()))) {
        std::string error = run_and_check(*comm, c);
        ASSERT_EQ(error, "") << c.to_string();
    }
}

TEST(MpiCollectives, DeterministicSumsAddTheRanksInRankOrder) {
    auto comm = join_world();
    ASSERT_EQ(check_rank_ordered_sums(*comm), "");
}

TEST(MpiCollectives, AllReduceMatchesReference) {
    check_sweep(Collective::ALL_REDUCE);
}
TEST(MpiCollectives, ReduceMatchesReference) {
    check_sweep(Collective::REDUCE);
}
TEST(MpiCollectives, BroadcastMatchesReference) {
    check_sweep(Collective::BROADCAST);
}
TEST(MpiCollectives, AllGatherMatchesReference) {
    check_sweep(Collective::ALL_GATHER);
}
TEST(MpiCollectives, ReduceScatterMatchesReference) {
    check_sweep(Collective::REDUCE_SCATTER);
}
TEST(MpiCollectives, GatherMatchesReference) {
    check_sweep(Collective::GATHER);
}
TEST(MpiCollectives, ScatterMatchesReference) {
    check_sweep(Collective::SCATTER);
}
TEST(MpiCollectives, AllToAllMatchesReference) {
    check_sweep(Collective::ALL_TO_ALL);
}
TEST(MpiCollectives, SendRecvMatchesReference) {
    check_sweep(Collective::SEND_RECV);
}

TEST(MpiCollectives, AllReduceOf64MiBMatchesReference) {
    auto comm = join_world();
    size_t count = (64u << 20) / sizeof(float);
    uint32_t n = uint32_t(comm->nranks());
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = float((i * 31 + comm->rank() * 7) % 1024);
    comm->all_reduce(data.data(), data.data(), count, dtype::Float32(), ReduceOp::SUM);
    for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (uint32_t r = 0; r < n; ++r) want += float((i * 31 + r * 7) % 1024);
        ASSERT_EQ(data[i], want) << "element " << i;
    }
}

TEST(MpiCollectives, CachedCommunicatorIsReusedForTheSameGroup) {
    auto comm = join_world();
    CommunicatorDesc desc;
    desc.key = comm->key();
    desc.hash = comm->hash();
    desc.nranks = uint32_t(comm->nranks());
    desc.rank = uint32_t(comm->rank());
    EXPECT_EQ(CommunicatorCache::instance().get("mpi", desc), comm);
}

TEST(MpiCollectives, MissingPeerTimesOutNamingItWithoutEnteringMpi) {
    auto comm = join_world();
    if (comm->rank() != 0) return; // the others never make the call
    comm->set_timeout(std::chrono::milliseconds(300));
    float x = 1;
    try {
        comm->all_reduce(&x, &x, 1, dtype::Float32(), ReduceOp::SUM);
        FAIL() << "all_reduce without peers returned";
    } catch (const TimeoutError& e) {
        std::string what = e.what();
        EXPECT_NE(what.find("1 of "), std::string::npos) << what;
        EXPECT_NE(what.find("missing ranks: 1"), std::string::npos) << what;
    }
    EXPECT_TRUE(comm->broken());
}

TEST(MpiCollectives, EveryWaitingRankNamesTheRankThatNeverCame) {
    auto comm = join_world();
    uint32_t n = uint32_t(comm->nranks());
    if (n < 3) GTEST_SKIP() << "needs 3 ranks: two that wait and one that never comes";
    uint32_t absent = n - 1;
    if (comm->rank() == absent) return; // never enters the all_reduce
    // Rank 1 gives up first; rank 0 (and any other) waits longer and learns of it.
    comm->set_timeout(comm->rank() == 1 ? std::chrono::milliseconds(300)
                                        : std::chrono::milliseconds(3000));
    float x = 1;
    std::string what;
    try {
        comm->all_reduce(&x, &x, 1, dtype::Float32(), ReduceOp::SUM);
        FAIL() << "all_reduce without rank " << absent << " returned";
    } catch (const CommError& e) {
        what = e.what();
    }
    std::string missing =
        fmt::format("{} of {} ranks arrived; missing ranks: {}", n - 1, n, absent);
    EXPECT_NE(what.find(missing), std::string::npos) << what;
    EXPECT_NE(what.find("nobody entered the MPI call"), std::string::npos) << what;
    EXPECT_TRUE(comm->broken());
}

TEST(MpiCollectives, SubgroupOfTheWorldWorks) {
    // Ranks 0 and 1 form a group of two; any other process stays out of it.
    int world_rank = mpi_world_rank();
    std::string key = fmt::format("mpi-subgroup-{}", g_test_counter++);
    if (world_rank > 1) return;
    auto member = join_group(mpi_test_client(), "mpi", key, 2, world_rank == 1, UNASSIGNED_RANK,
                             uint64_t(world_rank));
    EXPECT_EQ(member.info.root_rank, 1u);
    int32_t value = world_rank + 10, sum = 0;
    member.communicator->all_reduce(&value, &sum, 1, dtype::Int32(), ReduceOp::SUM);
    EXPECT_EQ(sum, 21);
}

} // namespace
} // namespace braid::comm::test
