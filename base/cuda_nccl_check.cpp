// The NCCL half of the checking macros (builds with NCCL only; see base/cuda_check.h).
#include "base/cuda_check.h"
#include "base/error.h"

#include <nccl.h>

namespace braid::detail {

void throw_nccl_error(int result, const char* call, const char* file, int line) {
    auto rc = static_cast<ncclResult_t>(result);
    throw LibraryError(fmt::format("{} failed: {} (ncclResult_t {}) at {}:{}", call,
                                   ncclGetErrorString(rc), result, file, line));
}

} // namespace braid::detail
