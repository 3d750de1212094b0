#include "base/determinism.h"

#include "base/error.h"

#include <cstdlib>
#include <string>

namespace braid {

namespace {
thread_local bool t_deterministic = false;
} // namespace

bool deterministic_kernels() {
    return t_deterministic;
}

DeterministicScope::DeterministicScope(bool on) : m_prev(t_deterministic) {
    t_deterministic = on;
}

DeterministicScope::~DeterministicScope() {
    t_deterministic = m_prev;
}

bool deterministic_from_env() {
    static const bool on = [] {
        const char* env = std::getenv("BRAID_DETERMINISTIC");
        std::string v = env ? env : "";
        if (v.empty() || v == "0") return false;
        if (v == "1") return true;
        BRAID_THROW(ValueError, "BRAID_DETERMINISTIC=\"{}\": expected 0 or 1", v);
    }();
    return on;
}

} // namespace braid
