// Launch interface of the strided accumulation CUDA kernel (operators/cuda/subtensor.cu), used by
// IncrSubtensor.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! A strided walk over up to 7 dims; strides in elements (any sign, 0 for broadcast sources).
struct StridedAddDesc {
    static constexpr int MAX_NDIM = 7;
    int ndim = 0;
    int64_t shape[MAX_NDIM] = {};
    int64_t dst_stride[MAX_NDIM] = {};
    int64_t src_stride[MAX_NDIM] = {};
};

//! Enqueues dst[i] += src[i] over every index of desc.shape (dtype code float32, float16 or
//! bfloat16 added in float32 and rounded once, int32 or int64 wrapping). The destination
//! elements must be distinct. False for another dtype.
bool launch_strided_add(int dtype, const StridedAddDesc& desc, void* dst, const void* src,
                        cudaStream_t stream);

} // namespace braid::cuda
