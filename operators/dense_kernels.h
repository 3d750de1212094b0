// CPU kernel helpers shared by the dense operators (matmul, convolution, attention): the
// OpenBLAS threading policy, sgemm wrappers that split work over braid's thread pool, a dgemm
// wrapper for float64 matmul, float32 staging for float16/bfloat16 tensors, and vectorised row
// loops for softmax.
//
// Threading policy (one owner of the cores). braid's pool (base/thread_pool.h) is the only
// source of parallelism: OpenBLAS is kept single-threaded (openblas_set_num_threads(1), checked
// before every call made through these wrappers), and a GEMM worth parallelising is split by
// braid into independent tiles or batch items, each one single-threaded sgemm run by a pool
// thread. oneDNN (when built in) runs GEMMs and convolutions it is faster at, on the same terms:
// its OpenMP thread count is set to 1 on every thread that calls it (dnnl_single_thread()), so
// no OpenMP team is ever created. Consequences:
//  - BLAS threads never run beside pool threads, so the cores are never oversubscribed, and a
//    kernel may call sgemm from inside a parallel_for (attention, grouped convolution);
//  - a GEMM issued while another comp node's kernel holds the pool runs on its own thread,
//    as every other braid kernel does;
//  - code in the same process that wants a multi-threaded OpenBLAS for its own calls must set
//    it again itself; braid's next dense kernel resets it to one thread.
// The helpers are stateless apart from that setting; they are thread-safe.
#pragma once

#include "memory/tensor.h"

#include <cstddef>
#include <functional>

namespace braid::opr::kern {

//! Keeps OpenBLAS single-threaded (see the policy above). Cheap after the first call.
void blas_single_thread();

//! Makes oneDNN calls from this thread run on this thread alone (OpenMP thread count 1, a
//! per-thread setting). Call before every oneDNN call; cheap after the first on a thread. No-op
//! without oneDNN.
void dnnl_single_thread();

//! Which library runs float32 GEMMs on this CPU, in words (braid-run reports it).
const char* sgemm_library_rule();

//! Row-major C[m,n] = alpha * op(A) * op(B) + beta * C on the calling thread only, where op
//! transposes when the flag is set (oneDNN's sgemm or OpenBLAS's, whichever is faster at the
//! shape); `lda`, `ldb`, `ldc` are row strides in elements. Handles
//! m, n or k equal to 0 (k == 0 gives C = beta * C).
void sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha, const float* a,
           size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc);

//! The same GEMM, split into up to kernel_threads() tiles of C run by braid's pool (a single
//! call when the GEMM is too small to be worth splitting).
void sgemm_parallel(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                    const float* a, size_t lda, const float* b, size_t ldb, float beta, float* c,
                    size_t ldc);

//! Called by sgemm_parallel_epilogue() for each finished tile of C: rows [r0, r0 + rows), columns
//! [c0, c0 + cols), on the thread that computed it, while the tile is still in its cache.
using TileEpilogue = std::function<void(size_t r0, size_t rows, size_t c0, size_t cols)>;

//! sgemm_parallel() followed by `epilogue` over every tile of C (fused bias and activation).
void sgemm_parallel_epilogue(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                             const float* a, size_t lda, const float* b, size_t ldb, float beta,
                             float* c, size_t ldc, const TileEpilogue& epilogue);

//! `batch` GEMMs of one shape, C[i] = alpha * op(A[i]) * op(B[i]) + beta * C[i], run by the
//! pool: batch items in parallel, and each GEMM split into tiles when there are fewer items
//! than threads. The C blocks must not overlap.
void sgemm_batched(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                   const float* const* a, size_t lda, const float* const* b, size_t ldb, float beta,
                   float* const* c, size_t ldc, size_t batch);

//! `batch` float64 GEMMs C[i] = op(A[i]) * op(B[i]) (cblas_dgemm, row-major), run by the pool:
//! batch items and blocks of rows of C in parallel, each a single-threaded dgemm. The C blocks
//! must not overlap; k == 0 gives zeros.
void dgemm_batched(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, const double* const* a,
                   size_t lda, const double* const* b, size_t ldb, double* const* c, size_t ldc,
                   size_t batch);

//! Whether dense kernels compute `dt` in float32 (float32 natively, float16 and bfloat16 via
//! float32). float64 is not one: MatMul computes it with dgemm_batched, the others reject it.
bool is_dense_float(DType dt);
//! `t` as a contiguous float32 tensor: `t` itself when it already is one, else a converted copy.
Tensor as_float32(const Tensor& t);
//! Where a kernel writes output `y` in float32: `y` itself when float32, else fresh scratch.
Tensor float32_target(const Tensor& y);
//! Stores the float32 result `yf` into `y` (a no-op when they are the same tensor).
void store_float32(const Tensor& yf, Tensor& y);

//! The largest of x[0..n); -infinity when n == 0. NaN inputs may be skipped.
float row_max(const float* x, size_t n);
//! Replaces x[i] by exp(x[i] - shift) for i < n and returns the sum of the new values.
//! Accurate to a few float32 ulp; arguments below about -87.3 give exactly 0.
float row_exp_sum(float* x, size_t n, float shift);
//! x[i] *= alpha for i < n.
void row_scale(float* x, size_t n, float alpha);

} // namespace braid::opr::kern
