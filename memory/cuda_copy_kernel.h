// The strided copy kernel's plain interface (shared by memory/cuda_copy.cpp and the .cu file,
// which includes no braid headers so that nvcc stays fast). CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! Up to 7 dims; strides in elements; dims of size 1 may be dropped by the caller.
struct StridedCopyDesc {
    static constexpr int MAX_NDIM = 7;
    int ndim = 0;
    int elem_size = 4; //!< 1, 2, 4 or 8 bytes
    int64_t shape[MAX_NDIM] = {};
    int64_t dst_stride[MAX_NDIM] = {};
    int64_t src_stride[MAX_NDIM] = {};
};

//! Enqueues dst[i] = src[i] over every index of desc.shape on `stream` (one device).
void launch_strided_copy(const StridedCopyDesc& desc, void* dst, const void* src,
                         cudaStream_t stream);

} // namespace braid::cuda
