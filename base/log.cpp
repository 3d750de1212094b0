#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace braid {

spdlog::logger* logger() {
    static std::shared_ptr<spdlog::logger> instance = [] {
        auto lg = spdlog::stderr_color_mt("braid");
        auto level = spdlog::level::warn;
        if (const char* env = std::getenv("BRAID_LOG_LEVEL")) level = spdlog::level::from_str(env);
        lg->set_level(level);
        lg->set_pattern("[braid %L %H:%M:%S.%e] %v");
        return lg;
    }();
    return instance.get();
}

} // namespace braid
