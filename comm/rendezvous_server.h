// RendezvousServer: the group manager served over TCP (what `braid-rendezvous` runs).
//
// Asynchronous (standalone Asio): one io_context driven by a small thread pool, no thread
// per connection, so thousands of peers may wait at once. Every request frame is verified
// before use (comm/frame.h) and handled by comm/rendezvous_handler.h. A frame with a bad
// magic, an oversized length, a payload the flatbuffers Verifier rejects, another protocol
// version or a wrong token gets an error reply and the connection is closed; other clients
// are unaffected. A client that disconnects while waiting has its waits withdrawn (its peers
// keep waiting until their own deadlines). Each waiting request holds a timer: the client's
// timeout, capped by `max_wait`; when it fires the client gets a TimeoutError naming what
// was missing.
//
// Memory a client can make the server hold is bounded whatever the client claims:
//  - a connection's first frame may be at most `first_frame_bytes` (64 KiB); only after a
//    frame proved the token (or, without a token, was a valid request) may frames grow to
//    `max_frame_bytes` (16 MiB);
//  - a payload buffer grows as its bytes arrive (to what is there, at least doubling), not
//    to the length the header announces;
//  - frame buffers and queued replies of all connections together are capped by
//    `max_buffered_bytes` (256 MiB); a connection that would exceed it is closed. Frame
//    buffers past the first-frame limit may fill only seven eighths of it, so small requests
//    and replies still fit while a few large frames are being read;
//  - a frame must be complete `frame_read_timeout` (30 s) after its first byte, a write
//    must finish within the same span, and a connection with nothing under way (no frame, no
//    waiting request, no reply queued) is closed after `idle_timeout` (10 min);
//  - groups larger than `max_world_size` (65536) are refused (see GroupManager).
// Thread-safe: start() and stop() may be called from any thread.
#pragma once

#include "comm/deadline.h"
#include "comm/frame.h"
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
    uint32_t max_frame_bytes = MAX_FRAME_BYTES;
    //! Largest payload of a connection's first frame (until a frame proved the token, or
    //! without a token was a valid request); at least MIN_FIRST_FRAME_BYTES.
    uint32_t first_frame_bytes = FIRST_FRAME_BYTES;
    //! Cap on the bytes held for all connections together (frame buffers and queued
    //! replies); a connection that would exceed it is closed.
    size_t max_buffered_bytes = size_t(256) << 20;
    //! Largest group accepted (nr_devices, or the size of a bcast or barrier); applies to the
    //! manager the server creates (a manager passed in keeps its own).
    uint32_t max_world_size = DEFAULT_MAX_WORLD_SIZE;
    //! How long a request that did not say may wait (its timeout_ms was 0).
    Duration default_wait = default_timeout();
    //! Upper bound on any request's wait, whatever the client asked.
    Duration max_wait = std::chrono::hours(24);
    //! Once a frame's first byte arrived, the whole frame must follow within this span; a
    //! reply must be written within it too.
    Duration frame_read_timeout = std::chrono::seconds(30);
    //! A connection with no frame under way, no waiting request and no reply queued is
    //! closed after this long.
    Duration idle_timeout = std::chrono::minutes(10);
    //! Most waits one connection may have pending at once.
    size_t max_pending_per_connection = 4096;

    //! Throws ValueError naming the option when the limits contradict each other.
    void validate() const;
};

//! The rendezvous server. Thread-safe.
class RendezvousServer {
public:
    //! A server over `manager` (a fresh one when null); nothing listens before start().
    //! Throws ValueError for invalid options (ServerOptions::validate()).
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
    //! Bytes held now for frame buffers and queued replies of all connections.
    size_t buffered_bytes() const;
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
