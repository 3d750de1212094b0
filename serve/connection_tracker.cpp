#include "serve/connection_tracker.h"

#include <sys/socket.h>
#include <unistd.h>

namespace braid::serve {

namespace {
//! The calling thread's connection (0: none): one thread serves one connection at a time.
thread_local uint64_t t_connection = 0;
} // namespace

ConnectionTracker::~ConnectionTracker() {
    for (auto& [id, e] : m_entries) ::close(e.watch);
}

void ConnectionTracker::open(int sock) {
    Entry e;
    e.watch = ::dup(sock); // -1 when out of descriptors: the connection is then never shut
    e.since = Clock::now();
    std::lock_guard lk(m_mutex);
    t_connection = ++m_next_id;
    m_entries.emplace(t_connection, e);
}

void ConnectionTracker::close() {
    std::lock_guard lk(m_mutex);
    auto it = m_entries.find(t_connection);
    t_connection = 0;
    if (it == m_entries.end()) return;
    if (it->second.watch >= 0) ::close(it->second.watch);
    m_entries.erase(it);
}

void ConnectionTracker::enter_request() {
    std::lock_guard lk(m_mutex);
    auto it = m_entries.find(t_connection);
    if (it != m_entries.end()) it->second.in_request = true;
}

void ConnectionTracker::leave_request() {
    std::lock_guard lk(m_mutex);
    auto it = m_entries.find(t_connection);
    if (it == m_entries.end()) return;
    it->second.in_request = false;
    it->second.since = Clock::now();
}

bool ConnectionTracker::evict_stalled() {
    std::lock_guard lk(m_mutex);
    Entry* oldest = nullptr;
    for (auto& [id, e] : m_entries)
        if (!e.in_request && !e.shut && e.watch >= 0 && (!oldest || e.since < oldest->since))
            oldest = &e;
    if (!oldest || Clock::now() - oldest->since < m_stall_timeout) return false;
    oldest->shut = true;
    ::shutdown(oldest->watch, SHUT_RDWR);
    m_evicted.fetch_add(1, std::memory_order_relaxed);
    return true;
}

} // namespace braid::serve
