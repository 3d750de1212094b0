#include "comm/peer_liveness.h"

#include "base/error.h"
#include "base/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace braid::comm {

std::string liveness_key(const std::string& prefix, const char* what, uint32_t rank) {
    return fmt::format("{}{}/{}", prefix, what, rank);
}

int64_t read_beat(GroupClient& client, const std::string& prefix, uint32_t rank, Duration timeout) {
    return client.add(liveness_key(prefix, "beat", rank), 0, timeout);
}

PeerLiveness& PeerLiveness::instance() {
    // Never destroyed: communicators held by other static objects leave it at exit.
    static auto* liveness = new PeerLiveness;
    return *liveness;
}

uint64_t PeerLiveness::join(Member member) {
    std::lock_guard lock(m_mutex);
    uint64_t id = m_next_id++;
    Entry entry;
    entry.id = id;
    entry.member = std::move(member);
    m_entries.push_back(std::move(entry));
    if (!m_watchdog.joinable()) {
        m_stop = false;
        m_watchdog = std::thread([this] { watch(); });
    }
    return id;
}

void PeerLiveness::leave(uint64_t id) {
    std::thread watchdog;
    {
        std::lock_guard lock(m_mutex);
        std::erase_if(m_entries, [&](const Entry& e) { return e.id == id; });
        if (!m_entries.empty()) return;
        m_stop = true;
        watchdog = std::move(m_watchdog);
    }
    m_wake.notify_all();
    if (watchdog.joinable()) watchdog.join();
}

void PeerLiveness::call_started(uint64_t id, const char* call) {
    std::lock_guard lock(m_mutex);
    for (auto& e : m_entries)
        if (e.id == id) {
            e.call = call;
            e.since = Clock::now();
            ++e.generation;
        }
}

void PeerLiveness::call_done(uint64_t id) {
    std::lock_guard lock(m_mutex);
    for (auto& e : m_entries)
        if (e.id == id) e.call = nullptr;
}

void PeerLiveness::publish_failure(uint64_t id, const char* call, const std::string& reason,
                                   Deadline deadline) {
    std::vector<Member> others;
    std::optional<Member> own;
    std::string elsewhere;
    {
        std::lock_guard lock(m_mutex);
        for (auto& e : m_entries) {
            if (e.id != id) {
                others.push_back(e.member);
                continue;
            }
            own = e.member;
            elsewhere = fmt::format("{}{}: {}", FAILED_ELSEWHERE, e.member.describe(call),
                                    reason.substr(0, 256));
        }
    }
    if (!own) return;
    auto left = [&] { return std::max(deadline.remaining(), Duration(1)); };
    own->client->set(liveness_key(own->prefix, "failed", own->rank), reason.substr(0, 512), left());
    for (auto& m : others)
        m.client->set(liveness_key(m.prefix, "failed", m.rank), elsewhere, left());
}

void PeerLiveness::watch() {
    std::unique_lock lock(m_mutex);
    while (!m_stop) {
        m_wake.wait_for(lock, BEAT_INTERVAL);
        if (m_stop) break;
        // The longest-blocked call, if one is blocked for longer than a beat.
        Entry* blocked = nullptr;
        auto now = Clock::now();
        for (auto& e : m_entries)
            if (e.call && now - e.since >= BEAT_INTERVAL && (!blocked || e.since < blocked->since))
                blocked = &e;
        if (!blocked) continue;
        bool publish_waiting = blocked->published != blocked->generation;
        blocked->published = blocked->generation;
        std::string waiting = blocked->member.describe(blocked->call);
        std::vector<Member> members;
        for (auto& e : m_entries) members.push_back(e.member);
        lock.unlock();
        try {
            for (auto& m : members) {
                if (publish_waiting)
                    m.client->set(liveness_key(m.prefix, "waiting", m.rank), waiting,
                                  BEAT_INTERVAL * 5);
                m.client->add(liveness_key(m.prefix, "beat", m.rank), 1, BEAT_INTERVAL * 5);
            }
        } catch (const std::exception& e) {
            logger()->debug("peer liveness: publishing the beat failed: {}", e.what());
        }
        lock.lock();
    }
}

} // namespace braid::comm
