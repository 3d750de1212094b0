#include "base/error.h"

#include "base/log.h"

namespace braid::detail {

void assertion_failed(const char* cond, const char* file, int line, const std::string& msg) {
    auto text = fmt::format("internal assertion `{}` failed at {}:{}{}{}", cond, file, line,
                            msg.empty() ? "" : ": ", msg);
    logger()->error("{}", text);
    throw InternalError(text);
}

} // namespace braid::detail
