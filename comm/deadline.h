// Deadlines for every blocking communication call.
//
// Nothing in comm/ waits forever: each blocking call computes a Deadline from a timeout
// (the caller's, or the default) and gives up with braid::TimeoutError once it passes.
// The default is 300 s; the environment variable BRAID_COMM_TIMEOUT (seconds, may be
// fractional) overrides it. Thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace braid::comm {

//! The clock every comm deadline is measured on.
using Clock = std::chrono::steady_clock;
//! How long a call may wait.
using Duration = std::chrono::milliseconds;
//! An optional per-call timeout; std::nullopt means default_timeout().
using Timeout = std::optional<Duration>;

//! The default timeout: BRAID_COMM_TIMEOUT seconds when set and valid, else 300 s. Read on
//! every call, so tests may change the variable; an invalid value logs a warning once per
//! distinct value and falls back to 300 s.
Duration default_timeout();

//! `timeout` when set, else default_timeout().
inline Duration resolve_timeout(Timeout timeout) {
    return timeout ? *timeout : default_timeout();
}

//! A point in time after which a blocking call gives up. A small value type.
class Deadline {
public:
    //! The deadline `span` from now, or the deadline of the run this thread executes when
    //! that comes first (base/run_control.h): a collective inside a run with a deadline gives
    //! up with the run.
    static Deadline after(Duration span);
    //! The deadline for `timeout` (or the default) from now.
    static Deadline from(Timeout timeout) { return after(resolve_timeout(timeout)); }

    Clock::time_point at() const { return m_at; }
    //! The span this deadline was created with (for error messages).
    Duration span() const { return m_span; }
    //! Time left, never negative.
    Duration remaining() const;
    bool passed() const { return Clock::now() >= m_at; }

private:
    Deadline(Clock::time_point at, Duration span) : m_at(at), m_span(span) {}
    Clock::time_point m_at;
    Duration m_span;
};

//! A span formatted for messages: "300 s", "0.25 s".
std::string format_duration(Duration span);

} // namespace braid::comm
