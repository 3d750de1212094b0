#include "operators/ordered_gemm.h"

#include "base/error.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace braid::opr::kern {
namespace {

//! One GEMM as the tiles read it: op(A)[i,p] = a[i * ars + p * aks], op(B)[p,j] = b[p * ldb + j]
//! (B packed first when transposed).
template <typename T> struct Operands {
    const T* a;
    size_t ars, aks;
    const T* b;
    size_t ldb;
    T* c;
    size_t ldc;
    size_t k;
    T alpha, beta;
};

//! The portable path (and float64's): the same chains, one row of C at a time.
template <typename T> void rows_portable(const Operands<T>& o, size_t m, size_t n) {
    std::vector<T> acc(n);
    for (size_t i = 0; i < m; ++i) {
        std::fill(acc.begin(), acc.end(), T(0));
        for (size_t p = 0; p < o.k; ++p) {
            T a = o.a[i * o.ars + p * o.aks];
            const T* b = o.b + p * o.ldb;
            for (size_t j = 0; j < n; ++j) acc[j] = std::fma(a, b[j], acc[j]);
        }
        T* c = o.c + i * o.ldc;
        for (size_t j = 0; j < n; ++j) {
            T x = o.alpha == T(1) ? acc[j] : o.alpha * acc[j];
            c[j] = o.beta == T(0) ? x : std::fma(o.beta, c[j], x);
        }
    }
}

//! A tile of MR rows and up to `cols` columns of C at (i0, j0).
using TileFn = void (*)(const Operands<float>&, size_t i0, size_t j0, size_t cols);

//! One instruction set's tiles: rows[r][full] computes r rows (1 <= r <= mr), `width` columns
//! when `full`, fewer otherwise.
struct Tiles {
    size_t mr, width;
    TileFn rows[7][2];
};

void run_tiles(const Tiles& t, const Operands<float>& o, size_t m, size_t n) {
    for (size_t j0 = 0; j0 < n; j0 += t.width) {
        size_t cols = std::min(t.width, n - j0);
        bool full = cols == t.width;
        size_t i0 = 0;
        for (; i0 + t.mr <= m; i0 += t.mr) t.rows[t.mr][full](o, i0, j0, cols);
        if (i0 < m) t.rows[m - i0][full](o, i0, j0, cols);
    }
}

// ---- AVX-512: NV vectors of 16 columns per row, masked at the right edge.

template <int MR, int NV>
__attribute__((target("avx512f"))) void tile512(const Operands<float>& o, size_t i0, size_t j0,
                                                size_t cols) {
    __m512 acc[MR][NV];
    __mmask16 mask[NV];
    for (int v = 0; v < NV; ++v) {
        size_t left = cols > size_t(v) * 16 ? cols - size_t(v) * 16 : 0;
        mask[v] = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        for (int r = 0; r < MR; ++r) acc[r][v] = _mm512_setzero_ps();
    }
    const float* a = o.a + i0 * o.ars;
    const float* b = o.b + j0;
    for (size_t p = 0; p < o.k; ++p, b += o.ldb) {
        __m512 bv[NV];
        for (int v = 0; v < NV; ++v) bv[v] = _mm512_maskz_loadu_ps(mask[v], b + v * 16);
        for (int r = 0; r < MR; ++r) {
            __m512 av = _mm512_set1_ps(a[size_t(r) * o.ars + p * o.aks]);
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
        }
    }
    __m512 alpha = _mm512_set1_ps(o.alpha), beta = _mm512_set1_ps(o.beta);
    for (int r = 0; r < MR; ++r) {
        float* c = o.c + (i0 + size_t(r)) * o.ldc + j0;
        for (int v = 0; v < NV; ++v) {
            __m512 x = acc[r][v];
            if (o.alpha != 1.f) x = _mm512_mul_ps(alpha, x);
            if (o.beta != 0.f)
                x = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(mask[v], c + v * 16), x);
            _mm512_mask_storeu_ps(c + v * 16, mask[v], x);
        }
    }
}

// 6 rows x 64 columns: 24 accumulators of the 32 registers.
const Tiles TILES_512 = {6,
                         64,
                         {{nullptr, nullptr},
                          {tile512<1, 4>, tile512<1, 4>},
                          {tile512<2, 4>, tile512<2, 4>},
                          {tile512<3, 4>, tile512<3, 4>},
                          {tile512<4, 4>, tile512<4, 4>},
                          {tile512<5, 4>, tile512<5, 4>},
                          {tile512<6, 4>, tile512<6, 4>}}};

// ---- AVX2 + FMA: NV vectors of 8 columns per row; masked loads only at the right edge.

