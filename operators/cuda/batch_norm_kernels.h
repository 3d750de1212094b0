// Launch interface of the BatchNorm CUDA kernels (operators/cuda/batch_norm.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! The per-channel statistics of a batch norm: `c` contiguous elements each, of their own dtype
//! code (float32, or the input's float16 / bfloat16).
struct BatchNormStats {
    const void* scale;
    const void* bias;
    const void* mean;
    const void* var;
    int scale_dtype, bias_dtype, mean_dtype, var_dtype;
};

/*!
 * Enqueues inference batch norm of contiguous `x` viewed as [outer, c, inner] into `y` (same
 * dtype code: float32, float16 or bfloat16), with the CPU kernel's arithmetic: per channel
 * a = scale / sqrt(var + eps) and b = bias - mean·a in double, rounded to float32 into
 * `fold` (scratch of 2·c floats); then y = x·a + b in float32 (a product and a sum, not fused),
 * rounded once into y's dtype. `y` may be `x`. False for an unsupported dtype.
 */
bool launch_batch_norm(int dtype, const void* x, void* y, const BatchNormStats& stats, float* fold,
                       int64_t outer, int64_t c, int64_t inner, float eps, cudaStream_t stream);

} // namespace braid::cuda
