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

//! Rows [p0, p0 + kc) and columns [j0, j0 + cols) of op(B) copied to `dst`, kc rows of
//! `width` (zeros past `cols`), so that a tile streams them from one contiguous block in L1
//! whatever B's layout.
void pack_sliver(const Operands<float>& o, bool tb, size_t p0, size_t kc, size_t j0, size_t cols,
                 size_t width, float* dst) {
    if (tb) {
        for (size_t c = 0; c < cols; ++c) {
            const float* src = o.b + (j0 + c) * o.ldb + p0;
            for (size_t p = 0; p < kc; ++p) dst[p * width + c] = src[p];
        }
    } else {
        for (size_t p = 0; p < kc; ++p)
            std::copy_n(o.b + (p0 + p) * o.ldb + j0, cols, dst + p * width);
    }
    if (cols < width)
        for (size_t p = 0; p < kc; ++p)
            std::fill(dst + p * width + cols, dst + (p + 1) * width, 0.f);
}

//! Rows of op(B) per packed block: a block of 64 columns is then 32 KiB, in L1 while a tile
//! runs over it. The chains carry on across blocks through C (an exact store and reload).
constexpr size_t KC = 128;

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
    for (size_t j0 = 0; j0 < n; j0 += t.width) {
        size_t cols = std::min(t.width, n - j0);
        bool full = cols == t.width;
        for (size_t p0 = 0; p0 < o.k || p0 == 0; p0 += KC) {
            KRange kr{p0, std::min(KC, o.k - p0), p0 == 0, p0 + KC >= o.k};
            pack_sliver(o, tb, p0, kr.kc, j0, cols, t.width, sliver.data());
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

//! Few rows of C and B not transposed: each row's accumulators run over k four rows of B at a
//! time, each vector carried through the four in order, so B streams once, row by row. `Vec`
//! is the instruction set's vector (Avx512 or Avx2 below).
template <class Vec> void stream_rows(const Operands<float>& o, size_t m, size_t n) {
    constexpr size_t CHUNK = 1024, L = Vec::LANES;
    thread_local std::vector<float> acc_buf(CHUNK);
    float* acc = acc_buf.data();
    for (size_t i = 0; i < m; ++i) {
        const float* a = o.a + i * o.ars;
        for (size_t j0 = 0; j0 < n; j0 += CHUNK) {
            size_t w = std::min(CHUNK, n - j0), wv = w / L * L;
            std::fill(acc, acc + w, 0.f);
            size_t p = 0;
            for (; p + 4 <= o.k; p += 4) {
                const float* b0 = o.b + p * o.ldb + j0;
                const float *b1 = b0 + o.ldb, *b2 = b1 + o.ldb, *b3 = b2 + o.ldb;
                float a0 = a[p * o.aks], a1 = a[(p + 1) * o.aks], a2 = a[(p + 2) * o.aks],
                      a3 = a[(p + 3) * o.aks];
                auto v0 = Vec::set1(a0), v1 = Vec::set1(a1), v2 = Vec::set1(a2), v3 = Vec::set1(a3);
                for (size_t j = 0; j < wv; j += L) {
                    auto x = Vec::load(acc + j);
                    x = Vec::fma(v0, Vec::load(b0 + j), x);
                    x = Vec::fma(v1, Vec::load(b1 + j), x);
                    x = Vec::fma(v2, Vec::load(b2 + j), x);
                    x = Vec::fma(v3, Vec::load(b3 + j), x);
                    Vec::store(acc + j, x);
                }
                for (size_t j = wv; j < w; ++j)
                    acc[j] = std::fma(
                        a3, b3[j],
                        std::fma(a2, b2[j], std::fma(a1, b1[j], std::fma(a0, b0[j], acc[j]))));
            }
            for (; p < o.k; ++p) {
                const float* b0 = o.b + p * o.ldb + j0;
                float a0 = a[p * o.aks];
                auto v0 = Vec::set1(a0);
                for (size_t j = 0; j < wv; j += L)
                    Vec::store(acc + j, Vec::fma(v0, Vec::load(b0 + j), Vec::load(acc + j)));
                for (size_t j = wv; j < w; ++j) acc[j] = std::fma(a0, b0[j], acc[j]);
            }
            float* c = o.c + i * o.ldc + j0;
            for (size_t j = 0; j < w; ++j) c[j] = finish(o, acc[j], c[j]);
        }
    }
}

//! A tile of MR rows and NV vectors of columns: the accumulators start from zero (the first
//! block of k) or from C (later ones), run over the block's rows of the sliver, and go back to
//! C, with alpha and beta after the last block. Only the columns past `cols` are masked (`FULL`:
//! none are). `Vec` is the instruction set's vector.
template <class Vec, int MR, int NV, bool FULL>
void tile(const Operands<float>& o, const float* sliver, KRange kr, size_t i0, size_t j0,
          size_t cols) {
    constexpr size_t L = Vec::LANES, W = size_t(NV) * L;
    typename Vec::V acc[MR][NV];
    typename Vec::Mask mask[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
        mask[v] = Vec::mask(cols > size_t(v) * L ? std::min(cols - size_t(v) * L, L) : 0);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
            const float* c = o.c + (i0 + size_t(r)) * o.ldc + j0 + size_t(v) * L;
            acc[r][v] = kr.first ? Vec::zero() : FULL ? Vec::load(c) : Vec::load(c, mask[v]);
        }
    }
    const float* a = o.a + i0 * o.ars + kr.p0 * o.aks;
    const float* b = sliver;
    for (size_t p = 0; p < kr.kc; ++p, b += W) {
        typename Vec::V bv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) bv[v] = Vec::load(b + size_t(v) * L);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
            auto av = Vec::set1(a[size_t(r) * o.ars + p * o.aks]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) acc[r][v] = Vec::fma(av, bv[v], acc[r][v]);
        }
    }
    auto alpha = Vec::set1(o.alpha), beta = Vec::set1(o.beta);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
        float* c = o.c + (i0 + size_t(r)) * o.ldc + j0;
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
            auto x = acc[r][v];
            float* cv = c + size_t(v) * L;
            if (kr.last && o.alpha != 1.f) x = Vec::mul(alpha, x);
            if (kr.last && o.beta != 0.f)
                x = Vec::fma(beta, FULL ? Vec::load(cv) : Vec::load(cv, mask[v]), x);
            if (FULL)
                Vec::store(cv, x);
            else
                Vec::store(cv, mask[v], x);
        }
    }
}

