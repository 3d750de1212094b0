// braid's logger. Library code logs through it, never through printf or std::cout.
// The level comes from the environment variable BRAID_LOG_LEVEL
// (trace, debug, info, warn, error, critical, off); the default is warn.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace braid {

//! The process-wide braid logger (thread-safe), created on first use.
spdlog::logger* logger();

} // namespace braid
