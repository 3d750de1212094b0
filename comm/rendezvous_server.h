// RendezvousServer: the group manager served over TCP (what `braid-server` runs).
//
// Asynchronous (standalone Asio): one io_context driven by a small thread pool, no thread
// per connection, so thousands of peers may wait at once. Every request frame is verified
// before use (comm/frame.h). A frame with a bad magic, an oversized length, a payload the
// flatbuffers Verifier rejects, another protocol version or a wrong token gets an error
// reply and the connection is closed; other clients are unaffected. A client that
// disconnects while waiting has its waits withdrawn (its peers keep waiting until their own
// deadlines). Each waiting request holds a timer: the client's timeout, capped by
// `max_wait`; when it fires the client gets a TimeoutError naming what was missing.
// Thread-safe: start() and stop() may be called from any thread.
#pragma once

#include "comm/deadline.h"
#include "comm/group_manager.h"

#include <cstdint>
#include <memory>
#include <string>

namespace braid::comm {

//! How a RendezvousServer listens and what it accepts.
struct ServerOptions {
    //! Address to listen on; loopback unless told otherwise.
    std::string host = "127.0.0.1";
    //! Port to listen on; 0 picks a free one (start() returns it).
    uint16_t port = 0;
    //! Shared secret every request must carry; empty accepts everyone.
    std::string token;
    //! Threads running the io_context.
    size_t nr_threads = 2;
    //! Largest frame payload accepted; a bigger one closes the connection.
    uint32_t max_frame_bytes = 16u << 20;
    //! How long a request that did not say may wait (its timeout_ms was 0).
    Duration default_wait = default_timeout();
    //! Upper bound on any request's wait, whatever the client asked.
    Duration max_wait = std::chrono::hours(24);
    //! Once a frame header arrived, its payload must follow within this span.
    Duration frame_read_timeout = std::chrono::seconds(30);
    //! Most waits one connection may have pending at once.
    size_t max_pending_per_connection = 4096;
};

//! The rendezvous server. Thread-safe.
class RendezvousServer {
public:
    //! A server over `manager` (a fresh one when null); nothing listens before start().
    explicit RendezvousServer(ServerOptions options = {},
                              std::shared_ptr<GroupManager> manager = nullptr);
    //! Stops the server (see stop()).
    ~RendezvousServer();
    RendezvousServer(const RendezvousServer&) = delete;
    RendezvousServer& operator=(const RendezvousServer&) = delete;

    //! Binds, listens and starts the worker threads; returns the port. Throws CommError
    //! when the address cannot be bound, or when already started.
    uint16_t start();
    //! Closes the listener and every connection (withdrawing their waits) and joins the
    //! worker threads. Idempotent.
    void stop();
    //! The port listened on (0 before start()).
    uint16_t port() const;
    //! Connections currently open.
    size_t nr_connections() const;
    //! The state served.
    const std::shared_ptr<GroupManager>& manager() const;

    struct Impl;

private:
    std::shared_ptr<Impl> m_impl;
};

//! Raises this process's soft RLIMIT_NOFILE to `wanted` (at most the hard limit); returns
//! the resulting soft limit. Servers and tests with thousands of sockets call it.
size_t raise_fd_limit(size_t wanted = 1u << 20);

} // namespace braid::comm
