// The group manager's rules through the in-process client: rank assignment, peer
// disagreements, deadlines and their messages, re-registration, shapes, bytes, barriers
// and the key-value space.
#include "base/error.h"
#include "comm/group_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <set>
#include <thread>

namespace braid::comm::test {
namespace {

using namespace std::chrono_literals;

struct Registration {
    RegisterInfo info;
    std::string error;
};

//! Registers one peer per entry of `peers` concurrently; returns each outcome.
struct PeerSpec {
    uint32_t nr_devices;
    bool is_root;
    int32_t rank;
    uint64_t comp_node_id;
};

std::vector<Registration> register_all(GroupClient& client, const std::string& key,
                                       const std::vector<PeerSpec>& peers, Duration timeout = 10s) {
    std::vector<Registration> out(peers.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < peers.size(); ++i)
        threads.emplace_back([&, i] {
            try {
                auto& p = peers[i];
                out[i].info = client.opr_register(key, p.nr_devices, p.is_root, p.rank,
                                                  p.comp_node_id, timeout);
            } catch (const Error& e) {
                out[i].error = e.what();
            }
        });
    for (auto& t : threads) t.join();
    return out;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

TEST(GroupManager, AssignsRanksInOrderOfCompNodeIdAndAgreesOnTheHash) {
    InProcessGroupClient client;
    auto out = register_all(client, "k",
                            {{4, false, UNASSIGNED_RANK, 30},
                             {4, true, UNASSIGNED_RANK, 10},
                             {4, false, UNASSIGNED_RANK, 40},
                             {4, false, UNASSIGNED_RANK, 20}});
    std::vector<uint32_t> ranks;
    for (auto& r : out) {
        ASSERT_EQ(r.error, "");
        ranks.push_back(r.info.rank);
        EXPECT_EQ(r.info.hash, out[0].info.hash);
        EXPECT_EQ(r.info.root_rank, 0u) << "the root has the smallest comp node id";
    }
    EXPECT_EQ(ranks, (std::vector<uint32_t>{2, 0, 3, 1}));
}

TEST(GroupManager, KeepsExplicitRanksAndFillsTheRest) {
    InProcessGroupClient client;
    auto out = register_all(
        client, "k",
        {{3, false, 0, 50}, {3, false, UNASSIGNED_RANK, 7}, {3, true, UNASSIGNED_RANK, 3}});
    for (auto& r : out) ASSERT_EQ(r.error, "");
    EXPECT_EQ(out[0].info.rank, 0u);
    EXPECT_EQ(out[2].info.rank, 1u);
    EXPECT_EQ(out[1].info.rank, 2u);
    EXPECT_EQ(out[0].info.root_rank, 1u);
}

TEST(GroupManager, WithoutARootRankZeroIsRoot) {
    InProcessGroupClient client;
    auto out = register_all(client, "k", {{2, false, 1, 0}, {2, false, 0, 1}});
    for (auto& r : out) {
        ASSERT_EQ(r.error, "");
        EXPECT_EQ(r.info.root_rank, 0u);
    }
}

TEST(GroupManager, KeyCanBeRegisteredAgainWithANewHash) {
    InProcessGroupClient client;
    auto first = register_all(client, "again", {{2, false, 0, 0}, {2, false, 1, 1}});
    auto second = register_all(client, "again", {{2, false, 0, 0}, {2, false, 1, 1}});
    ASSERT_EQ(first[0].error, "");
    ASSERT_EQ(second[0].error, "");
    EXPECT_EQ(second[0].info.hash, second[1].info.hash);
    EXPECT_NE(first[0].info.hash, second[0].info.hash);
}

TEST(GroupManager, DisagreementOnNrDevicesFailsEveryPeer) {
    InProcessGroupClient client;
    auto out = register_all(client, "k",
                            {{3, false, UNASSIGNED_RANK, 0},
                             {3, false, UNASSIGNED_RANK, 1},
                             {2, false, UNASSIGNED_RANK, 2}});
    for (auto& r : out) EXPECT_TRUE(contains(r.error, "disagree on nr_devices")) << r.error;
    EXPECT_EQ(client.manager()->nr_pending(), 0u);
}

TEST(GroupManager, TwoRootsFailEveryPeerIncludingLaterOnes) {
    InProcessGroupClient client;
    auto out =
        register_all(client, "k", {{3, true, UNASSIGNED_RANK, 0}, {3, true, UNASSIGNED_RANK, 1}});
    for (auto& r : out) EXPECT_TRUE(contains(r.error, "two peers claim to be root")) << r.error;
    // The third peer of that round learns about it too, instead of waiting out its deadline.
    try {
        client.opr_register("k", 3, false, UNASSIGNED_RANK, 2, 10s);
        FAIL() << "third peer of a failed round registered";
    } catch (const CommError& e) {
        EXPECT_TRUE(contains(e.what(), "two peers claim to be root")) << e.what();
    }
    // Then the key is usable again.
    auto fresh = register_all(client, "k", {{1, true, UNASSIGNED_RANK, 0}});
    EXPECT_EQ(fresh[0].error, "");
}

TEST(GroupManager, DuplicateRankFailsEveryPeer) {
    InProcessGroupClient client;
    auto out = register_all(client, "k", {{2, false, 1, 0}, {2, false, 1, 1}});
    for (auto& r : out) EXPECT_TRUE(contains(r.error, "rank 1 is claimed twice")) << r.error;
}

TEST(GroupManager, RankOutOfRangeIsAValueError) {
    InProcessGroupClient client;
    EXPECT_THROW(client.opr_register("k", 2, false, 2, 0, 1s), ValueError);
    EXPECT_THROW(client.opr_register("k", 0, false, UNASSIGNED_RANK, 0, 1s), ValueError);
}

TEST(GroupManager, TimeoutNamesCallKeyArrivalsAndMissingRanks) {
    InProcessGroupClient client;
    auto first = std::async(std::launch::async, [&] {
        try {
            client.opr_register("late", 3, false, 0, 5, 1s);
            return std::string("registered");
        } catch (const TimeoutError& e) {
            return std::string(e.what());
        }
    });
    while (client.manager()->nr_pending() != 1) std::this_thread::sleep_for(1ms);
    try {
        client.opr_register("late", 3, false, 1, 6, 200ms);
        FAIL() << "registered without rank 2";
    } catch (const TimeoutError& e) {
        EXPECT_EQ(std::string(e.what()), "opr_register(key \"late\") timed out after 0.2 s: 2 of 3 "
                                         "peers arrived (comp node ids: 5, 6); missing ranks: 2");
    }
    // Rank 1 came and left at its own deadline: it is not "missing".
    EXPECT_EQ(first.get(), "opr_register(key \"late\") timed out after 1 s: 1 of 3 peers arrived "
                           "(comp node ids: 5); rank 1 arrived and timed out; missing ranks: 2");
    EXPECT_EQ(client.manager()->nr_pending(), 0u);
}

TEST(GroupManager, TimeoutWithUnassignedRanksListsArrivedCompNodes) {
    InProcessGroupClient client;
    try {
        client.opr_register("solo", 2, false, UNASSIGNED_RANK, 77, 100ms);
        FAIL();
    } catch (const TimeoutError& e) {
        EXPECT_TRUE(contains(e.what(), "1 of 2 peers arrived (comp node ids: 77)")) << e.what();
        EXPECT_TRUE(contains(e.what(), "missing 1 peer(s)")) << e.what();
    }
}

TEST(GroupManager, TimedOutPeerIsWithdrawnAndDoesNotCount) {
    InProcessGroupClient client;
    EXPECT_THROW(client.opr_register("k", 2, false, 0, 0, 50ms), TimeoutError);
    // Had the first registration stayed, this one would complete the group.
    try {
        client.opr_register("k", 2, false, 1, 1, 100ms);
        FAIL() << "registered with a peer that had given up";
    } catch (const TimeoutError& e) {
        EXPECT_TRUE(contains(e.what(), "1 of 2 peers arrived")) << e.what();
        EXPECT_TRUE(contains(e.what(), "rank 0 arrived and timed out")) << e.what();
        EXPECT_FALSE(contains(e.what(), "missing ranks")) << e.what();
    }
}

TEST(GroupManager, TimeoutTellsRanksThatLeftFromRanksThatNeverCame) {
    InProcessGroupClient client;
    // Rank 0 gives up first; rank 1 waits longer; rank 2 never comes.
    auto first = std::async(std::launch::async, [&] {
        try {
            client.opr_register("three", 3, false, 0, 10, 150ms);
            return std::string("registered");
        } catch (const TimeoutError& e) {
            return std::string(e.what());
        }
    });
    while (client.manager()->nr_pending() != 1) std::this_thread::sleep_for(1ms);
    try {
        client.opr_register("three", 3, false, 1, 11, 1s);
        FAIL() << "registered without rank 2";
    } catch (const TimeoutError& e) {
        EXPECT_EQ(std::string(e.what()),
                  "opr_register(key \"three\") timed out after 1 s: 1 of 3 peers arrived (comp "
                  "node ids: 11); rank 0 arrived and timed out; missing ranks: 2");
    }
    EXPECT_EQ(first.get(), "opr_register(key \"three\") timed out after 0.15 s: 2 of 3 peers "
                           "arrived (comp node ids: 10, 11); missing ranks: 2");
    EXPECT_EQ(client.manager()->nr_pending(), 0u);
}

TEST(GroupManager, DisconnectedPeersAndUnassignedPeersAreToldApart) {
    auto manager = std::make_shared<GroupManager>();
    auto ignore = [](auto) {};
    // Rank 3 leaves because its client went away; comp node 7 (no explicit rank) times out.
    auto gone = manager->opr_register("mixed", 4, false, 3, 30, ignore);
    manager->withdraw(gone, WithdrawReason::DISCONNECTED);
    auto late = manager->opr_register("mixed", 4, false, UNASSIGNED_RANK, 7, ignore);
    manager->withdraw(late, WithdrawReason::TIMED_OUT);
    auto waiting = manager->opr_register("mixed", 4, false, 0, 1, ignore);
    auto text = manager->withdraw(waiting);
    ASSERT_TRUE(text);
    EXPECT_EQ(*text, "1 of 4 peers arrived (comp node ids: 1); comp node 7 arrived and timed out; "
                     "rank 3 arrived and disconnected; missing 1 peer(s) whose comp nodes never "
                     "registered (ranks not claimed explicitly: 1, 2)");
    // A rank that comes back is no longer reported as gone.
    auto back = manager->opr_register("mixed", 4, false, 3, 30, ignore);
    auto again = manager->opr_register("mixed", 4, false, 0, 1, ignore);
    text = manager->withdraw(again);
    ASSERT_TRUE(text);
    EXPECT_FALSE(contains(*text, "rank 3 arrived and disconnected")) << *text;
    EXPECT_TRUE(contains(*text, "2 of 4 peers arrived (comp node ids: 30, 1)")) << *text;
    manager->withdraw(back);
    EXPECT_EQ(manager->nr_pending(), 0u);
}

TEST(GroupManager, BarrierTimeoutNamesRanksThatLeft) {
    InProcessGroupClient client;
    EXPECT_THROW(client.group_barrier("bar", 3, 2, 30ms), TimeoutError);
    try {
        client.group_barrier("bar", 3, 0, 50ms);
        FAIL();
    } catch (const TimeoutError& e) {
        EXPECT_TRUE(contains(e.what(), "1 of 3 ranks arrived; rank 2 arrived and timed out; "
                                       "missing ranks: 1"))
            << e.what();
    }
}

TEST(GroupManager, GroupsAboveTheMaximumWorldSizeAreRefusedUpFront) {
    InProcessGroupClient client;
    uint32_t huge = 0xffffffffu;
    try {
        client.opr_register("huge", huge, false, UNASSIGNED_RANK, 0, 5s);
        FAIL();
    } catch (const ValueError& e) {
        EXPECT_TRUE(contains(e.what(), "nr_devices 4294967295 exceeds the maximum world size of "
                                       "65536"))
            << e.what();
    }
    try {
        client.bcast_bytes("huge", huge, 0, 0, "x", 5s);
        FAIL();
    } catch (const ValueError& e) {
        EXPECT_TRUE(contains(e.what(), "size 4294967295 exceeds the maximum world size of 65536"))
            << e.what();
    }
    EXPECT_THROW(client.group_barrier("huge", huge, 0, 5s), ValueError);
    EXPECT_EQ(client.manager()->nr_pending(), 0u);

    InProcessGroupClient small(std::make_shared<GroupManager>(4));
    EXPECT_THROW(small.group_barrier("five", 5, 0, 5s), ValueError);
    small.group_barrier("one", 1, 0, 5s);
}

TEST(GroupManager, LargestGroupListsOnlyTheFirstMissingRanks) {
    InProcessGroupClient client;
    try {
        client.opr_register("wide", DEFAULT_MAX_WORLD_SIZE, false, 3, 0, 20ms);
        FAIL();
    } catch (const TimeoutError& e) {
        EXPECT_TRUE(contains(e.what(),
                             "1 of 65536 peers arrived (comp node ids: 0); missing ranks: "
                             "0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 and "
                             "65519 more"))
            << e.what();
    }
}

TEST(GroupManager, DefaultTimeoutComesFromTheEnvironment) {
    setenv("BRAID_COMM_TIMEOUT", "0.15", 1);
    EXPECT_EQ(default_timeout(), 150ms);
    InProcessGroupClient client;
    try {
        client.group_barrier("env", 2, 0);
        FAIL();
    } catch (const TimeoutError& e) {
        EXPECT_TRUE(contains(e.what(), "group_barrier(key \"env\") timed out after 0.15 s"))
            << e.what();
        EXPECT_TRUE(contains(e.what(), "1 of 2 ranks arrived; missing ranks: 1")) << e.what();
    }
    setenv("BRAID_COMM_TIMEOUT", "not-a-number", 1);
    EXPECT_EQ(default_timeout(), std::chrono::seconds(300));
    unsetenv("BRAID_COMM_TIMEOUT");
    EXPECT_EQ(default_timeout(), std::chrono::seconds(300));
}

TEST(GroupManager, GetOutputShapeWaitsForSet) {
    InProcessGroupClient client;
    auto reader = std::async(std::launch::async, [&] { return client.get_output_shape("s"); });
    std::this_thread::sleep_for(20ms);
    client.set_output_shape("s", TensorShape{4, 5});
    EXPECT_EQ(reader.get(), (TensorShape{4, 5}));
    EXPECT_EQ(client.get_output_shape("s"), (TensorShape{4, 5}));
    EXPECT_THROW(client.get_output_shape("never", 50ms), TimeoutError);
}

TEST(GroupManager, NextJobUnderTheSameKeyNeverReadsTheLastRootsShape) {
    InProcessGroupClient client;
    // A job: the root publishes its shape, the non-root reads it, both register.
    client.set_output_shape("b", TensorShape{4, 8});
    EXPECT_EQ(client.get_output_shape("b", 50ms), (TensorShape{4, 8}));
    for (auto& r : register_all(client, "b", {{2, true, 0, 0}, {2, false, 1, 1}}))
        ASSERT_EQ(r.error, "");
    // The next job's non-root waits for its own root instead of reading {4, 8}.
    EXPECT_THROW(client.get_output_shape("b", 50ms), TimeoutError);
    client.set_output_shape("b", TensorShape{2, 8});
    EXPECT_EQ(client.get_output_shape("b", 50ms), (TensorShape{2, 8}));
    // A job whose registration failed (its peers gave up) leaves no shape behind either.
    auto out = register_all(client, "b", {{2, true, 0, 0}}, 30ms);
    ASSERT_TRUE(contains(out[0].error, "timed out")) << out[0].error;
    EXPECT_THROW(client.get_output_shape("b", 50ms), TimeoutError);
    EXPECT_EQ(client.manager()->nr_pending(), 0u);
}

TEST(GroupManager, BcastBytesReturnsTheRootsBytesToEveryone) {
    InProcessGroupClient client;
    std::vector<std::string> got(3);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 3; ++r)
        threads.emplace_back([&, r] {
            got[r] = client.bcast_bytes("id", 3, r, 1, r == 1 ? std::string("\0unique", 7) : "");
        });
    for (auto& t : threads) t.join();
    for (auto& g : got) EXPECT_EQ(g, std::string("\0unique", 7));
}

TEST(GroupManager, BcastRootDisagreementFailsEveryPeer) {
    InProcessGroupClient client;
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            try {
                client.bcast_bytes("id", 2, r, r, "x", 5s);
            } catch (const CommError& e) {
                errors[r] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors) EXPECT_TRUE(contains(e, "disagree on the root")) << e;
}

TEST(GroupManager, BarrierReleasesAllPeersTogetherAndCanRepeat) {
    InProcessGroupClient client;
    std::atomic<int> passed{0};
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 4; ++r)
        threads.emplace_back([&, r] {
            for (int round = 0; round < 20; ++round) {
                client.group_barrier("b", 4, r);
                ++passed;
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(passed.load(), 80);
}

TEST(GroupManager, KeyValueGetWaitsAndAddIsAtomic) {
    InProcessGroupClient client;
    auto reader = std::async(std::launch::async, [&] { return client.get("addr"); });
    client.set("addr", "10.0.0.1:1234");
    EXPECT_EQ(reader.get(), "10.0.0.1:1234");
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&] {
            for (int i = 0; i < 100; ++i) client.add("counter", 1);
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(client.add("counter", 0), 800);
    EXPECT_EQ(client.get("counter"), "800");
    EXPECT_THROW(client.add("addr", 1), ValueError);
    EXPECT_THROW(client.get("missing", 30ms), TimeoutError);
}

} // namespace
} // namespace braid::comm::test
