// Launch interface of the reduction CUDA kernels (operators/cuda/reduce.cu): Reduce's passes and
// ArgReduce.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! Reduction combine: SUM also serves MEAN (divided in the finalize step). SUM_SQR squares the
//! elements it loads and sums them: only a pass over the input uses it, passes over its
//! accumulators (already squared) use SUM.
enum class ReduceCombine : int { SUM, MAX, MIN, PROD, SUM_SQR };

//! The `in_dtype` of a pass over double accumulators (PROD of float inputs).
constexpr int REDUCE_ACC_F64 = 64;

/*!
 * One pass over a (outer, n, inner) view of `in` (dtype code `in_dtype`, or REDUCE_ACC_F64):
 * writes the accumulator array (outer, splits, inner) where entry (o, s, i) combines
 * in[o, s*chunk .. (s+1)*chunk, i], chunk = ceil(n / splits). Accumulators are float32 for
 * float inputs (double for PROD, like the CPU kernel's lanes) and int64 for integer inputs
 * (integer sums and products wrap); float32, int64 and double accumulators are their own
 * accumulator type, so later passes read the previous pass's output.
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

//! Converts `n` accumulators (`acc_dtype`: the float32 or int64 dtype code, or
//! REDUCE_ACC_F64) to `out_dtype`; with `mean`, divides by `count` first (integer division for
//! integers; 0 when count is 0). Integers convert to int32 modulo 2^32, like the CPU kernel.
bool launch_reduce_finalize(int acc_dtype, const void* acc, int out_dtype, void* out, int64_t n,
                            bool mean, int64_t count, cudaStream_t stream);

/*!
 * Enqueues ArgReduce along the middle axis of the (outer, n, inner) view of contiguous `x`
 * (dtype code float32, float16 or bfloat16, compared in float32, int32 or int64) into the int32
 * array `y` (outer, inner): the index of the first NaN along the axis when there is one, else of
 * the first largest (`is_max`) or smallest element, as the CPU kernel. n >= 1. False for another
 * dtype.
 */
bool launch_arg_reduce(int dtype, bool is_max, const void* x, int32_t* y, int64_t outer, int64_t n,
                       int64_t inner, cudaStream_t stream);

} // namespace braid::cuda
