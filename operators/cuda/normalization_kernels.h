// Launch interface of the normalization CUDA kernels (operators/cuda/normalization.cu):
// Softmax / log-softmax along an axis, LayerNorm and RMSNorm over trailing dims.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

/*!
 * Enqueues softmax (log-softmax with `log`) along the middle axis of the (outer, n, inner)
 * view of contiguous `x` into contiguous `y` (same dtype code: float32, float16 or bfloat16,
 * computed in float32). `y` may be `x`. False for another dtype.
 */
bool launch_softmax(int dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                    bool log, cudaStream_t stream);

/*!
 * Enqueues layer norm (`layer`) or RMS norm of each of the `rows` contiguous rows of `n`
 * elements of `x` into `y`: y = (x - shift) * rstd * w + b, with shift the row mean (layer
 * norm) or 0 (RMS norm) and rstd = 1 / sqrt(mean((x - shift)^2) + eps). `w` and `b` (n
 * elements each) may be null. Same dtype rules as launch_softmax; `y` may be `x`.
 */
bool launch_norm(int dtype, bool layer, const void* x, const void* w, const void* b, void* y,
                 int64_t rows, int64_t n, float eps, cudaStream_t stream);

} // namespace braid::cuda
