#include "base/error.h"

#include "base/log.h"

#include <new>

namespace braid {

namespace {
std::string joined(const std::string& context, const std::string& lead, std::string msg) {
    if (!lead.empty() && msg.rfind(lead, 0) == 0) {
        msg.erase(0, lead.size());
        if (msg.rfind(": ", 0) == 0) msg.erase(0, 2);
    }
    return context + ": " + msg;
}
} // namespace

std::exception_ptr with_error_context(std::exception_ptr err, const std::string& context,
                                      const std::string& lead) {
    try {
        std::rethrow_exception(err);
    }
#define BRAID_CONTEXT_CASE(type)                                                                   \
    catch (const type& e) {                                                                        \
        return std::make_exception_ptr(type(joined(context, lead, e.what())));                     \
    }
    // Most derived first.
    BRAID_CONTEXT_CASE(TimeoutError)
    BRAID_CONTEXT_CASE(CommError)
    BRAID_CONTEXT_CASE(GraphError)
    BRAID_CONTEXT_CASE(ShapeError)
    BRAID_CONTEXT_CASE(DTypeError)
    BRAID_CONTEXT_CASE(SerializationError)
    BRAID_CONTEXT_CASE(LibraryError)
    BRAID_CONTEXT_CASE(ValueError)
    BRAID_CONTEXT_CASE(MemoryBudgetError)
    BRAID_CONTEXT_CASE(CancelledError)
    BRAID_CONTEXT_CASE(DeadlineExceededError)
    BRAID_CONTEXT_CASE(InternalError)
    BRAID_CONTEXT_CASE(Error)
#undef BRAID_CONTEXT_CASE
    catch (const std::bad_alloc& e) {
        return std::make_exception_ptr(LibraryError(joined(context, lead, "out of memory")));
    }
    catch (const std::exception& e) {
        return std::make_exception_ptr(InternalError(joined(context, lead, e.what())));
    }
    catch (...) {
        return std::make_exception_ptr(InternalError(joined(context, lead, "unknown exception")));
    }
}

} // namespace braid

namespace braid::detail {

void assertion_failed(const char* cond, const char* file, int line, const std::string& msg) {
    auto text = fmt::format("internal assertion `{}` failed at {}:{}{}{}", cond, file, line,
                            msg.empty() ? "" : ": ", msg);
    logger()->error("{}", text);
    throw InternalError(text);
}

} // namespace braid::detail
