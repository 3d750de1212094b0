// Rendezvous throughput: N clients register under one key at once and wait for each other.
//
//     bench_rendezvous --clients 4096 --json
//
// Starts a RendezvousServer in this process (or uses --port of a running braid-rendezvous) and
// drives N asynchronous clients from one thread: each connects, sends one register frame
// (nr_devices N, rank unassigned) and reads its reply. total_s runs from the first connect
// to the last reply; p50/p99 are per-client latencies from its connect to its reply.
#include "comm/frame.h"
#include "comm/rendezvous_server.h"

#include <CLI/CLI.hpp>
#include <asio.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

using namespace braid::comm;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

struct Client : std::enable_shared_from_this<Client> {
    tcp::socket socket;
    std::vector<uint8_t> request;
    std::array<uint8_t, FRAME_HEADER_SIZE> header{};
    std::vector<uint8_t> payload;
    Clock::time_point start, end;
    uint32_t rank = UINT32_MAX;
    uint64_t hash = 0;
    std::string error;

    explicit Client(asio::io_context& io) : socket(io) {}

    void run(const tcp::endpoint& server) {
        start = Clock::now();
        socket.async_connect(server, [self = shared_from_this()](std::error_code ec) {
            if (ec) return self->fail("connect", ec);
            std::error_code ignored;
            self->socket.set_option(tcp::no_delay(true), ignored);
            asio::async_write(self->socket, asio::buffer(self->request),
                              [self](std::error_code ec, size_t) {
                                  if (ec) return self->fail("write", ec);
                                  self->read_header();
                              });
        });
    }
    void read_header() {
        asio::async_read(socket, asio::buffer(header),
                         [self = shared_from_this()](std::error_code ec, size_t) {
                             if (ec) return self->fail("read", ec);
                             std::string error;
                             uint32_t n = parse_frame_header(self->header.data(), error);
                             if (!n) return self->fail(error.c_str(), {});
                             self->payload.resize(n);
                             asio::async_read(self->socket, asio::buffer(self->payload),
                                              [self](std::error_code ec, size_t) {
                                                  if (ec) return self->fail("read", ec);
                                                  self->done();
                                              });
                         });
    }
    void done() {
        end = Clock::now();
        auto* frame = verify_frame(payload.data(), payload.size());
        if (!frame || frame->body_type() != fb::Body::RegisterReply) {
            error = frame && frame->body_type() == fb::Body::ErrorReply
                        ? frame->body_as_ErrorReply()->message()->str()
                        : "bad reply";
            return;
        }
        rank = frame->body_as_RegisterReply()->rank();
        hash = frame->body_as_RegisterReply()->hash();
        std::error_code ignored;
        socket.close(ignored);
    }
    void fail(const char* what, std::error_code ec) {
        end = Clock::now();
        error = std::string(what) + ": " + ec.message();
    }
};

} // namespace

int main(int argc, char** argv) {
    size_t clients = 4096;
    uint16_t port = 0;
    size_t server_threads = 2;
    bool json = false;
    CLI::App app{"bench_rendezvous: N clients registering under one key"};
    app.add_option("--clients", clients, "clients")->check(CLI::Range(1, 60000));
    app.add_option("--port", port, "port of a running braid-rendezvous (0: start one here)");
    app.add_option("--server-threads", server_threads, "threads of the in-process server");
    app.add_flag("--json", json, "one JSON object");
    CLI11_PARSE(app, argc, argv);

    raise_fd_limit(2 * clients + 1024);
    std::unique_ptr<RendezvousServer> server;
    if (port == 0) {
        ServerOptions options;
        options.nr_threads = server_threads;
        server = std::make_unique<RendezvousServer>(options);
        port = server->start();
    }
    asio::io_context io(1);
    tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), port);
    std::vector<std::shared_ptr<Client>> all;
    for (size_t i = 0; i < clients; ++i) {
        auto c = std::make_shared<Client>(io);
        c->request = make_register_frame(FrameMeta{i + 1, {}, 60000, 60000, PROTOCOL_VERSION},
                                         "bench", uint32_t(clients), false, UNASSIGNED_RANK, i);
        all.push_back(c);
    }
    auto start = Clock::now();
    for (auto& c : all) c->run(endpoint);
    io.run();
    auto end = Clock::now();
    std::vector<double> latency_ms;
    std::set<uint32_t> ranks;
    for (auto& c : all) {
        if (!c->error.empty() || c->hash != all[0]->hash) {
            std::fprintf(stderr, "bench_rendezvous: client failed: %s\n", c->error.c_str());
            return 1;
        }
        ranks.insert(c->rank);
        latency_ms.push_back(std::chrono::duration<double, std::milli>(c->end - c->start).count());
    }
    if (ranks.size() != clients) {
        std::fprintf(stderr, "bench_rendezvous: %zu distinct ranks for %zu clients\n", ranks.size(),
                     clients);
        return 1;
    }
    std::sort(latency_ms.begin(), latency_ms.end());
    auto pct = [&](double p) {
        return latency_ms[std::min(latency_ms.size() - 1, size_t(p * double(latency_ms.size())))];
    };
    double total_s = std::chrono::duration<double>(end - start).count();
    if (json)
        std::printf("{\"bench\":\"rendezvous\",\"clients\":%zu,\"total_s\":%.4f,\"p50_ms\":%.2f,"
                    "\"p99_ms\":%.2f,\"server_threads\":%zu}\n",
                    clients, total_s, pct(0.50), pct(0.99), server ? server_threads : 0);
    else
        std::printf("%zu clients registered in %.4f s (p50 %.2f ms, p99 %.2f ms)\n", clients,
                    total_s, pct(0.50), pct(0.99));
    if (server) server->stop();
    return 0;
}
