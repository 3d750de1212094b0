// The braid error hierarchy and the internal assertion macro.
//
// User mistakes (bad shapes, bad files, mismatched peers) throw a subclass of
// braid::Error whose message names the operator or var, the values seen and the values
// expected. Internal invariants use BRAID_ASSERT, which user input never reaches.
#pragma once

#include <fmt/format.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace braid {

//! Root of every error braid throws on purpose.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

//! Graph construction or compilation misuse (empty outputs, foreign vars, reading early).
class GraphError : public Error {
public:
    using Error::Error;
};

//! Incompatible or invalid shapes.
class ShapeError : public Error {
public:
    using Error::Error;
};

//! Wrong or unsupported data type.
class DTypeError : public Error {
public:
    using Error::Error;
};

//! A model file or buffer that cannot be read.
class SerializationError : public Error {
public:
    using Error::Error;
};

//! A communication failure or a disagreement between peers.
class CommError : public Error {
public:
    using Error::Error;
};

//! A blocking wait passed its deadline.
class TimeoutError : public CommError {
public:
    using CommError::CommError;
};

//! A failure reported by an external library (BLAS, MPI, CUDA, NCCL).
class LibraryError : public Error {
public:
    using Error::Error;
};

//! A model or executable that needs more memory than the memory budget allows.
class MemoryBudgetError : public Error {
public:
    using Error::Error;
};

//! Bad argument to a public API that is none of the above.
class ValueError : public Error {
public:
    using Error::Error;
};

//! A run was cancelled through its RunControl (base/run_control.h).
class CancelledError : public Error {
public:
    using Error::Error;
};

//! A run passed its deadline.
class DeadlineExceededError : public Error {
public:
    using Error::Error;
};

//! An internal invariant broke: a bug in braid, never a user error.
class InternalError : public Error {
public:
    using Error::Error;
};

/*!
 * `err` as the same error class with `context` before its message: "context: message". A
 * message that already starts with `lead` (e.g. the operator's description, which `context`
 * begins with) has that start replaced by `context`, so nothing is said twice. braid::Error
 * subclasses keep their class, std::bad_alloc becomes LibraryError, other exceptions
 * InternalError. Used where errors leave a kernel (the executable names the operator).
 */
std::exception_ptr with_error_context(std::exception_ptr err, const std::string& context,
                                      const std::string& lead);

namespace detail {
[[noreturn]] void assertion_failed(const char* cond, const char* file, int line,
                                   const std::string& msg);
} // namespace detail

} // namespace braid

//! Checks an internal invariant; on failure throws InternalError with file, line and message.
#define BRAID_ASSERT(cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) [[unlikely]]                                                                  \
            ::braid::detail::assertion_failed(#cond, __FILE__, __LINE__,                           \
                                              ::fmt::format("" __VA_ARGS__));                      \
    } while (0)

//! Throws error type `type` with a fmt-formatted message.
#define BRAID_THROW(type, ...) throw type(::fmt::format(__VA_ARGS__))
