// Checking macros for CUDA runtime, cuBLAS and NCCL calls (CUDA builds only).
//
// Every CUDA, cuBLAS and NCCL call goes through one of these: a failure throws LibraryError
// whose message names the call, the library's own error string and its error code, e.g.
//   cudaMalloc(&p, size) failed: out of memory (cudaErrorMemoryAllocation)
// BRAID_NCCL_CHECK is usable where nccl.h is included (builds with BRAID_WITH_NCCL).
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace braid::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);
//! The cuBLAS error string (cuBLAS itself is loaded on first use).
const char* cublas_status_string(cublasStatus_t status);
//! Throws LibraryError for the ncclResult_t `result` (an int here, so that this header needs
//! no nccl.h) with ncclGetErrorString's text; defined in base/cuda_nccl_check.cpp.
[[noreturn]] void throw_nccl_error(int result, const char* call, const char* file, int line);
} // namespace braid::detail

//! Runs a CUDA runtime call; throws LibraryError with cudaGetErrorString on failure.
#define BRAID_CUDA_CHECK(call)                                                                     \
    do {                                                                                           \
        cudaError_t braid_cuda_err_ = (call);                                                      \
        if (__builtin_expect(braid_cuda_err_ != cudaSuccess, 0))                                   \
            ::braid::detail::throw_cuda_error(braid_cuda_err_, #call, __FILE__, __LINE__);         \
    } while (0)

//! Runs a cuBLAS call; throws LibraryError with cuBLAS's status string on failure.
#define BRAID_CUBLAS_CHECK(call)                                                                   \
    do {                                                                                           \
        cublasStatus_t braid_cublas_st_ = (call);                                                  \
        if (__builtin_expect(braid_cublas_st_ != CUBLAS_STATUS_SUCCESS, 0))                        \
            ::braid::detail::throw_cublas_error(braid_cublas_st_, #call, __FILE__, __LINE__);      \
    } while (0)

//! Runs an NCCL call; throws LibraryError with ncclGetErrorString's text unless it returned
//! ncclSuccess. (A nonblocking communicator's calls may also return ncclInProgress: the NCCL
//! backend checks those with its own macro, which accepts that value.)
#define BRAID_NCCL_CHECK(call)                                                                     \
    do {                                                                                           \
        ncclResult_t braid_nccl_rc_ = (call);                                                      \
        if (__builtin_expect(braid_nccl_rc_ != ncclSuccess, 0))                                    \
            ::braid::detail::throw_nccl_error(int(braid_nccl_rc_), #call, __FILE__, __LINE__);     \
    } while (0)
