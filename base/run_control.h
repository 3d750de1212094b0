// Cancelling a run and giving it a deadline.
//
// A RunControl is handed to Executable::set_run_control(); the executable checks it before
// every operator, and parallel kernels (parallel_for) check it between chunks, so a run stops
// within about one chunk of work after cancel() or the deadline. The run then fails with
// CancelledError or DeadlineExceededError naming the operator it stopped at.
#pragma once

#include "base/error.h"

#include <atomic>
#include <chrono>

namespace braid {

//! Cancellation flag and deadline of one run. cancel() may be called from any thread.
class RunControl {
public:
    using Clock = std::chrono::steady_clock;

    void cancel() { m_cancelled.store(true, std::memory_order_relaxed); }
    //! Also counts as cancelled while `*flag` is true (a caller's token; null: none).
    void watch(const std::atomic<bool>* flag) { m_watched = flag; }
    bool cancelled() const {
        return m_cancelled.load(std::memory_order_relaxed) ||
               (m_watched && m_watched->load(std::memory_order_relaxed));
    }
    //! Clears the flag (for reuse by the next run).
    void reset() { m_cancelled.store(false, std::memory_order_relaxed); }
    //! The run fails once `deadline` passed; Clock::time_point::max() (the default): never.
    void set_deadline(Clock::time_point deadline) { m_deadline = deadline; }
    Clock::time_point deadline() const { return m_deadline; }
    //! True when the run should stop (cancelled or past its deadline).
    bool stop_requested() const {
        return cancelled() ||
               (m_deadline != Clock::time_point::max() && Clock::now() >= m_deadline);
    }
    //! Throws CancelledError or DeadlineExceededError when the run should stop.
    void check() const;

private:
    std::atomic<bool> m_cancelled{false};
    const std::atomic<bool>* m_watched = nullptr;
    Clock::time_point m_deadline = Clock::time_point::max();
};

//! The RunControl of the run this thread is executing (null when none).
const RunControl* current_run_control();

//! Makes `rc` this thread's current run control for the scope's lifetime.
class RunControlScope {
public:
    explicit RunControlScope(const RunControl* rc);
    ~RunControlScope();
    RunControlScope(const RunControlScope&) = delete;
    RunControlScope& operator=(const RunControlScope&) = delete;

private:
    const RunControl* m_prev;
};

} // namespace braid
