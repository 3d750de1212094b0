// Launch interface of the elementwise CUDA kernels (operators/cuda/elemwise.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! One elementwise launch. The output is contiguous with `n` elements.
struct ElemwiseLaunch {
    static constexpr int MAX_NDIM = 7;
    int mode = 0;  //!< opr::ElemMode value
    int dtype = 0; //!< DtypeCode of inputs and output (float32/16, bfloat16, int32, int64)
    int arity = 1;
    const void* in[2] = {nullptr, nullptr};
    void* out = nullptr;
    int64_t n = 0;
    //! Flat: each input is either the output's size (same element order) or one element.
    bool flat = true;
    bool scalar[2] = {false, false}; //!< flat only: input i is a single element
    //! Strided (flat == false): the output shape and each input's broadcast strides.
    int ndim = 0;
    int64_t shape[MAX_NDIM] = {};
    int64_t stride[2][MAX_NDIM] = {};
    int* error_flag = nullptr; //!< device-visible; set to 1 on an integer division by zero
    int64_t max_blocks = 1024;
};

//! Enqueues the elementwise kernel for `launch` on `stream`; false when the mode has no
//! kernel for the dtype.
bool launch_elemwise(const ElemwiseLaunch& launch, cudaStream_t stream);

} // namespace braid::cuda
