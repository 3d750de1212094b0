#include "comm/deadline.h"

#include "base/log.h"
#include "base/run_control.h"

#include <cmath>
#include <cstdlib>
#include <mutex>
#include <set>

namespace braid::comm {

namespace {
constexpr Duration DEFAULT_TIMEOUT = std::chrono::seconds(300);
} // namespace

Duration default_timeout() {
    const char* env = std::getenv("BRAID_COMM_TIMEOUT");
    if (!env || !*env) return DEFAULT_TIMEOUT;
    char* end = nullptr;
    double seconds = std::strtod(env, &end);
    if (end && *end == '\0' && std::isfinite(seconds) && seconds > 0 && seconds < 1e9)
        return Duration(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
    // Warn once per distinct bad value, not on every call.
    static std::mutex mutex;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mutex);
    if (warned.insert(env).second)
        logger()->warn("BRAID_COMM_TIMEOUT=\"{}\" is not a positive number of seconds; "
                       "using the default of 300 s",
                       env);
    return DEFAULT_TIMEOUT;
}

Deadline Deadline::after(Duration span) {
    auto at = Clock::now() + span;
    if (const RunControl* rc = current_run_control(); rc && rc->deadline() < at) {
        at = rc->deadline();
        span = std::chrono::duration_cast<Duration>(at - Clock::now());
        if (span.count() < 0) span = Duration::zero();
    }
    return Deadline(at, span);
}

Duration Deadline::remaining() const {
    auto left = std::chrono::duration_cast<Duration>(m_at - Clock::now());
    return left.count() > 0 ? left : Duration::zero();
}

std::string format_duration(Duration span) {
    double seconds = double(span.count()) / 1000.0;
    return fmt::format("{:g} s", seconds);
}

} // namespace braid::comm