// ---- AVX-512: NV vectors of 16 columns per row; C masked at the right edge.

struct Avx512 {
    using V = __m512;
    using Mask = __mmask16;
    static constexpr size_t LANES = 16;
    __attribute__((target("avx512f"))) static V zero() { return _mm512_setzero_ps(); }
    __attribute__((target("avx512f"))) static V set1(float x) { return _mm512_set1_ps(x); }
    __attribute__((target("avx512f"))) static Mask mask(size_t lanes) {
        return Mask(lanes >= 16 ? 0xFFFFu : (1u << lanes) - 1);
    }
    __attribute__((target("avx512f"))) static V load(const float* p) { return _mm512_loadu_ps(p); }
    __attribute__((target("avx512f"))) static V load(const float* p, Mask m) {
        return _mm512_maskz_loadu_ps(m, p);
    }
    __attribute__((target("avx512f"))) static void store(float* p, V x) { _mm512_storeu_ps(p, x); }
    __attribute__((target("avx512f"))) static void store(float* p, Mask m, V x) {
        _mm512_mask_storeu_ps(p, m, x);
    }
    __attribute__((target("avx512f"))) static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    __attribute__((target("avx512f"))) static V fma(V a, V b, V c) {
        return _mm512_fmadd_ps(a, b, c);
    }
};

template <int MR, int NV, bool FULL>
__attribute__((target("avx512f"), flatten)) void tile512(const Operands<float>& o,
                                                         const float* sliver, KRange kr, size_t i0,
                                                         size_t j0, size_t cols) {
    tile<Avx512, MR, NV, FULL>(o, sliver, kr, i0, j0, cols);
}

// 6 rows x 64 columns: 24 accumulators of the 32 registers.
const Tiles TILES_512 = {6,
                         64,
                         {{nullptr, nullptr},
                          {tile512<1, 4, false>, tile512<1, 4, true>},
                          {tile512<2, 4, false>, tile512<2, 4, true>},
                          {tile512<3, 4, false>, tile512<3, 4, true>},
                          {tile512<4, 4, false>, tile512<4, 4, true>},
                          {tile512<5, 4, false>, tile512<5, 4, true>},
                          {tile512<6, 4, false>, tile512<6, 4, true>}}};

