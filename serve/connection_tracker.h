// Which connections braid-serve is serving and whether each has a request in a handler, so
// that a server whose connection slots are all taken can make room for a waiting connection:
// a client that keeps a slot without a request in progress (idle on keep-alive, or trickling
// its request line and headers) is shut once it has done so for longer than the stall timeout.
// A request that reached a handler is never cut.
//
// Each tracked connection holds a duplicate of its socket, so the socket an entry names stays
// the same until the entry is closed, even after the server closed its own descriptor.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>

namespace braid::serve {

class ConnectionTracker {
public:
    using Clock = std::chrono::steady_clock;

    explicit ConnectionTracker(std::chrono::milliseconds stall_timeout)
        : m_stall_timeout(stall_timeout) {}
    ~ConnectionTracker();

    //! Socket `sock` starts being served on the calling thread (until close()).
    void open(int sock);
    //! The calling thread's connection is no longer served.
    void close();
    //! The calling thread's connection has a request in a handler (enter) or not any more.
    void enter_request();
    void leave_request();

    //! Shuts the connection that has gone longest without a request in a handler, when that is
    //! longer than the stall timeout; true when one was shut. Its thread then sees end of file
    //! and moves on to the next waiting connection.
    bool evict_stalled();
    //! Connections shut by evict_stalled() so far.
    uint64_t evicted() const { return m_evicted.load(std::memory_order_relaxed); }

private:
    struct Entry {
        int watch = -1;          //!< duplicate of the connection's socket
        Clock::time_point since; //!< start of the current stretch without a request
        bool in_request = false;
        bool shut = false;
    };

    std::chrono::milliseconds m_stall_timeout;
    std::mutex m_mutex;
    std::map<uint64_t, Entry> m_entries;
    uint64_t m_next_id = 0;
    std::atomic<uint64_t> m_evicted{0};
};

} // namespace braid::serve
