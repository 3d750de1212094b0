// braid-rendezvous: the standalone rendezvous server (group manager) collective peers meet at.
//
//     braid-rendezvous [--host 127.0.0.1] [--port 0] [--token SECRET] [--threads 2]
//                  [--max-world-size 65536] [--max-frame-bytes 16MiB] [--first-frame-bytes 64KiB]
//                  [--max-buffered-bytes 256MiB] [--frame-timeout 30] [--idle-timeout 600]
//
// Prints "braid-rendezvous listening on HOST:PORT" once it accepts connections, then serves
// until SIGINT or SIGTERM. The token may also come from the environment (BRAID_TOKEN).
#include "base/error.h"
#include "comm/rendezvous_server.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>

int main(int argc, char** argv) {
    using namespace braid::comm;
    ServerOptions options;
    double default_wait_s = 0;
    double frame_timeout_s = double(options.frame_read_timeout.count()) / 1000.0;
    double idle_timeout_s = double(options.idle_timeout.count()) / 1000.0;
    CLI::App app{"braid rendezvous server: the group manager collective peers meet at"};
    app.add_option("--host", options.host, "address to listen on")->capture_default_str();
    app.add_option("--port", options.port, "port to listen on (0: pick a free one)")
        ->capture_default_str();
    app.add_option("--token", options.token,
                   "shared secret clients must send (default: $BRAID_TOKEN; empty: none)")
        ->envname("BRAID_TOKEN");
    app.add_option("--threads", options.nr_threads, "threads serving connections")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
    app.add_option("--default-timeout", default_wait_s,
                   "seconds a request that names no timeout may wait (default: "
                   "$BRAID_COMM_TIMEOUT or 300)");
    app.add_option("--max-world-size", options.max_world_size,
                   "largest group accepted (nr_devices, bcast or barrier size)")
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 30));
    app.add_option("--max-frame-bytes", options.max_frame_bytes,
                   "largest request frame (bytes; suffixes KiB, MiB allowed)")
        ->capture_default_str()
        ->transform(CLI::AsSizeValue(false));
    app.add_option("--first-frame-bytes", options.first_frame_bytes,
                   "largest first frame of a connection, before it proved the token")
        ->capture_default_str()
        ->transform(CLI::AsSizeValue(false));
    app.add_option("--max-buffered-bytes", options.max_buffered_bytes,
                   "cap on frame buffers and queued replies of all connections together")
        ->capture_default_str()
        ->transform(CLI::AsSizeValue(false));
    app.add_option("--frame-timeout", frame_timeout_s,
                   "seconds a frame may take from its first byte to its last (and a reply to be "
                   "written)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--idle-timeout", idle_timeout_s,
                   "seconds a connection with nothing under way stays open")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    CLI11_PARSE(app, argc, argv);
    if (default_wait_s > 0)
        options.default_wait = Duration(static_cast<int64_t>(default_wait_s * 1000.0));
    options.frame_read_timeout =
        Duration(std::max<int64_t>(static_cast<int64_t>(frame_timeout_s * 1000.0), 1));
    options.idle_timeout =
        Duration(std::max<int64_t>(static_cast<int64_t>(idle_timeout_s * 1000.0), 1));

    // Block the stop signals in every thread; the main thread takes them with sigwait.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    raise_fd_limit();

    std::unique_ptr<RendezvousServer> server;
    try {
        server = std::make_unique<RendezvousServer>(options);
        uint16_t port = server->start();
        std::printf("braid-rendezvous listening on %s:%u\n", options.host.c_str(), unsigned(port));
        std::fflush(stdout);
    } catch (const braid::Error& e) {
        std::fprintf(stderr, "braid-rendezvous: %s\n", e.what());
        return 1;
    }
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server->stop();
    return 0;
}