// Narrow outputs (a classifier's 10 columns): 8 rows x 16 columns, so that no more than 16
// columns are computed for nothing.
const Tiles TILES_512_NARROW = {8,
                                16,
                                {{nullptr, nullptr},
                                 {tile512<1, 1, false>, tile512<1, 1, true>},
                                 {tile512<2, 1, false>, tile512<2, 1, true>},
                                 {tile512<3, 1, false>, tile512<3, 1, true>},
                                 {tile512<4, 1, false>, tile512<4, 1, true>},
                                 {tile512<5, 1, false>, tile512<5, 1, true>},
                                 {tile512<6, 1, false>, tile512<6, 1, true>},
                                 {tile512<7, 1, false>, tile512<7, 1, true>},
                                 {tile512<8, 1, false>, tile512<8, 1, true>}}};

//! The AVX-512 tiles for `n` columns.
const Tiles& tiles512(size_t n) {
    return n <= 16 ? TILES_512_NARROW : TILES_512;
}

__attribute__((target("avx512f"), flatten)) void stream512(const Operands<float>& o, size_t m,
                                                           size_t n) {
    stream_rows<Avx512>(o, m, n);
}

// ---- AVX2 + FMA: NV vectors of 8 columns per row; C masked at the right edge.

struct Avx2 {
    using V = __m256;
    using Mask = __m256i;
    static constexpr size_t LANES = 8;
    __attribute__((target("avx2,fma"))) static V zero() { return _mm256_setzero_ps(); }
    __attribute__((target("avx2,fma"))) static V set1(float x) { return _mm256_set1_ps(x); }
    __attribute__((target("avx2,fma"))) static Mask mask(size_t lanes) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(lanes)),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    __attribute__((target("avx2,fma"))) static V load(const float* p) { return _mm256_loadu_ps(p); }
    __attribute__((target("avx2,fma"))) static V load(const float* p, Mask m) {
        return _mm256_maskload_ps(p, m);
    }
    __attribute__((target("avx2,fma"))) static void store(float* p, V x) { _mm256_storeu_ps(p, x); }
    __attribute__((target("avx2,fma"))) static void store(float* p, Mask m, V x) {
        _mm256_maskstore_ps(p, m, x);
    }
    __attribute__((target("avx2,fma"))) static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    __attribute__((target("avx2,fma"))) static V fma(V a, V b, V c) {
        return _mm256_fmadd_ps(a, b, c);
    }
};

template <int MR, int NV, bool FULL>
__attribute__((target("avx2,fma"), flatten)) void tile256(const Operands<float>& o,
                                                          const float* sliver, KRange kr, size_t i0,
                                                          size_t j0, size_t cols) {
    tile<Avx2, MR, NV, FULL>(o, sliver, kr, i0, j0, cols);
}

// 6 x 16: 12 accumulators of the 16 registers.
const Tiles TILES_256 = {6,
                         16,
                         {{nullptr, nullptr},
                          {tile256<1, 2, false>, tile256<1, 2, true>},
                          {tile256<2, 2, false>, tile256<2, 2, true>},
                          {tile256<3, 2, false>, tile256<3, 2, true>},
                          {tile256<4, 2, false>, tile256<4, 2, true>},
                          {tile256<5, 2, false>, tile256<5, 2, true>},
                          {tile256<6, 2, false>, tile256<6, 2, true>}}};

__attribute__((target("avx2,fma"), flatten)) void stream256(const Operands<float>& o, size_t m,
                                                            size_t n) {
    stream_rows<Avx2>(o, m, n);
}

//! Rows of C below which op(B), when not transposed, is streamed row by row (stream_rows)
//! rather than packed in slivers: a sliver would serve too few rows to pay for its copy.
constexpr size_t STREAM_ROWS = 4;

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
        run_tiles(isa == CpuIsa::AVX512 ? tiles512(n) : TILES_256, p, tb, m, n);
        for (size_t i = 0; i < m; ++i)
            for (size_t j = 0; j < n; ++j)
                c[i * ldc + j] = finish(o, product[i * n + j], c[i * ldc + j]);
        return;
    }
    switch (isa) {
    case CpuIsa::AVX512:
        return stream ? stream512(o, m, n) : run_tiles(tiles512(n), o, tb, m, n);
    case CpuIsa::AVX2:
        return stream ? stream256(o, m, n) : run_tiles(TILES_256, o, tb, m, n);
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
