// The GEMM of deterministic mode (base/determinism.h): every element of C is one chain of fused
// multiply-adds over k = 0, 1, ..., K-1 in order, starting from zero,
//
//     acc = 0;  for k: acc = fma(op(A)[i,k], op(B)[k,j], acc)
//     C[i,j] = (alpha == 1 ? acc : alpha * acc), then fma(beta, C[i,j], that) when beta != 0
//
// so an element depends only on its own row of op(A) and column of op(B): not on M (the batch),
// on how C is split into tiles or threads, or on the vector width. The AVX-512, AVX2 + FMA and
// portable paths give the same bits (fma rounds once on every one of them). Vectorised across
// the columns of C, it keeps op(B) in place when B is not transposed and packs it otherwise.
#pragma once

#include "base/cpu_isa.h"

#include <cstddef>

namespace braid::opr::kern {

//! Row-major C[m,n] = alpha * op(A) * op(B) + beta * C in the fixed order above, on the calling
//! thread; `lda`, `ldb`, `ldc` are row strides in elements.
void ordered_sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                   const float* a, size_t lda, const float* b, size_t ldb, float beta, float* c,
                   size_t ldc);

//! The same with the kernels of instruction set `isa` (at most cpu_isa_detected()), so that
//! tests can compare the paths.
void ordered_sgemm_isa(CpuIsa isa, bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                       float alpha, const float* a, size_t lda, const float* b, size_t ldb,
                       float beta, float* c, size_t ldc);

//! The float64 GEMM in the same order (portable loop; alpha 1, beta 0).
void ordered_dgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, const double* a,
                   size_t lda, const double* b, size_t ldb, double* c, size_t ldc);

} // namespace braid::opr::kern
