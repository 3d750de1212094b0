// Launch interface of the strided accumulation CUDA kernel (operators/cuda/subtensor.cu), used by
// IncrSubtensor.
#pragma once

#include "memory/cuda_copy_kernel.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! Enqueues dst[i] += src[i] over every index of desc.shape (dtype code float32, float16 or
//! bfloat16 added in float32 and rounded once, int32 or int64 wrapping). The destination
//! elements must be distinct. False for another dtype.
bool launch_strided_add(int dtype, const StridedCopyDesc& desc, void* dst, const void* src,
                        cudaStream_t stream);

} // namespace braid::cuda
