// Helpers shared by the CPU kernels in operators/: axis checks with one message format, the
// (outer, n, inner) view of a shape around an axis, float32 staging for float16/bfloat16,
// and the size below which a kernel stays single-threaded.
// Internal to operators/; the public API does not include it.
#pragma once

#include "base/thread_pool.h"
#include "memory/tensor.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

namespace braid::opr {

//! Marks a compute-bound kernel to be compiled twice, for x86-64-v3 (AVX2) and the baseline,
//! with the copy picked once at load time by the CPU (GCC function multi-versioning). Apply it
//! to functions that process a whole range, so the indirect call is paid per range, not per
//! element. Memory-bound kernels gain nothing from it and keep one copy. ThreadSanitizer builds
//! keep one copy too: the loader runs the copy-picking resolver before TSan's runtime exists,
//! and the instrumented resolver crashes.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define BRAID_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define BRAID_SIMD_CLONES
#endif

//! Turns off the contraction of a product and a sum into one FMA in a function, which rounds
//! once where the unfused operations round twice: for loops whose bits must equal those of
//! the operations one by one, in every multi-versioned copy.
#if defined(__GNUC__) && !defined(__clang__)
#define BRAID_NO_FP_CONTRACT __attribute__((optimize("-ffp-contract=off")))
#else
#define BRAID_NO_FP_CONTRACT
#endif

//! Forces inlining of a helper into its (possibly multi-versioned) caller, so the helper's
//! loops are compiled for the caller's target.
#if defined(__GNUC__)
#define BRAID_INLINE inline __attribute__((always_inline))
#else
#define BRAID_INLINE inline
#endif

//! Below this many elements of work a kernel runs single-threaded: waking the pool costs
//! more than it saves, and graphs of small tensors must dispatch in well under a microsecond.
constexpr size_t PARALLEL_MIN_ELEMS = 32768;
//! Multiply-adds a block of a convolution (or GEMM-like kernel) split off for another thread
//! must have: about 20 us of work, where a parallel region's hand-over costs a few. Smaller
//! work runs as one task (a voice-activity model ran 0.076 ms on one thread, 0.161 on two,
//! when its small convolutions were split).
constexpr double PARALLEL_MIN_MACS = 2e6;

//! Below this many elements of work a kernel also runs single-threaded when the pool's workers
//! sleep (pool_workers_awake()): waking one took 5-15 us in a virtual machine, longer than
//! such a pass. A classifier's 57,600-element broadcast multiply took 2.8 us on one thread and
//! 13.7 us split over two, where its workers had slept since the last parallel kernel.
constexpr size_t PARALLEL_WAKE_ELEMS = 262144;

//! Runs fn(begin, end) over [0, n), where each item costs about `work_per_item` elements:
//! serially when the whole is small (or mid-sized while the pool's workers sleep), else
//! through the shared kernel pool in chunks of at least PARALLEL_MIN_ELEMS / 2 elements of
//! work.
template <typename Fn> void parallel_range(size_t n, size_t work_per_item, Fn&& fn) {
    work_per_item = std::max<size_t>(work_per_item, 1);
    size_t work = n * work_per_item;
    if (n < 2 || work < PARALLEL_MIN_ELEMS ||
        (work < PARALLEL_WAKE_ELEMS && !pool_workers_awake())) {
        if (n) fn(size_t(0), n);
        return;
    }
    size_t grain = std::max<size_t>(1, PARALLEL_MIN_ELEMS / 2 / work_per_item);
    parallel_for(n, grain, [&fn](size_t b, size_t e) { fn(b, e); });
}

//! `axis` (negative counts from the end) as an index into a rank-`ndim` shape. Throws
//! ShapeError naming `who`, the axis and the rank when it is out of range.
size_t normalize_axis(long axis, size_t ndim, const std::string& who);

//! A shape seen as (outer, n, inner) around one axis: outer = product of the dims before it,
//! n = its size, inner = product of the dims after it.
struct AxisSplit {
    size_t outer = 1, n = 1, inner = 1;
};
//! Splits `shape` around dims [axis_begin, axis_end) (one axis: axis_end = axis_begin + 1).
AxisSplit split_shape(const TensorShape& shape, size_t axis_begin, size_t axis_end);

//! A float32 tensor with the values of the float tensor `t` (t itself when it is float32).
//! float64 must not come here (asserted): kernels compute it in double.
Tensor as_float32(const Tensor& t);
//! A float32 tensor to compute `out` in: `out` itself when it is float32, else a fresh one.
Tensor float32_like(const Tensor& out);
//! Stores the float32 results `f32` into `out` (same shape), rounding to out's dtype; a no-op
//! when they are the same tensor.
void store_float32(const Tensor& f32, Tensor& out);

//! dst.copy_from(src) (same shape and dtype, any strides), split across the kernel pool along
//! the first dim longer than 1 when the tensor is large.
void parallel_copy(Tensor& dst, const Tensor& src);

//! Walks two layouts of one shape row by row: calls fn(dst_off, dst_step, src_off, src_step,
//! len) with element offsets of each row's first element and the strides along the row.
//! Dims of size 1 are skipped and neighbours merged where both layouts allow.
template <typename Fn>
void for_each_row_pair(const TensorLayout& dst, const TensorLayout& src, Fn&& fn) {
    size_t shape[TensorShape::MAX_NDIM];
    ptrdiff_t ds[TensorShape::MAX_NDIM], ss[TensorShape::MAX_NDIM];
    for (size_t i = 0; i < dst.ndim(); ++i)
        if (dst[i] == 0) return;
    size_t nd = collapse_copy_dims(dst, src, shape, ds, ss);
    if (nd == 0) {
        fn(ptrdiff_t(0), ptrdiff_t(1), ptrdiff_t(0), ptrdiff_t(1), size_t(1));
        return;
    }
    size_t rows = 1;
    for (size_t i = 0; i + 1 < nd; ++i) rows *= shape[i];
    size_t idx[TensorShape::MAX_NDIM] = {};
    ptrdiff_t doff = 0, soff = 0;
    for (size_t r = 0; r < rows; ++r) {
        fn(doff, ds[nd - 1], soff, ss[nd - 1], shape[nd - 1]);
        for (size_t d = nd - 1; d-- > 0;) {
            if (++idx[d] < shape[d]) {
                doff += ds[d];
                soff += ss[d];
                break;
            }
            doff -= ptrdiff_t(idx[d] - 1) * ds[d];
            soff -= ptrdiff_t(idx[d] - 1) * ss[d];
            idx[d] = 0;
        }
    }
}

//! "float32, float16 or bfloat16": dtype names for messages.
std::string dtype_list(std::initializer_list<DType> dtypes);

//! "{2,3,4}" for a list of dims.
std::string dims_to_string(const std::vector<long>& dims);

} // namespace braid::opr
