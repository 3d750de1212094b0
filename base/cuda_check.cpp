#include "base/cuda_check.h"

#include "base/cuda_cublas.h"
#include "base/error.h"

namespace braid::detail {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
    // Clear the sticky "last error" so later unrelated checks do not report it again.
    (void)cudaGetLastError();
    throw LibraryError(fmt::format("{} failed: {} ({}) at {}:{}", call, cudaGetErrorString(err),
                                   cudaGetErrorName(err), file, line));
}

const char* cublas_status_string(cublasStatus_t status) {
    auto* api = loaded_cublas();
    return api ? api->status_string(status) : "cuBLAS is not loaded";
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
    auto* api = loaded_cublas();
    throw LibraryError(fmt::format("{} failed: {} ({}) at {}:{}", call,
                                   cublas_status_string(status),
                                   api ? api->status_name(status) : "?", file, line));
}

} // namespace braid::detail
