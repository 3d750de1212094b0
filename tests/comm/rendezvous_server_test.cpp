// The rendezvous server over TCP: many concurrent peers, deadlines, disconnects, hostile
// input (garbage, oversized frames, another protocol version, a wrong token) and peer
// disagreements, each rejected while other clients keep working.
#include "base/error.h"
#include "comm/frame.h"
#include "comm/rendezvous_handler.h"
#include "comm/rendezvous_server.h"
#include "comm/tcp_client.h"
#include "raw_socket.h"

#include <gtest/gtest.h>

#include <future>
#include <set>
#include <thread>

namespace braid::comm::test {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

class RendezvousServerTest : public ::testing::Test {
protected:
    void SetUp() override { start({}); }
    void start(ServerOptions options) {
        m_server = std::make_unique<RendezvousServer>(std::move(options));
        m_port = m_server->start();
    }
    std::shared_ptr<TcpGroupClient> client(std::string token = "") {
        TcpClientOptions options;
        options.token = std::move(token);
        return std::make_shared<TcpGroupClient>("127.0.0.1", m_port, options);
    }
    //! A peer that waits in a register of `key` while hostile input arrives elsewhere.
    std::future<RegisterInfo> waiting_peer(const std::string& key) {
        auto c = client();
        return std::async(std::launch::async,
                          [c, key] { return c->opr_register(key, 2, false, 0, 0, 20s); });
    }
    void complete_peer(const std::string& key, std::future<RegisterInfo>& waiting) {
        auto info = client()->opr_register(key, 2, false, 1, 1, 20s);
        EXPECT_EQ(waiting.get().hash, info.hash);
    }
    //! Waits until the server holds `n` buffered bytes (replies are released once written).
    void wait_buffered(size_t n) {
        for (int i = 0; i < 500 && m_server->buffered_bytes() != n; ++i)
            std::this_thread::sleep_for(10ms);
        ASSERT_EQ(m_server->buffered_bytes(), n);
    }
    void wait_pending(size_t n) {
        for (int i = 0; i < 500 && m_server->manager()->nr_pending() != n; ++i)
            std::this_thread::sleep_for(10ms);
        ASSERT_EQ(m_server->manager()->nr_pending(), n);
    }

