// braid-server: the standalone rendezvous server (group manager) collective peers meet at.
//
//     braid-server [--host 127.0.0.1] [--port 0] [--token SECRET] [--threads 2]
//
// Prints "braid-server listening on HOST:PORT" once it accepts connections, then serves
// until SIGINT or SIGTERM. The token may also come from the environment (BRAID_TOKEN).
#include "base/error.h"
#include "comm/rendezvous_server.h"

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
    using namespace braid::comm;
    ServerOptions options;
    double default_wait_s = 0;
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
    CLI11_PARSE(app, argc, argv);
    if (default_wait_s > 0)
        options.default_wait = Duration(static_cast<int64_t>(default_wait_s * 1000.0));

    // Block the stop signals in every thread; the main thread takes them with sigwait.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    raise_fd_limit();

    RendezvousServer server(options);
    try {
        uint16_t port = server.start();
        std::printf("braid-server listening on %s:%u\n", options.host.c_str(), unsigned(port));
        std::fflush(stdout);
    } catch (const braid::Error& e) {
        std::fprintf(stderr, "braid-server: %s\n", e.what());
        return 1;
    }
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server.stop();
    return 0;
}
