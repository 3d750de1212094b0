// cuBLAS, loaded with dlopen on first use (CUDA builds only).
//
// Linking libcublas directly would make every braid program map cuBLAS and cuBLASLt (about
// 570 MB) at start, which costs a quarter of a second per process even when no GPU is
// used. The table below holds the few entry points braid calls; load_cublas() opens the
// library once (thread-safe) and throws LibraryError naming the file and dlerror() when it
// cannot.
#pragma once

#include <cublas_api.h>

namespace braid {

//! The cuBLAS entry points braid uses.
struct CublasApi {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSgemm_v2) sgemm;
    //! The cublasComputeType_t overload (C++ also sees an inline cudaDataType one).
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void*, const void*, cudaDataType, int, const void*,
                              cudaDataType, int, const void*, void*, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    //! cublasGemmStridedBatchedEx, the cublasComputeType_t overload (as gemm_ex).
    cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                              int, int, int, const void*, const void*, cudaDataType,
                                              int, long long int, const void*, cudaDataType, int,
                                              long long int, const void*, void*, cudaDataType, int,
                                              long long int, int, cublasComputeType_t,
                                              cublasGemmAlgo_t);
    decltype(&cublasGetStatusString) status_string;
    decltype(&cublasGetStatusName) status_name;
};

//! The loaded cuBLAS (loads it on the first call). Thread-safe.
const CublasApi& load_cublas();
//! The cuBLAS table when already loaded, else nullptr.
const CublasApi* loaded_cublas();

} // namespace braid