    std::unique_ptr<RendezvousServer> m_server;
    uint16_t m_port = 0;
};

TEST_F(RendezvousServerTest, ThousandConcurrentClientsGetEachRankExactlyOnce) {
    raise_fd_limit(8192);
    constexpr uint32_t N = 1024;
    std::vector<RegisterInfo> infos(N);
    std::vector<std::string> errors(N);
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < N; ++i)
        threads.emplace_back([&, i] {
            try {
                // Comp node ids in reverse order: rank i goes to the client with id N-1-i.
                TcpGroupClient c("127.0.0.1", m_port);
                infos[i] = c.opr_register("crowd", N, i == 5, UNASSIGNED_RANK, N - 1 - i, 60s);
            } catch (const std::exception& e) {
                errors[i] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    std::set<uint32_t> ranks;
    for (uint32_t i = 0; i < N; ++i) {
        ASSERT_EQ(errors[i], "") << "client " << i;
        EXPECT_EQ(infos[i].rank, N - 1 - i);
        EXPECT_EQ(infos[i].hash, infos[0].hash);
        EXPECT_EQ(infos[i].root_rank, N - 1 - 5);
        ranks.insert(infos[i].rank);
    }
    EXPECT_EQ(ranks.size(), N);
    EXPECT_EQ(*ranks.rbegin(), N - 1);
}

TEST_F(RendezvousServerTest, DeadlineReplyListsMissingRanks) {
    auto c = client();
    // Rank 0 waits longer, so it is still there when rank 2's shorter deadline passes.
    auto first = std::async(std::launch::async, [&] {
        try {
            c->opr_register("late", 4, false, 0, 10, 1500ms);
            return std::string("registered");
        } catch (const TimeoutError& e) {
            return std::string(e.what());
        }
    });
    wait_pending(1);
    try {
        c->opr_register("late", 4, false, 2, 11, 300ms);
        FAIL() << "registered without ranks 1 and 3";
    } catch (const TimeoutError& e) {
        EXPECT_EQ(std::string(e.what()),
                  "opr_register(key \"late\") timed out after 0.3 s: 2 of 4 peers arrived "
                  "(comp node ids: 10, 11); missing ranks: 1, 3");
    }
    EXPECT_EQ(first.get(), "opr_register(key \"late\") timed out after 1.5 s: 1 of 4 peers "
                           "arrived (comp node ids: 10); rank 2 arrived and timed out; missing "
                           "ranks: 1, 3");
    wait_pending(0);
}

TEST_F(RendezvousServerTest, ClientDisconnectingMidWaitIsWithdrawn) {
    {
        RawSocket raw(m_port);
        raw.write(make_register_frame(FrameMeta{1, "", 60000}, "gone", 2, false, 0, 0));
        wait_pending(1);
    }
    wait_pending(0);
    // Rank 0 is free again: had the dead registration stayed, this would be a duplicate.
    auto c = client();
    auto a = std::async(std::launch::async,
                        [&] { return c->opr_register("gone", 2, false, 0, 0, 10s); });
    auto b = c->opr_register("gone", 2, false, 1, 1, 10s);
    EXPECT_EQ(a.get().hash, b.hash);
}

TEST_F(RendezvousServerTest, GarbageIsRejectedWhileOthersKeepWorking) {
    auto waiting = waiting_peer("busy");
    RawSocket raw(m_port);
    std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    raw.write(http.data(), http.size());
    EXPECT_TRUE(contains(raw.read_error(), "bad frame magic"));
    EXPECT_TRUE(raw.closed_by_peer());
    complete_peer("busy", waiting);
}

TEST_F(RendezvousServerTest, PayloadFailingVerificationIsRejected) {
    auto waiting = waiting_peer("busy");
    RawSocket raw(m_port);
    std::vector<uint8_t> frame = {'B', 'R', 'D', 'Z', 64, 0, 0, 0};
    for (int i = 0; i < 64; ++i) frame.push_back(uint8_t(i * 37 + 11));
    raw.write(frame);
    EXPECT_TRUE(contains(raw.read_error(), "malformed frame"));
    EXPECT_TRUE(raw.closed_by_peer());
    complete_peer("busy", waiting);
}

TEST_F(RendezvousServerTest, OversizedFrameIsRejected) {
    auto waiting = waiting_peer("busy");
    RawSocket raw(m_port);
    raw.write(hello_frame());
    EXPECT_EQ(raw.read_error(), "<not an error>");
    raw.write_header(17u << 20);
    EXPECT_TRUE(contains(raw.read_error(), "exceeds the limit of 16777216 bytes"));
    EXPECT_TRUE(raw.closed_by_peer());
    complete_peer("busy", waiting);
}

TEST_F(RendezvousServerTest, OtherProtocolVersionGetsAClearError) {
    auto waiting = waiting_peer("busy");
    RawSocket raw(m_port);
    flatbuffers::FlatBufferBuilder b;
    auto body = fb::CreateBarrierRequest(b, b.CreateString("v"), 1, 0);
    raw.write(make_frame(b, FrameMeta{7, "", 1000, 0, 99}, fb::Body::BarrierRequest, body.Union()));
    EXPECT_TRUE(contains(raw.read_error(), "protocol version 99 is not supported"));
    EXPECT_TRUE(raw.closed_by_peer());
    complete_peer("busy", waiting);
}

TEST_F(RendezvousServerTest, WrongTokenIsRejectedAndTheRightOneAccepted) {
    ServerOptions options;
    options.token = "s3cret";
    start(options);
    try {
        client("guess")->group_barrier("t", 1, 0, 5s);
        FAIL() << "wrong token accepted";
    } catch (const CommError& e) {
        EXPECT_TRUE(contains(e.what(), "authentication failed")) << e.what();
    }
    EXPECT_THROW(client("")->group_barrier("t", 1, 0, 5s), CommError);
    client("s3cret")->group_barrier("t", 1, 0, 5s);
}

TEST_F(RendezvousServerTest, PeerDisagreementsReachEveryPeer) {
    auto c = client();
    auto run = [&](const std::string& key, std::vector<std::tuple<uint32_t, bool, int32_t>> peers) {
        std::vector<std::string> errors(peers.size());
        std::vector<std::thread> threads;
        for (size_t i = 0; i < peers.size(); ++i)
            threads.emplace_back([&, i] {
                auto [nr, root, rank] = peers[i];
                try {
                    c->opr_register(key, nr, root, rank, i, 10s);
                } catch (const CommError& e) {
                    errors[i] = e.what();
                }
            });
        for (auto& t : threads) t.join();
        return errors;
    };
    for (auto& e : run("nr", {{2, false, -1}, {3, false, -1}, {3, false, -1}}))
        EXPECT_TRUE(contains(e, "disagree on nr_devices")) << e;
    for (auto& e : run("roots", {{2, true, -1}, {2, true, -1}}))
        EXPECT_TRUE(contains(e, "two peers claim to be root")) << e;
    for (auto& e : run("dup", {{2, false, 0}, {2, false, 0}}))
        EXPECT_TRUE(contains(e, "rank 0 is claimed twice")) << e;
    wait_pending(0);
}

TEST_F(RendezvousServerTest, ShapesBytesBarriersAndKeyValuesWorkOverTcp) {
    auto c = client();
    auto shape = std::async(std::launch::async, [&] { return c->get_output_shape("s", 10s); });
    c->set_output_shape("s", TensorShape{2, 3, 4});
    EXPECT_EQ(shape.get(), (TensorShape{2, 3, 4}));
    std::string id(128, '\0');
    for (size_t i = 0; i < id.size(); ++i) id[i] = char(i * 7);
    auto other =
        std::async(std::launch::async, [&] { return c->bcast_bytes("id", 2, 1, 0, "", 10s); });
    EXPECT_EQ(c->bcast_bytes("id", 2, 0, 0, id, 10s), id);
    EXPECT_EQ(other.get(), id);
    auto peer = std::async(std::launch::async, [&] { c->group_barrier("b", 2, 1, 10s); });
    c->group_barrier("b", 2, 0, 10s);
    peer.get();
    auto value = std::async(std::launch::async, [&] { return c->get("kv", 10s); });
    c->set("kv", "hello");
    EXPECT_EQ(value.get(), "hello");
    EXPECT_EQ(c->add("n", 5), 5);
    EXPECT_EQ(c->add("n", -2), 3);
    EXPECT_THROW(c->add("kv", 1), ValueError);
    EXPECT_THROW(c->get("absent", 100ms), TimeoutError);
    EXPECT_GE(c->nr_idle_connections(), 1u);
}

TEST_F(RendezvousServerTest, StoppingTheServerFailsWaitingClientsPromptly) {
    auto c = client();
    auto waiting = std::async(std::launch::async, [&] {
        try {
            c->opr_register("stop", 2, false, 0, 0, 60s);
            return std::string("registered");
        } catch (const CommError& e) {
            return std::string(e.what());
        }
    });
    wait_pending(1);
    m_server->stop();
    ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
    EXPECT_TRUE(contains(waiting.get(), "closed the connection")) << waiting.get();
}

TEST_F(RendezvousServerTest, UnreachableServerIsAClearErrorNotAHang) {
    m_server->stop();
    TcpClientOptions options;
    options.connect_retry = 200ms;
    TcpGroupClient c("127.0.0.1", m_port, options);
    try {
        c.group_barrier("x", 2, 0, 5s);
        FAIL();
    } catch (const CommError& e) {
        EXPECT_TRUE(contains(e.what(), "cannot connect to the rendezvous server")) << e.what();
    }
}

TEST_F(RendezvousServerTest, FirstFrameOverTheFirstFrameLimitIsRejectedBeforeBuffering) {
    auto waiting = waiting_peer("busy");
    wait_pending(1);
    RawSocket raw(m_port);
    raw.write_header(FIRST_FRAME_BYTES + 1);
    std::string error = raw.read_error();
    EXPECT_TRUE(contains(error, "a first frame of 65537 bytes exceeds the limit of 65536 bytes"))
        << error;
    EXPECT_TRUE(raw.closed_by_peer());
    // Only the error reply was held, until written.
    wait_buffered(0);
    complete_peer("busy", waiting);
}

TEST_F(RendezvousServerTest, WrongTokenCannotUnlockLargeFrames) {
    ServerOptions options;
    options.token = "s3cret";
    start(options);
    RawSocket raw(m_port);
    raw.write(hello_frame(1, "guess"));
    EXPECT_TRUE(contains(raw.read_error(), "authentication failed"));
    EXPECT_TRUE(raw.closed_by_peer());
    RawSocket right(m_port);
    right.write(hello_frame(1, "s3cret"));
    EXPECT_EQ(right.read_error(), "<not an error>");
    // Proved: a frame above the first-frame limit is read now (and this one is garbage).
    right.write_header(1u << 20);
    std::vector<uint8_t> junk(1u << 20, 0x5a);
    right.write(junk);
    EXPECT_TRUE(contains(right.read_error(), "malformed frame of 1048576 bytes"));
}

TEST_F(RendezvousServerTest, ClientsSendLargeFirstRequestsAfterAHello) {
    // A fresh client connection whose first request is 1 MiB: the client proves itself first.
    std::string value(1u << 20, 'v');
    client()->set("big", value, 10s);
    EXPECT_EQ(client()->get("big", 10s), value);
    auto c = client();
    auto other = std::async(std::launch::async,
                            [&] { return client()->bcast_bytes("wide", 2, 1, 0, "", 10s); });
    EXPECT_EQ(c->bcast_bytes("wide", 2, 0, 0, value, 10s), value);
    EXPECT_EQ(other.get(), value);
    wait_buffered(0);
}

TEST_F(RendezvousServerTest, UnfinishedFrameIsClosedAtTheFrameDeadline) {
    ServerOptions options;
    options.frame_read_timeout = 200ms;
    start(options);
    auto waiting = waiting_peer("busy");
    RawSocket raw(m_port);
    raw.write_header(1000);
    std::vector<uint8_t> part(100, 1);
    raw.write(part);
    auto begin = Clock::now();
    EXPECT_TRUE(raw.closed_by_peer());
    EXPECT_LT(Clock::now() - begin, 3s);
    // A header that stops half-way is a frame under way too.
    RawSocket half(m_port);
    half.write("BRD", 3);
    EXPECT_TRUE(half.closed_by_peer());
    complete_peer("busy", waiting);
}

TEST_F(RendezvousServerTest, IdleConnectionIsClosedButAWaitingOneIsNot) {
    ServerOptions options;
    options.idle_timeout = 200ms;
    start(options);
    RawSocket idle(m_port);
    auto begin = Clock::now();
    EXPECT_TRUE(idle.closed_by_peer());
    EXPECT_LT(Clock::now() - begin, 3s);
    // A connection waiting in a request is busy, however long the wait: it completes.
    auto waiting = waiting_peer("slow");
    std::this_thread::sleep_for(600ms);
    complete_peer("slow", waiting);
    // The client's pooled connections were closed meanwhile; it reconnects by itself.
    std::this_thread::sleep_for(400ms);
    auto c = client();
    c->group_barrier("solo", 1, 0, 5s);
    std::this_thread::sleep_for(400ms);
    c->group_barrier("solo", 1, 0, 5s);
}

TEST_F(RendezvousServerTest, BufferCapClosesTheConnectionThatWouldExceedIt) {
    ServerOptions options;
    options.max_frame_bytes = 4u << 20;
    options.max_buffered_bytes = 8u << 20;
    start(options);
    // Two proved connections announce 4 MiB frames; together they would hold more than the
    // share of the cap large frames may use (7 MiB of 8).
    RawSocket first(m_port), second(m_port);
    for (RawSocket* raw : {&first, &second}) {
        raw->write(hello_frame());
        ASSERT_EQ(raw->read_error(), "<not an error>");
        raw->write_header(4u << 20);
    }
    // All but the last 64 KiB: whatever steps the buffers grow in, two of them exceed 7 MiB.
    std::vector<uint8_t> chunk((4u << 20) - (64u << 10), 7);
    ASSERT_TRUE(first.try_write(chunk.data(), chunk.size()));
    for (int i = 0; i < 500 && m_server->buffered_bytes() < chunk.size(); ++i)
        std::this_thread::sleep_for(5ms);
    EXPECT_GE(m_server->buffered_bytes(), chunk.size());
    EXPECT_LE(m_server->buffered_bytes(), (4u << 20) + 4096);
    second.try_write(chunk.data(), chunk.size());
    std::string error = second.read_error();
    EXPECT_TRUE(contains(error, "out of buffer space")) << error;
    EXPECT_TRUE(second.closed_by_peer());
    EXPECT_LE(m_server->buffered_bytes(), 8u << 20);
    // Small requests still fit beside the large frame.
    auto waiting = waiting_peer("beside");
    complete_peer("beside", waiting);
    first.close();
    wait_buffered(0);
}

TEST_F(RendezvousServerTest, OverlongKeyIsAValueError) {
    std::string key(MAX_KEY_BYTES + 1, 'k');
    try {
        client()->group_barrier(key, 1, 0, 5s);
        FAIL();
    } catch (const ValueError& e) {
        EXPECT_TRUE(contains(e.what(), "a key of 4097 bytes exceeds the limit of 4096 bytes"))
            << e.what();
    }
    client()->group_barrier(std::string(MAX_KEY_BYTES, 'k'), 1, 0, 5s);
}

TEST_F(RendezvousServerTest, HugeGroupSizesAreRefusedWithTheLimit) {
    auto c = client();
    try {
        c->opr_register("huge", 0xffffffffu, false, UNASSIGNED_RANK, 0, 5s);
        FAIL();
    } catch (const ValueError& e) {
        EXPECT_TRUE(contains(e.what(), "nr_devices 4294967295 exceeds the maximum world size of "
                                       "65536"))
            << e.what();
    }
    EXPECT_THROW(c->group_barrier("huge", 0xffffffffu, 0, 5s), ValueError);
    EXPECT_THROW(c->bcast_bytes("huge", 0xffffffffu, 0, 0, "x", 5s), ValueError);
    ServerOptions options;
    options.max_world_size = 2;
    start(options);
    EXPECT_THROW(client()->group_barrier("three", 3, 0, 5s), ValueError);
}

TEST_F(RendezvousServerTest, ContradictoryLimitsAreRefused) {
    ServerOptions options;
    options.first_frame_bytes = 1024;
    EXPECT_THROW(RendezvousServer{options}, ValueError);
    options = {};
    options.max_buffered_bytes = options.max_frame_bytes - 1;
    EXPECT_THROW(RendezvousServer{options}, ValueError);
}

} // namespace
} // namespace braid::comm::test
