// Launch interface of the dtype conversion CUDA kernel (operators/cuda/convert.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! Enqueues dst[i] = convert(src[i]) for n contiguous elements, with the CPU rules of
//! memory/dtype.h: through double, float16/bfloat16 rounding to nearest even, integer
//! truncation toward zero with saturation (NaN becomes 0), bool as value != 0.
void launch_convert(int src_dtype, const void* src, int dst_dtype, void* dst, int64_t n,
                    cudaStream_t stream);

} // namespace braid::cuda
