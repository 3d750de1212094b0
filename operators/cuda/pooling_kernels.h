// Launch interface of the pooling CUDA kernels (operators/cuda/pooling.cu): Pooling and
// PoolingBackward over NCHW planes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! Geometry of a pooling: `planes` (N·C) input planes [h, w] pooled into [oh, ow] with a
//! kh x kw window, strides sh, sw and zero padding ph < kh, pw < kw.
struct PoolGeometry {
    int64_t planes;
    int64_t h, w, oh, ow;
    int kh, kw, sh, sw, ph, pw;
};

/*!
 * Enqueues Pooling of contiguous `x` [planes, h, w] into `y` [planes, oh, ow] (dtype code
 * float32, float16 or bfloat16, computed in float32) with the CPU kernel's rules: `is_max` takes
 * the largest element of each window's inside part and propagates NaN; averages divide the sum
 * (in row-major window order) by kh·kw with `count_include_pad`, else by the number of input
 * elements the window covers. False for another dtype.
 */
bool launch_pooling(int dtype, bool is_max, bool count_include_pad, const void* x, void* y,
                    const PoolGeometry& g, cudaStream_t stream);

/*!
 * Enqueues PoolingBackward: `dx` [planes, h, w] from the pooled input `x` and the output
 * gradient `dy` [planes, oh, ow] (same dtype rules). Max: each window's gradient goes to the
 * element the CPU kernel picks (the first largest in row-major window order, or the first NaN);
 * `picks` is scratch for planes·oh·ow indices. Average: each window's gradient is spread over its
 * inside elements divided as the forward divides; `picks` is unused (may be null). Each dx
 * element gathers the windows that cover it in row-major window order, the order in which the
 * CPU kernel adds them, without atomics. False for another dtype.
 */
bool launch_pooling_backward(int dtype, bool is_max, bool count_include_pad, const void* x,
                             const void* dy, void* dx, int64_t* picks, const PoolGeometry& g,
                             cudaStream_t stream);

} // namespace braid::cuda
