#include "operators/ordered_gemm.h"

#include "base/error.h"
#include "operators/simd_vec.h"

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

//! Rows [p0, p0 + kc) and columns [j0, j0 + cols) of op(B) copied to `dst`, kc rows of
//! `width` (zeros past `cols`), so that a tile streams them from one contiguous block in L1
//! whatever B's layout; with `prefetch_next`, the next block's rows are fetched into L2.
void pack_sliver(const Operands<float>& o, bool tb, size_t p0, size_t kc, size_t j0, size_t cols,
                 size_t width, float* dst, bool prefetch_next = false) {
    if (tb) {
        for (size_t c = 0; c < cols; ++c) {
            const float* src = o.b + (j0 + c) * o.ldb + p0;
            for (size_t p = 0; p < kc; ++p) dst[p * width + c] = src[p];
            if (prefetch_next)
                for (size_t p = kc; p < std::min(2 * kc, o.k - p0); p += 16)
                    __builtin_prefetch(src + p, 0, 2);
        }
    } else {
        for (size_t p = 0; p < kc; ++p) {
            const float* src = o.b + (p0 + p) * o.ldb + j0;
            std::copy_n(src, cols, dst + p * width);
            // The same row of the next block, into L2 while the tiles run: a block's rows lie
            // a whole row of B apart, too far apart for the hardware prefetcher.
            if (prefetch_next && p0 + p + kc < o.k)
                for (size_t c = 0; c < cols; c += 16)
                    __builtin_prefetch(src + kc * o.ldb + c, 0, 2);
        }
    }
    if (cols < width)
        for (size_t p = 0; p < kc; ++p)
            std::fill(dst + p * width + cols, dst + (p + 1) * width, 0.f);
}

//! Rows of op(B) per packed block: a block of 64 columns is then 32 KiB, in L1 while a tile
//! runs over it. The chains carry on across blocks through C (an exact store and reload).
constexpr size_t KC = 128;
//! Size of B above which its next block is prefetched while a block is packed: B no longer
//! stays in L2 between uses.
constexpr size_t PREFETCH_B_BYTES = size_t(1) << 20;

//! Where a tile's k range sits in the whole sum.
struct KRange {
    size_t p0, kc;
    bool first, last;
};

//! A tile of r rows and `cols` (at most the sliver's width) columns of C at (i0, j0), reading
//! op(B) from its packed sliver.
using TileFn = void (*)(const Operands<float>&, const float* sliver, KRange kr, size_t i0,
                        size_t j0, size_t cols);

//! One instruction set's tiles: rows[r][full] computes r rows (1 <= r <= mr), `width` columns
//! when `full`, fewer otherwise.
struct Tiles {
    size_t mr, width;
    TileFn rows[9][2];
};

void run_tiles(const Tiles& t, const Operands<float>& o, bool tb, size_t m, size_t n) {
    thread_local std::vector<float> sliver;
    if (sliver.size() < KC * t.width) sliver.resize(KC * t.width);
    bool prefetch = o.k * n * sizeof(float) > PREFETCH_B_BYTES;
    for (size_t j0 = 0; j0 < n; j0 += t.width) {
        size_t cols = std::min(t.width, n - j0);
        bool full = cols == t.width;
        for (size_t p0 = 0; p0 < o.k || p0 == 0; p0 += KC) {
            KRange kr{p0, std::min(KC, o.k - p0), p0 == 0, p0 + KC >= o.k};
            pack_sliver(o, tb, p0, kr.kc, j0, cols, t.width, sliver.data(), prefetch);
            size_t i0 = 0;
            for (; i0 + t.mr <= m; i0 += t.mr)
                t.rows[t.mr][full](o, sliver.data(), kr, i0, j0, cols);
            if (i0 < m) t.rows[m - i0][full](o, sliver.data(), kr, i0, j0, cols);
        }
    }
}

//! The epilogue of one element: alpha, then beta * C.
inline float finish(const Operands<float>& o, float acc, float c) {
    float x = o.alpha == 1.f ? acc : o.alpha * acc;
    return o.beta == 0.f ? x : std::fma(o.beta, c, x);
}

// Each instruction set's code: the tiles of ordered_gemm_tiles.inc over that set's Vec, compiled
// for that set (operators/simd_vec.h).

