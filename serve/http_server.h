// braid-serve's HTTP front end: the Open Inference Protocol (KServe v2) REST endpoints, the
// model repository endpoints, /metrics, and the limits on bodies, requests and connections.
// The only file that includes the HTTP library (cpp-httplib).
//
// Thread-safe: bind() and serve() from one thread; stop() from any thread (a signal thread).
#pragma once

#include "serve/metrics.h"
#include "serve/repository.h"

#include <cstdint>
#include <memory>
#include <string>

namespace braid::serve {

//! Everything configurable about the server (flags and BRAID_SERVE_* environment variables).
struct ServerOptions {
    std::string repository;
    std::string host = "127.0.0.1";
    int port = 8000;
    bool model_control = false;           //!< the load / unload endpoints
    size_t max_body_bytes = 64u << 20;    //!< larger bodies get 413
    size_t max_concurrent_requests = 256; //!< more inference requests at once get 503
    size_t max_connections = 2048;        //!< connections served at once; more wait to be served
    int idle_timeout_s = 5;               //!< a connection idle this long is closed
    int read_timeout_s = 5;               //!< a read that waits this long closes the connection
    //! While connections wait for a slot, one without a request in progress (idle, or still
    //! sending its headers) for this long is closed to make room.
    int64_t stall_timeout_ms = 1000;
    int write_timeout_s = 5;
    int64_t request_timeout_ms = 30000; //!< every request's deadline, at most
    int drain_timeout_s = 30;           //!< on SIGTERM, how long requests in flight may take
    //! How long a connection that answered a request polls for the next before it sleeps.
    int64_t poll_us = 50;
};

//! The HTTP server. See the file comment for thread-safety.
class HttpServer {
public:
    HttpServer(const ServerOptions& options, Repository& repository, Metrics& metrics);
    ~HttpServer();

    //! Binds the listening socket; returns the port (the one picked when options.port is 0).
    //! Throws std::runtime_error when it cannot bind.
    int bind();
    //! Serves until stop(); returns true when every connection finished within the drain timeout.
    bool serve();
    //! Stops accepting, marks the server not ready, and lets serve() drain and return.
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace braid::serve
