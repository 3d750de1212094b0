// braid-serve: an inference server for braid models speaking the Open Inference Protocol
// (KServe v2) over HTTP/REST, built only on braid's public embedding API (<braid/embed.h>).
//
//     braid-serve --model-repository DIR [--host 127.0.0.1] [--port 8000]
//
// The first line printed names the address it listens on (with --port 0, the port picked).
// SIGTERM or SIGINT: stop accepting, finish the requests in flight, exit 0.
// Exit status: 0 after a drained shutdown, 1 when draining passed --drain-timeout-s, 2 usage
// error, 3 a model repository that does not load, 4 cannot listen. See docs/serving.md.
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/repository.h"

#include <braid/embed.h>

#include <CLI/CLI.hpp>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <pthread.h>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>

using namespace braid::serve;

namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
    int saved = errno;
    ssize_t n = write(g_signal_pipe[1], &sig, sizeof sig);
    (void)n;
    errno = saved;
}

//! Connections need a descriptor each: raise the soft limit to the hard one.
void raise_file_limit() {
    rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
}

} // namespace

int main(int argc, char** argv) {
    ServerOptions options;
    CLI::App app{"braid-serve: an Open Inference Protocol (KServe v2) server for braid models"};
    app.add_option("--model-repository", options.repository,
                   "directory with one folder per model (NAME/model.braid or NAME/model.onnx, "
                   "optional NAME/config.json)")
        ->envname("BRAID_SERVE_MODEL_REPOSITORY")
        ->required();
    app.add_option("--host", options.host, "address to listen on")
        ->envname("BRAID_SERVE_HOST")
        ->capture_default_str();
    app.add_option("--port", options.port, "port to listen on; 0 picks a free one")
        ->envname("BRAID_SERVE_PORT")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    app.add_flag("--model-control", options.model_control,
                 "enable POST /v2/repository/index and /v2/repository/models/NAME/load|unload")
        ->envname("BRAID_SERVE_MODEL_CONTROL");
    app.add_option("--max-body-bytes", options.max_body_bytes,
                   "largest request body; larger ones get 413")
        ->envname("BRAID_SERVE_MAX_BODY_BYTES")
        ->check(CLI::Range(size_t(1024), size_t(1) << 40))
        ->capture_default_str();
    app.add_option("--max-concurrent-requests", options.max_concurrent_requests,
                   "inference requests in flight at once; more get 503")
        ->envname("BRAID_SERVE_MAX_CONCURRENT_REQUESTS")
        ->check(CLI::Range(size_t(1), size_t(1) << 20))
        ->capture_default_str();
    app.add_option("--max-connections", options.max_connections,
                   "connections served at once (a thread each); more wait to be served")
        ->envname("BRAID_SERVE_MAX_CONNECTIONS")
        ->check(CLI::Range(size_t(1), size_t(1) << 16))
        ->capture_default_str();
    app.add_option("--idle-timeout-s", options.idle_timeout_s,
                   "close a connection idle this long between requests")
        ->envname("BRAID_SERVE_IDLE_TIMEOUT_S")
        ->check(CLI::Range(1, 3600))
        ->capture_default_str();
    app.add_option("--read-timeout-s", options.read_timeout_s,
                   "close a connection whose next bytes take this long to arrive")
        ->envname("BRAID_SERVE_READ_TIMEOUT_S")
        ->check(CLI::Range(1, 3600))
        ->capture_default_str();
    app.add_option("--stall-timeout-ms", options.stall_timeout_ms,
                   "when every connection slot is taken, close a connection that has had no "
                   "request in progress (idle, or sending its headers) for this long")
        ->envname("BRAID_SERVE_STALL_TIMEOUT_MS")
        ->check(CLI::Range(int64_t(1), int64_t(3600) * 1000))
        ->capture_default_str();
    app.add_option("--write-timeout-s", options.write_timeout_s,
                   "close a connection that takes this long to accept response bytes")
        ->envname("BRAID_SERVE_WRITE_TIMEOUT_S")
        ->check(CLI::Range(1, 3600))
        ->capture_default_str();
    app.add_option("--request-timeout-ms", options.request_timeout_ms,
                   "every inference request's deadline, at most (a request may ask for less)")
        ->envname("BRAID_SERVE_REQUEST_TIMEOUT_MS")
        ->check(CLI::Range(int64_t(1), int64_t(3600) * 1000))
        ->capture_default_str();
    app.add_option("--drain-timeout-s", options.drain_timeout_s,
                   "on SIGTERM, how long the requests in flight may take to finish")
        ->envname("BRAID_SERVE_DRAIN_TIMEOUT_S")
        ->check(CLI::Range(0, 3600))
        ->capture_default_str();
    app.add_option("--poll-us", options.poll_us,
                   "after answering a request, how long a connection polls for the next one "
                   "before it sleeps (0: sleeps at once)")
        ->envname("BRAID_SERVE_POLL_US")
        ->check(CLI::Range(int64_t(0), int64_t(1000000)))
        ->capture_default_str();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int code = app.exit(e);
        return e.get_exit_code() == 0 ? code : 2;
    }

    // SIGTERM and SIGINT write to a pipe that one thread reads (a handler may do little else);
    // threads the library started before main() could otherwise take the signal's default
    // action. A client that goes away must not kill the server with SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    if (pipe(g_signal_pipe) != 0) {
        std::perror("braid-serve: pipe");
        return 1;
    }
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    raise_file_limit();

    Metrics metrics;
    Repository repository(options.repository, metrics);
    try {
        repository.load_all();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "braid-serve: error: %s\n", e.what());
        return 3;
    }
    HttpServer server(options, repository, metrics);
    int port;
    try {
        port = server.bind();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "braid-serve: error: %s\n", e.what());
        return 4;
    }
    std::printf("braid-serve listening on http://%s:%d\n", options.host.c_str(), port);
    for (auto& name : repository.loaded()) {
        auto runner = repository.get(name);
        const auto& c = runner->config();
        std::printf("model %s (%s): %zu inputs, %zu outputs, %lld instance(s), %s\n", name.c_str(),
                    runner->platform().c_str(), runner->signature().inputs.size(),
                    runner->signature().outputs.size(), (long long)c.instances,
                    runner->batching()
                        ? ("dynamic batching up to " + std::to_string(c.max_batch_size) +
                           " rows, max queue delay " + std::to_string(c.max_queue_delay_us) + " us")
                              .c_str()
                        : "no batching");
    }
    std::fflush(stdout);

    // Waits for a signal, or for 0 written by main once serving ended another way.
    std::thread signal_thread([&] {
        int sig = 0;
        while (read(g_signal_pipe[0], &sig, sizeof sig) < 0 && errno == EINTR) {
        }
        if (sig == 0) return;
        std::printf("braid-serve: %s: draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        std::fflush(stdout);
        server.stop();
    });

    bool drained = server.serve();
    // The signal thread uses the server: it ends before the server does.
    int wake = 0;
    if (write(g_signal_pipe[1], &wake, sizeof wake) != sizeof wake) std::perror("braid-serve");
    signal_thread.join();
    if (!drained) {
        std::fprintf(stderr,
                     "braid-serve: connections still open after the drain timeout of %d s; "
                     "exiting\n",
                     options.drain_timeout_s);
        std::fflush(stderr);
        std::_Exit(1);
    }
    repository.clear();
    std::printf("braid-serve: stopped\n");
    std::fflush(stdout);
    return 0;
}
