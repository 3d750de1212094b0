// The rendezvous server over TCP: many concurrent peers, deadlines, disconnects, hostile
// input (garbage, oversized frames, another protocol version, a wrong token) and peer
// disagreements, each rejected while other clients keep working.
#include "base/error.h"
#include "comm/frame.h"
#include "comm/rendezvous_server.h"
#include "comm/tcp_client.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <set>
#include <thread>

namespace braid::comm::test {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

//! A plain blocking socket to the server, for sending what no real client would.
class RawSocket {
public:
    explicit RawSocket(uint16_t port) {
        m_fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(port);
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        timeval tv{5, 0};
        ::setsockopt(m_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        EXPECT_EQ(::connect(m_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    }
    ~RawSocket() { close(); }
    void close() {
        if (m_fd >= 0) ::close(m_fd);
        m_fd = -1;
    }
    void write(const void* data, size_t size) {
        ASSERT_EQ(::send(m_fd, data, size, MSG_NOSIGNAL), ssize_t(size));
    }
    void write(const std::vector<uint8_t>& bytes) { write(bytes.data(), bytes.size()); }
    //! Reads one frame; returns its ErrorReply message, or "<eof>" / "<not an error>".
    std::string read_error() {
        uint8_t header[FRAME_HEADER_SIZE];
        if (!read_exact(header, sizeof(header))) return "<eof>";
        std::string error;
        uint32_t length = parse_frame_header(header, error);
        if (!length) return "<bad header: " + error + ">";
        std::vector<uint8_t> payload(length);
        if (!read_exact(payload.data(), length)) return "<eof>";
        auto* frame = verify_frame(payload.data(), length);
        if (!frame || frame->body_type() != fb::Body::ErrorReply) return "<not an error>";
        return frame->body_as_ErrorReply()->message()->str();
    }
    //! True when the server closed the connection (read returns 0).
    bool closed_by_peer() {
        char c;
        return ::recv(m_fd, &c, 1, 0) == 0;
    }

private:
    bool read_exact(uint8_t* out, size_t size) {
        while (size) {
            ssize_t n = ::recv(m_fd, out, size, 0);
            if (n <= 0) return false;
            out += n;
            size -= size_t(n);
        }
        return true;
    }
    int m_fd = -1;
};

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
    uint32_t length = 17u << 20;
    std::vector<uint8_t> header = {'B',
                                   'R',
                                   'D',
                                   'Z',
                                   uint8_t(length),
                                   uint8_t(length >> 8),
                                   uint8_t(length >> 16),
                                   uint8_t(length >> 24)};
    raw.write(header);
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

} // namespace
} // namespace braid::comm::test