// ---- AVX-512: 16 columns per vector; C masked at the right edge.
BRAID_TARGET_REGION("avx512f")
namespace avx512 {

using Vec = simd::Avx512;

#include "operators/ordered_gemm_tiles.inc"

// 6 rows x 64 columns: 24 accumulators of the 32 registers.
const Tiles TILES = {6,
                     64,
                     {{nullptr, nullptr},
                      {tile<1, 4, false>, tile<1, 4, true>},
                      {tile<2, 4, false>, tile<2, 4, true>},
                      {tile<3, 4, false>, tile<3, 4, true>},
                      {tile<4, 4, false>, tile<4, 4, true>},
                      {tile<5, 4, false>, tile<5, 4, true>},
                      {tile<6, 4, false>, tile<6, 4, true>}}};

// Narrow outputs (a classifier's 10 columns): 8 rows x 16 columns, so that no more than 16
// columns are computed for nothing.
const Tiles NARROW = {8,
                      16,
                      {{nullptr, nullptr},
                       {tile<1, 1, false>, tile<1, 1, true>},
                       {tile<2, 1, false>, tile<2, 1, true>},
                       {tile<3, 1, false>, tile<3, 1, true>},
                       {tile<4, 1, false>, tile<4, 1, true>},
                       {tile<5, 1, false>, tile<5, 1, true>},
                       {tile<6, 1, false>, tile<6, 1, true>},
                       {tile<7, 1, false>, tile<7, 1, true>},
                       {tile<8, 1, false>, tile<8, 1, true>}}};

} // namespace avx512
BRAID_TARGET_REGION_END

// ---- AVX2 + FMA: 8 columns per vector; C masked at the right edge.
BRAID_TARGET_REGION("avx2,fma")
namespace avx2 {

using Vec = simd::Avx2;

#include "operators/ordered_gemm_tiles.inc"

// 6 x 16: 12 accumulators of the 16 registers.
const Tiles TILES = {6,
                     16,
                     {{nullptr, nullptr},
                      {tile<1, 2, false>, tile<1, 2, true>},
                      {tile<2, 2, false>, tile<2, 2, true>},
                      {tile<3, 2, false>, tile<3, 2, true>},
                      {tile<4, 2, false>, tile<4, 2, true>},
                      {tile<5, 2, false>, tile<5, 2, true>},
                      {tile<6, 2, false>, tile<6, 2, true>}}};

} // namespace avx2
BRAID_TARGET_REGION_END

//! Rows of C below which op(B), when not transposed, is streamed row by row (stream_rows)
//! rather than packed in slivers: a sliver would serve too few rows to pay for its copy.
constexpr size_t STREAM_ROWS = 4;

//! The tiles of `isa` (AVX-512 or AVX2) for `n` columns.
const Tiles& tiles_for(CpuIsa isa, size_t n) {
    if (isa == CpuIsa::AVX512) return n <= 16 ? avx512::NARROW : avx512::TILES;
    return avx2::TILES;
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
    bool stream = !tb && m < STREAM_ROWS;
    if (!stream && isa != CpuIsa::SCALAR && k > KC && (alpha != 1.f || beta != 0.f)) {
        // Partial sums pass through C between blocks of k: the old C and the scaling wait in
        // a scratch product, applied after the whole sum (the same epilogue).
        thread_local std::vector<float> product;
        product.resize(m * n);
        Operands<float> p = o;
        p.c = product.data();
        p.ldc = n;
        p.alpha = 1.f;
        p.beta = 0.f;
        run_tiles(tiles_for(isa, n), p, tb, m, n);
        for (size_t i = 0; i < m; ++i)
            for (size_t j = 0; j < n; ++j)
                c[i * ldc + j] = finish(o, product[i * n + j], c[i * ldc + j]);
        return;
    }
    switch (isa) {
    case CpuIsa::AVX512:
        return stream ? avx512::stream_rows(o, m, n) : run_tiles(tiles_for(isa, n), o, tb, m, n);
    case CpuIsa::AVX2:
        return stream ? avx2::stream_rows(o, m, n) : run_tiles(tiles_for(isa, n), o, tb, m, n);
    case CpuIsa::SCALAR:
        if (tb) {
            thread_local std::vector<float> packed;
            packed.resize(k * n);
            pack_sliver(o, true, 0, k, 0, n, n, packed.data());
            o.b = packed.data();
            o.ldb = n;
        }
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