template <int MR, int NV, bool FULL>
__attribute__((target("avx2,fma"))) void tile256(const Operands<float>& o, size_t i0, size_t j0,
                                                 size_t cols) {
    __m256 acc[MR][NV];
    __m256i mask[NV];
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int v = 0; v < NV; ++v) {
        int left = int(std::min<size_t>(cols > size_t(v) * 8 ? cols - size_t(v) * 8 : 0, 8));
        mask[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane);
        for (int r = 0; r < MR; ++r) acc[r][v] = _mm256_setzero_ps();
    }
    const float* a = o.a + i0 * o.ars;
    const float* b = o.b + j0;
    for (size_t p = 0; p < o.k; ++p, b += o.ldb) {
        __m256 bv[NV];
        for (int v = 0; v < NV; ++v)
            bv[v] = FULL ? _mm256_loadu_ps(b + v * 8) : _mm256_maskload_ps(b + v * 8, mask[v]);
        for (int r = 0; r < MR; ++r) {
            __m256 av = _mm256_set1_ps(a[size_t(r) * o.ars + p * o.aks]);
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
        }
    }
    __m256 alpha = _mm256_set1_ps(o.alpha), beta = _mm256_set1_ps(o.beta);
    for (int r = 0; r < MR; ++r) {
        float* c = o.c + (i0 + size_t(r)) * o.ldc + j0;
        for (int v = 0; v < NV; ++v) {
            __m256 x = acc[r][v];
            if (o.alpha != 1.f) x = _mm256_mul_ps(alpha, x);
            if (o.beta != 0.f)
                x = _mm256_fmadd_ps(
                    beta,
                    FULL ? _mm256_loadu_ps(c + v * 8) : _mm256_maskload_ps(c + v * 8, mask[v]), x);
            if (FULL)
                _mm256_storeu_ps(c + v * 8, x);
            else
                _mm256_maskstore_ps(c + v * 8, mask[v], x);
        }
    }
}

// Three or more rows: 6 x 16 (12 accumulators of 16 registers); one or two rows: 32 columns,
// so that a single row still has four independent chains.
const Tiles TILES_256 = {6,
                         16,
                         {{nullptr, nullptr},
                          {tile256<1, 2, false>, tile256<1, 2, true>},
                          {tile256<2, 2, false>, tile256<2, 2, true>},
                          {tile256<3, 2, false>, tile256<3, 2, true>},
                          {tile256<4, 2, false>, tile256<4, 2, true>},
                          {tile256<5, 2, false>, tile256<5, 2, true>},
                          {tile256<6, 2, false>, tile256<6, 2, true>}}};
const Tiles TILES_256_FEW_ROWS = {2,
                                  32,
                                  {{nullptr, nullptr},
                                   {tile256<1, 4, false>, tile256<1, 4, true>},
                                   {tile256<2, 4, false>, tile256<2, 4, true>}}};

//! op(B) for a transposed B (n rows of k): packed k x n, in 32 x 32 blocks.
const float* packed_b(const float* b, size_t ldb, size_t k, size_t n) {
    thread_local std::vector<float> buf;
    if (buf.size() < k * n) buf.resize(k * n);
    constexpr size_t BLOCK = 32;
    for (size_t j0 = 0; j0 < n; j0 += BLOCK)
        for (size_t p0 = 0; p0 < k; p0 += BLOCK)
            for (size_t j = j0; j < std::min(n, j0 + BLOCK); ++j)
                for (size_t p = p0; p < std::min(k, p0 + BLOCK); ++p)
                    buf[p * n + j] = b[j * ldb + p];
    return buf.data();
}

} // namespace

void ordered_sgemm_isa(CpuIsa isa, bool ta, bool tb, size_t m, size_t n, size_t k, float alpha,
                       const float* a, size_t lda, const float* b, size_t ldb, float beta, float* c,
                       size_t ldc) {
    if (m == 0 || n == 0) return;
    if (int(isa) > int(cpu_isa_detected()))
        BRAID_THROW(ValueError, "ordered_sgemm: the CPU lacks instruction set {}",
                    cpu_isa_name(isa));
    Operands<float> o{a, ta ? 1 : lda, ta ? lda : 1, b, ldb, c, ldc, k, alpha, beta};
    if (tb) {
        o.b = packed_b(b, ldb, k, n);
        o.ldb = n;
    }
    switch (isa) {
    case CpuIsa::AVX512:
        return run_tiles(TILES_512, o, m, n);
    case CpuIsa::AVX2:
        return run_tiles(m < 3 ? TILES_256_FEW_ROWS : TILES_256, o, m, n);
    case CpuIsa::SCALAR:
        return rows_portable(o, m, n);
    }
}

void ordered_sgemm(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float* a,
                   size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc) {
    ordered_sgemm_isa(cpu_isa(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void ordered_dgemm(bool ta, bool tb, size_t m, size_t n, size_t k, const double* a, size_t lda,
                   const double* b, size_t ldb, double* c, size_t ldc) {
    if (m == 0 || n == 0) return;
    std::vector<double> packed;
    if (tb) {
        packed.resize(k * n);
        for (size_t j = 0; j < n; ++j)
            for (size_t p = 0; p < k; ++p) packed[p * n + j] = b[j * ldb + p];
        b = packed.data();
        ldb = n;
    }
    rows_portable(Operands<double>{a, ta ? 1 : lda, ta ? lda : 1, b, ldb, c, ldc, k, 1.0, 0.0}, m,
                  n);
}

} // namespace braid::opr::kern
