// PeerLiveness: what a failing rank can learn about the peers that did not report its failure.
//
// A rank whose collective fails (a peer's connection closed, a wait timed out) names the
// peers that did not report the same failure. A peer may be silent because it is dead, or
// because it is alive in another call: blocked in a collective of another communicator, or
// failing there. Every process keeps one PeerLiveness with the communicators it holds
// (members), and publishes through each member's group client, under the member's key-value
// prefix and its rank there:
//  - "beat/<rank>", a counter, raised every BEAT_INTERVAL while one of the process's calls
//    has been blocked for longer than BEAT_INTERVAL, and "waiting/<rank>", which call that
//    is; a watchdog thread does this (it runs while the process has members);
//  - "failed/<rank>", set by the member whose call failed (with its reason), and on the other
//    members to "elsewhere: <call>: <reason>" (publish_failure).
// A failing rank reads a peer's beat before and after its report wait (read_beat): a beat
// that moved means the peer's process is alive and blocked where "waiting" says.
// Thread-safe.
#pragma once

#include "comm/deadline.h"
#include "comm/group_client.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace braid::comm {

//! How often a blocked call's process raises its beat (and how long a call must be blocked
//! before it does).
constexpr Duration BEAT_INTERVAL = std::chrono::milliseconds(200);

//! What a failure report published by another call of the same process starts with.
constexpr std::string_view FAILED_ELSEWHERE = "elsewhere: ";

class PeerLiveness {
public:
    //! One communicator's place: how to reach its group's key-value space, and how to name
    //! one of its calls in messages.
    struct Member {
        std::shared_ptr<GroupClient> client;
        std::string prefix; //!< key-value prefix of the group
        uint32_t rank = 0;  //!< this process's rank in the group
        std::function<std::string(const char*)> describe;
    };

    //! The process's one instance.
    static PeerLiveness& instance();

    //! Registers a member; returns its id. Starts the watchdog with the first member.
    uint64_t join(Member member);
    //! Unregisters a member; stops the watchdog with the last.
    void leave(uint64_t id);

    //! Member `id` enters `call` (a string literal) / leaves it.
    void call_started(uint64_t id, const char* call);
    void call_done(uint64_t id);

    //! Publishes the failure of member `id`'s `call`: "failed/<rank>" = reason on it,
    //! "elsewhere: <call>: <reason>" on every other member. Throws what the client throws.
    void publish_failure(uint64_t id, const char* call, const std::string& reason,
                         Deadline deadline);

private:
    struct Entry {
        uint64_t id = 0;
        Member member;
        const char* call = nullptr; //!< the call in progress, or null
        Clock::time_point since;    //!< when it started
        uint64_t generation = 0;    //!< counts calls
        uint64_t published = ~0ull; //!< generation last published as "waiting"
    };
    void watch();

    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::vector<Entry> m_entries;
    uint64_t m_next_id = 1;
    bool m_stop = false;
    std::thread m_watchdog;
};

//! Key of `what` ("beat", "waiting", "failed") of `rank` under `prefix`.
std::string liveness_key(const std::string& prefix, const char* what, uint32_t rank);

//! The beat counter of `rank` under `prefix` (0 when it never beat).
int64_t read_beat(GroupClient& client, const std::string& prefix, uint32_t rank, Duration timeout);

} // namespace braid::comm
