// Launch interface of the reduction CUDA kernels (operators/cuda/reduce.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! Reduction combine: SUM also serves MEAN (divided in the finalize step).
enum class ReduceCombine : int { SUM, MAX, MIN };

/*!
 * One pass over a (outer, n, inner) view of `in` (dtype code `in_dtype`): writes the
 * accumulator array (outer, splits, inner) where entry (o, s, i) combines
 * in[o, s*chunk .. (s+1)*chunk, i], chunk = ceil(n / splits). Accumulators are float32 for
 * float inputs and int64 for integer inputs (float32 and int64 inputs are their own
 * accumulator type, so later passes read the previous pass's output).
 */
struct ReducePass {
    int in_dtype = 0;
    ReduceCombine combine = ReduceCombine::SUM;
    const void* in = nullptr;
    void* out = nullptr;
    int64_t outer = 1, n = 1, inner = 1, splits = 1;
};

//! Enqueues one reduction pass; false for an unsupported dtype.
bool launch_reduce_pass(const ReducePass& pass, cudaStream_t stream);

//! Converts `n` accumulators (float32 when `float_acc`, else int64) to `out_dtype`; with
//! `mean`, divides by `count` first (integer division for integers; 0 when count is 0).
bool launch_reduce_finalize(bool float_acc, const void* acc, int out_dtype, void* out, int64_t n,
                            bool mean, int64_t count, cudaStream_t stream);

} // namespace braid::cuda
