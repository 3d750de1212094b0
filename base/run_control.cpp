#include "base/run_control.h"

namespace braid {

namespace {
thread_local const RunControl* t_current = nullptr;
} // namespace

void RunControl::check() const {
    if (cancelled()) throw CancelledError("the run was cancelled");
    if (m_deadline != Clock::time_point::max() && Clock::now() >= m_deadline)
        throw DeadlineExceededError("the run passed its deadline");
}

const RunControl* current_run_control() {
    return t_current;
}

RunControlScope::RunControlScope(const RunControl* rc) : m_prev(t_current) {
    t_current = rc;
}

RunControlScope::~RunControlScope() {
    t_current = m_prev;
}

} // namespace braid
