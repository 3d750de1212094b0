// cuDNN, loaded with dlopen on first use (CUDA builds that found cudnn.h, BRAID_WITH_CUDNN).
//
// Like cuBLAS (base/cuda_cublas.h), cuDNN is not linked: mapping it costs every process load
// time even when it never runs a convolution. The table below holds the entry points braid
// calls; load_cudnn() opens the library once (thread-safe). Every call goes through
// BRAID_CUDNN_CHECK, which throws LibraryError with cuDNN's own error string.
#pragma once

#if BRAID_WITH_CUDNN

#include <cudnn.h>

namespace braid {

//! The cuDNN entry points braid uses (the legacy convolution API, still in cuDNN 9).
struct CudnnApi {
    decltype(&cudnnGetVersion) get_version;
    decltype(&cudnnGetErrorString) error_string;
    decltype(&cudnnCreate) create;
    decltype(&cudnnDestroy) destroy;
    decltype(&cudnnSetStream) set_stream;
    decltype(&cudnnCreateTensorDescriptor) create_tensor_desc;
    decltype(&cudnnDestroyTensorDescriptor) destroy_tensor_desc;
    decltype(&cudnnSetTensor4dDescriptor) set_tensor_4d;
    decltype(&cudnnCreateFilterDescriptor) create_filter_desc;
    decltype(&cudnnDestroyFilterDescriptor) destroy_filter_desc;
    decltype(&cudnnSetFilter4dDescriptor) set_filter_4d;
    decltype(&cudnnCreateConvolutionDescriptor) create_conv_desc;
    decltype(&cudnnDestroyConvolutionDescriptor) destroy_conv_desc;
    decltype(&cudnnSetConvolution2dDescriptor) set_conv_2d;
    decltype(&cudnnSetConvolutionGroupCount) set_conv_groups;
    decltype(&cudnnSetConvolutionMathType) set_conv_math;
    decltype(&cudnnGetConvolutionForwardAlgorithm_v7) get_fwd_algos;
    decltype(&cudnnGetConvolutionForwardWorkspaceSize) get_fwd_workspace;
    decltype(&cudnnConvolutionForward) conv_forward;
    decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) get_bwd_data_algos;
    decltype(&cudnnGetConvolutionBackwardDataWorkspaceSize) get_bwd_data_workspace;
    decltype(&cudnnConvolutionBackwardData) conv_backward_data;
    decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) get_bwd_filter_algos;
    decltype(&cudnnGetConvolutionBackwardFilterWorkspaceSize) get_bwd_filter_workspace;
    decltype(&cudnnConvolutionBackwardFilter) conv_backward_filter;
};

//! The loaded cuDNN, or nullptr when it cannot be loaded (the reason is logged once).
//! Thread-safe; tries once per process.
const CudnnApi* try_load_cudnn();

//! The calling thread's cuDNN handle for CUDA device `device`, bound to `stream`. Handles are
//! per thread (a handle must not be used by two threads at once; each comp node runs its
//! kernels on its own worker thread) and live until the thread ends. Requires a loaded cuDNN.
cudnnHandle_t cudnn_handle(int device, cudaStream_t stream);

namespace detail {
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file,
                                    int line);
} // namespace detail

} // namespace braid

//! Runs a cuDNN call; throws LibraryError with cuDNN's error string on failure.
#define BRAID_CUDNN_CHECK(call)                                                                    \
    do {                                                                                           \
        cudnnStatus_t braid_cudnn_st_ = (call);                                                    \
        if (__builtin_expect(braid_cudnn_st_ != CUDNN_STATUS_SUCCESS, 0))                          \
            ::braid::detail::throw_cudnn_error(braid_cudnn_st_, #call, __FILE__, __LINE__);        \
    } while (0)

#endif // BRAID_WITH_CUDNN
