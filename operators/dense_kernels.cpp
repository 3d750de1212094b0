#include "operators/dense_kernels.h"
#include "operators/ordered_gemm.h"

#include "base/cpu_isa.h"
#include "base/determinism.h"
#include "base/error.h"
#include "base/thread_pool.h"

#include <cblas.h>
#include <fmt/format.h>
#if BRAID_WITH_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BRAID_DENSE_X86 1
#endif

// OpenBLAS's pthreads build exports this (its fork handler uses it); other builds lack it.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));

namespace braid::opr::kern {

namespace {

//! Below this many multiply-adds a GEMM runs as one call: splitting costs more than it saves
//! (the same cut-off OpenBLAS uses before it threads a GEMM itself).
constexpr double MIN_PARALLEL_MACS = 64.0 * 64.0 * 64.0;
//! Smallest tile side (rows or columns of C) a split GEMM is cut into.
constexpr size_t MIN_TILE = 32;

std::mutex g_blas_threads_mutex;

//! How a GEMM's C is cut into tile_rows x tile_cols tiles.
struct TileGrid {
    size_t rows = 1, cols = 1; //!< number of tiles along m and n
    size_t tile_m = 0, tile_n = 0;
    size_t count() const { return rows * cols; }
};

//! The grid of at most `parts` tiles that keeps every tile at least MIN_TILE wide, uses as many
//! tiles as possible and, among those, keeps tiles closest to square (each tile packs its own
//! panels of A and B, so square tiles pack the least).
TileGrid choose_grid(size_t m, size_t n, size_t parts) {
    TileGrid best;
    size_t best_tasks = 1, best_perimeter = m + n;
    for (size_t tm = 1; tm <= parts; ++tm) {
        size_t tn = parts / tm;
        if (tm > 1 && m / tm < MIN_TILE) break;
        while (tn > 1 && n / tn < MIN_TILE) --tn;
        size_t tasks = tm * tn;
        size_t perimeter = (m + tm - 1) / tm + (n + tn - 1) / tn;
        if (tasks > best_tasks || (tasks == best_tasks && perimeter < best_perimeter)) {
            best_tasks = tasks;
            best_perimeter = perimeter;
            best.rows = tm;
            best.cols = tn;
        }
    }
    best.tile_m = (m + best.rows - 1) / best.rows;
    best.tile_n = (n + best.cols - 1) / best.cols;
    // Rounding the tile sizes up may leave trailing tiles empty; drop them.
    best.rows = best.tile_m ? (m + best.tile_m - 1) / best.tile_m : 1;
    best.cols = best.tile_n ? (n + best.tile_n - 1) / best.tile_n : 1;
    return best;
}

//! Runs tile `t` of `grid` of one GEMM.
void run_tile(const TileGrid& grid, size_t t, bool ta, bool tb, size_t m, size_t n, size_t k,
              float alpha, const float* a, size_t lda, const float* b, size_t ldb, float beta,
              float* c, size_t ldc) {
    size_t r0 = (t / grid.cols) * grid.tile_m, c0 = (t % grid.cols) * grid.tile_n;
    size_t rm = std::min(m, r0 + grid.tile_m) - r0, cn = std::min(n, c0 + grid.tile_n) - c0;
    // Row block r0 of op(A): rows of A, or columns of A when A is stored transposed.
    const float* a_blk = ta ? a + r0 : a + r0 * lda;
    // Column block c0 of op(B): columns of B, or rows of B when B is stored transposed.
    const float* b_blk = tb ? b + c0 * ldb : b + c0;
    sgemm(ta, tb, rm, cn, k, alpha, a_blk, lda, b_blk, ldb, beta, c + r0 * ldc + c0, ldc);
}

} // namespace

namespace {

//! Whether OpenBLAS runs kernels written for the instruction set braid's kernels use here. A
//! Debian OpenBLAS that does not know the CPU picks an old generic core ("Prescott": no AVX at
//! all), and one without AVX-512 kernels for it runs its AVX2 ones ("Haswell", "Zen") on an
//! AVX-512 CPU; oneDNN generates its kernels for the CPU at hand in both cases. Decided once.
bool blas_matches_cpu_isa() {
    static const bool matches = [] {
        std::string core = openblas_get_corename() ? openblas_get_corename() : "";
        std::transform(core.begin(), core.end(), core.begin(),
                       [](unsigned char c) { return char(std::tolower(c)); });
        auto any_of = [&](std::initializer_list<const char*> names) {
            return std::any_of(names.begin(), names.end(),
                               [&](const char* n) { return core == n; });
        };
        bool avx512 = any_of({"skylakex", "cooperlake", "sapphirerapids"});
        bool avx2 = avx512 || any_of({"haswell", "zen"});
        switch (cpu_isa()) {
        case CpuIsa::AVX512:
            return avx512;
        case CpuIsa::AVX2:
            return avx2;
        case CpuIsa::SCALAR:
            return true;
        }
        return true;
    }();
    return matches;
}

} // namespace

#if BRAID_WITH_DNNL
//! Which library runs a single-threaded float32 GEMM of this shape. When OpenBLAS's kernels
//! match the instruction set (an AVX2 CPU it knows), from timing both on one core
//! (docs/performance.md, "GEMM"): oneDNN's sgemm is 5-15% faster from 64x256x784 to 1024^3,
//! OpenBLAS about as fast or faster on narrow outputs (n < 128) and tiny products, where
//! oneDNN's per-call cost shows. Otherwise oneDNN runs them all: on an AVX-512 CPU where
//! OpenBLAS runs its AVX2 kernels, oneDNN is 1.4-7x faster on every shape measured, narrow,
//! tiny and single-row ones included.
static bool use_dnnl_sgemm(size_t m, size_t n, size_t k) {
    return !blas_matches_cpu_isa() || (n >= 128 && double(m) * double(n) * double(k) >= 65536.0);
}
#endif

const char* sgemm_library_rule() {
    static const std::string rule = [] {
        std::string core = openblas_get_corename() ? openblas_get_corename() : "?";
#if BRAID_WITH_DNNL
        if (blas_matches_cpu_isa())
            return fmt::format("oneDNN for n >= 128 and 64K multiply-adds, OpenBLAS ({} "
                               "kernels) below",
                               core);
        return fmt::format("oneDNN (OpenBLAS runs its {} kernels, braid's kernels use {})", core,
                           cpu_isa_name(cpu_isa()));
#else
        return fmt::format("OpenBLAS ({} kernels)", core);
#endif
    }();
    return rule.c_str();
}

#if BRAID_WITH_DNNL
namespace {
//! Passes braid's instruction-set cap (BRAID_MAX_CPU_ISA) to oneDNN before its first kernel is
//! generated, so one switch caps both; an explicit ONEDNN_MAX_CPU_ISA is left to oneDNN.
bool cap_dnnl_isa() {
    const char* own = std::getenv("ONEDNN_MAX_CPU_ISA");
    if ((own && *own) || cpu_isa() == cpu_isa_detected()) return true;
    dnnl_cpu_isa_t isa = cpu_isa() == CpuIsa::AVX2 ? dnnl_cpu_isa_avx2 : dnnl_cpu_isa_sse41;
    return dnnl_set_max_cpu_isa(isa) == dnnl_success;
}
} // namespace
#endif

void dnnl_single_thread() {
#if BRAID_WITH_DNNL
    [[maybe_unused]] static const bool isa_capped = cap_dnnl_isa();
    thread_local bool done = false;
    if (done) return;
    omp_set_num_threads(1);
    done = true;
#endif
}

void blas_single_thread() {
    if (openblas_get_num_threads() == 1) return;
    std::lock_guard lk(g_blas_threads_mutex);
    if (openblas_get_num_threads() == 1) return;
    openblas_set_num_threads(1);
    // A pthreads OpenBLAS started its server threads when it loaded; they poll the CPU for
    // about 0.1 s after start and after every wake. braid never gives them work, so stop them
    // (OpenBLAS starts them again if its thread count is raised later).
    if (blas_thread_shutdown_) blas_thread_shutdown_();
}

namespace {
//! Single-threaded from the start: the server threads are stopped before main() runs instead
//! of competing with braid's first kernels for the cores.
[[maybe_unused]] const bool g_blas_single_at_load = (blas_single_thread(), true);
} // namespace

void sgemm(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float* a, size_t lda,
           const float* b, size_t ldb, float beta, float* c, size_t ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        // BLAS rejects a leading dimension of 0; the product is empty, C = beta * C.
        for (size_t i = 0; i < m; ++i) {
            float* row = c + i * ldc;
            if (beta == 0.f)
                std::fill(row, row + n, 0.f);
            else
                row_scale(row, n, beta);
        }
        return;
    }
    // cblas takes int sizes; the operators' shape rules keep every dim within int range.
    BRAID_ASSERT(m <= size_t(std::numeric_limits<int>::max()) &&
                     n <= size_t(std::numeric_limits<int>::max()) &&
                     k <= size_t(std::numeric_limits<int>::max()),
                 "sgemm dims {}x{}x{} exceed int", m, n, k);
    BRAID_ASSERT(lda >= (ta ? m : k) && ldb >= (tb ? k : n) && ldc >= n,
                 "sgemm leading dims {} {} {} too small for {}x{}x{}", lda, ldb, ldc, m, n, k);
    if (deterministic_kernels())
        return ordered_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#if BRAID_WITH_DNNL
    if (use_dnnl_sgemm(m, n, k)) {
        dnnl_single_thread();
        if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', dnnl_dim_t(m), dnnl_dim_t(n), dnnl_dim_t(k),
                       alpha, a, dnnl_dim_t(lda), b, dnnl_dim_t(ldb), beta, c,
                       dnnl_dim_t(ldc)) == dnnl_success)
            return;
    }
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

namespace {

void sgemm_parallel_impl(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha,
                         const float* a, size_t lda, const float* b, size_t ldb, float beta,
                         float* c, size_t ldc, const TileEpilogue* epilogue) {
    blas_single_thread();
    size_t threads = kernel_threads();
    TileGrid grid;
    if (threads > 1 && double(m) * double(n) * double(k) >= MIN_PARALLEL_MACS)
        grid = choose_grid(m, n, threads);
    if (grid.count() <= 1) {
        sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        if (epilogue && m && n) (*epilogue)(0, m, 0, n);
        return;
    }
    parallel_for(grid.count(), 1, [&](size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t) {
            run_tile(grid, t, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
            if (!epilogue) continue;
            size_t r0 = (t / grid.cols) * grid.tile_m, c0 = (t % grid.cols) * grid.tile_n;
            (*epilogue)(r0, std::min(m, r0 + grid.tile_m) - r0, c0,
                        std::min(n, c0 + grid.tile_n) - c0);
        }
    });
}

} // namespace

void sgemm_parallel(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float* a,
                    size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc) {
    sgemm_parallel_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nullptr);
}

void sgemm_parallel_epilogue(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha,
                             const float* a, size_t lda, const float* b, size_t ldb, float beta,
                             float* c, size_t ldc, const TileEpilogue& epilogue) {
    sgemm_parallel_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, &epilogue);
}

void sgemm_batched(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha,
                   const float* const* a, size_t lda, const float* const* b, size_t ldb, float beta,
                   float* const* c, size_t ldc, size_t batch) {
    if (batch == 0) return;
    if (batch == 1) {
        sgemm_parallel(ta, tb, m, n, k, alpha, a[0], lda, b[0], ldb, beta, c[0], ldc);
        return;
    }
    blas_single_thread();
    size_t threads = kernel_threads();
    double macs = double(m) * double(n) * double(k);
    TileGrid grid;
    if (batch < threads && macs >= MIN_PARALLEL_MACS)
        grid = choose_grid(m, n, (threads + batch - 1) / batch);
    else {
        grid.tile_m = m;
        grid.tile_n = n;
    }
    size_t tiles = grid.count();
    // Group tiny GEMMs so that each pool chunk does enough work to pay for its dispatch.
    double task_macs = std::max(1.0, macs / double(tiles));
    size_t grain = size_t(std::max(1.0, MIN_PARALLEL_MACS / task_macs));
    parallel_for(batch * tiles, grain, [&](size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t) {
            size_t i = t / tiles;
            run_tile(grid, t % tiles, ta, tb, m, n, k, alpha, a[i], lda, b[i], ldb, beta, c[i],
                     ldc);
        }
    });
}

void dgemm_batched(bool ta, bool tb, size_t m, size_t n, size_t k, const double* const* a,
                   size_t lda, const double* const* b, size_t ldb, double* const* c, size_t ldc,
                   size_t batch) {
    if (batch == 0 || m == 0 || n == 0) return;
    if (k == 0) { // BLAS rejects a leading dimension of 0; the product is all zeros
        for (size_t i = 0; i < batch; ++i)
            for (size_t r = 0; r < m; ++r) std::fill(c[i] + r * ldc, c[i] + r * ldc + n, 0.0);
        return;
    }
    BRAID_ASSERT(m <= size_t(std::numeric_limits<int>::max()) &&
                     n <= size_t(std::numeric_limits<int>::max()) &&
                     k <= size_t(std::numeric_limits<int>::max()),
                 "dgemm dims {}x{}x{} exceed int", m, n, k);
    BRAID_ASSERT(lda >= (ta ? m : k) && ldb >= (tb ? k : n) && ldc >= n,
                 "dgemm leading dims {} {} {} too small for {}x{}x{}", lda, ldb, ldc, m, n, k);
    blas_single_thread();
    // Rows of C in blocks of at least MIN_TILE, so that a single large GEMM still spreads
    // over the pool; tiny GEMMs are grouped so each chunk pays for its dispatch.
    size_t threads = kernel_threads();
    double macs = double(m) * double(n) * double(k);
    size_t blocks = 1;
    if (batch < threads && macs >= MIN_PARALLEL_MACS)
        blocks = std::clamp<size_t>(m / MIN_TILE, 1, (threads + batch - 1) / batch);
    size_t rows = (m + blocks - 1) / blocks;
    blocks = (m + rows - 1) / rows;
    double task_macs = std::max(1.0, macs / double(blocks));
    size_t grain = size_t(std::max(1.0, MIN_PARALLEL_MACS / task_macs));
    parallel_for(batch * blocks, grain, [&](size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t) {
            size_t i = t / blocks, r0 = (t % blocks) * rows, rm = std::min(m, r0 + rows) - r0;
            // Row block r0 of op(A): rows of A, or columns of A when A is stored transposed.
            const double* a_blk = ta ? a[i] + r0 : a[i] + r0 * lda;
            if (deterministic_kernels()) {
                ordered_dgemm(ta, tb, rm, n, k, a_blk, lda, b[i], ldb, c[i] + r0 * ldc, ldc);
                continue;
            }
            cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, int(rm), int(n), int(k), 1.0, a_blk,
                        int(lda), b[i], int(ldb), 0.0, c[i] + r0 * ldc, int(ldc));
        }
    });
}

bool is_dense_float(DType dt) {
    return dt == dtype::Float32() || dt == dtype::Float16() || dt == dtype::BFloat16();
}

Tensor as_float32(const Tensor& t) {
    if (t.dtype() == dtype::Float32()) return t.contiguous();
    // Dense operators reject float64 at dtype inference (is_dense_float); staging it here
    // would compute it in float32 silently.
    BRAID_ASSERT(t.dtype() != dtype::Float64(), "float64 tensor staged through float32");
    Tensor r(t.shape(), dtype::Float32());
    Tensor src = t.contiguous();
    convert_elements(src.dtype(), src.raw_ptr(), dtype::Float32(), r.raw_ptr(),
                     t.shape().total_nr_elems());
    return r;
}

Tensor float32_target(const Tensor& y) {
    BRAID_ASSERT(y.dtype() != dtype::Float64(), "float64 output computed in float32");
    return y.dtype() == dtype::Float32() ? y : Tensor(y.shape(), dtype::Float32());
}

void store_float32(const Tensor& yf, Tensor& y) {
    if (yf.raw_ptr() == y.raw_ptr() && yf.dtype() == y.dtype()) return;
    convert_elements(dtype::Float32(), yf.raw_ptr(), y.dtype(), y.raw_ptr(),
                     y.shape().total_nr_elems());
}

// ---- softmax row loops: AVX-512 and AVX2 versions chosen at run time, scalar fallback ----

namespace {

//! exp(x) below this is flushed to 0 in every version (it would be a float32 denormal).
constexpr float EXP_FLUSH_BELOW = -87.33654f;
constexpr float EXP_CLAMP_ABOVE = 88.37626f;

float row_max_scalar(const float* x, size_t n) {
    float m = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

float row_exp_sum_scalar(float* x, size_t n, float shift) {
    float sum = 0.f;
    for (size_t i = 0; i < n; ++i) {
        float v = x[i] - shift;
        x[i] = v < EXP_FLUSH_BELOW ? 0.f : std::exp(v);
        sum += x[i];
    }
    return sum;
}

#ifdef BRAID_DENSE_X86
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as an unused merge source, which its
// own uninitialized-use analysis then reports; the values are never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// exp(x) = 2^j * exp(r) with j = round(x / ln 2) and r = x - j ln 2 (ln 2 split in two parts
// for precision); exp(r) on |r| <= ln2/2 by the Cephes expf polynomial (about 1 ulp).
#define BRAID_EXP_CONSTANTS(SET)                                                                   \
    const auto log2e = SET(1.44269504088896341f), ln2_hi = SET(0.693359375f),                      \
               ln2_lo = SET(-2.12194440e-4f), p0 = SET(1.9875691500e-4f),                          \
               p1 = SET(1.3981999507e-3f), p2 = SET(8.3334519073e-3f), p3 = SET(4.1665795894e-2f), \
               p4 = SET(1.6666665459e-1f), p5 = SET(5.0000001201e-1f), one = SET(1.f),             \
               lo = SET(EXP_FLUSH_BELOW), hi = SET(EXP_CLAMP_ABOVE)

__attribute__((target("avx512f"))) inline __m512 exp_avx512(__m512 x) {
    BRAID_EXP_CONSTANTS(_mm512_set1_ps);
    // Not-less-than is true for NaN, so NaN arguments stay NaN instead of flushing to 0.
    __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
    x = _mm512_min_ps(hi, _mm512_max_ps(lo, x));
    __m512 j = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(j, ln2_hi, x);
    r = _mm512_fnmadd_ps(j, ln2_lo, r);
    __m512 y = _mm512_fmadd_ps(p0, r, p1);
    y = _mm512_fmadd_ps(y, r, p2);
    y = _mm512_fmadd_ps(y, r, p3);
    y = _mm512_fmadd_ps(y, r, p4);
    y = _mm512_fmadd_ps(y, r, p5);
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, one));
    return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(y, j));
}

__attribute__((target("avx512f"))) float row_max_avx512(const float* x, size_t n) {
    const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __m512 m0 = ninf, m1 = ninf;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
    }
    for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    if (i < n) {
        __mmask16 tail = __mmask16((1u << (n - i)) - 1);
        m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(ninf, tail, x + i));
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

__attribute__((target("avx512f"))) float row_exp_sum_avx512(float* x, size_t n, float shift) {
    const __m512 s = _mm512_set1_ps(shift);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 e0 = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
        __m512 e1 = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), s));
        _mm512_storeu_ps(x + i, e0);
        _mm512_storeu_ps(x + i + 16, e1);
        acc0 = _mm512_add_ps(acc0, e0);
        acc1 = _mm512_add_ps(acc1, e1);
    }
    for (; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        __m512 e = exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), s));
        _mm512_mask_storeu_ps(x + i, mask, e);
        acc0 = _mm512_mask_add_ps(acc0, mask, acc0, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

__attribute__((target("avx2,fma"))) inline __m256 exp_avx2(__m256 x) {
    BRAID_EXP_CONSTANTS(_mm256_set1_ps);
    __m256 keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ);
    x = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
    __m256 j =
        _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(j, ln2_hi, x);
    r = _mm256_fnmadd_ps(j, ln2_lo, r);
    __m256 y = _mm256_fmadd_ps(p0, r, p1);
    y = _mm256_fmadd_ps(y, r, p2);
    y = _mm256_fmadd_ps(y, r, p3);
    y = _mm256_fmadd_ps(y, r, p4);
    y = _mm256_fmadd_ps(y, r, p5);
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, one));
    // 2^j built in the exponent field; j is within [-126, 128) after the clamps above.
    __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(j), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(keep, _mm256_mul_ps(y, _mm256_castsi256_ps(bits)));
}

__attribute__((target("avx2,fma"))) float row_max_avx2(const float* x, size_t n) {
    __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    size_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float r = row_max_scalar(lanes, 8);
    for (; i < n; ++i) r = x[i] > r ? x[i] : r;
    return r;
}

__attribute__((target("avx2,fma"))) float row_exp_sum_avx2(float* x, size_t n, float shift) {
    const __m256 s = _mm256_set1_ps(shift);
    __m256 acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    float sum = 0.f;
    for (float v : lanes) sum += v;
    return sum + row_exp_sum_scalar(x + i, n - i, shift);
}
#undef BRAID_EXP_CONSTANTS
#pragma GCC diagnostic pop
#endif

//! The row loops for this CPU, chosen once.
struct RowKernels {
    float (*max)(const float*, size_t) = row_max_scalar;
    float (*exp_sum)(float*, size_t, float) = row_exp_sum_scalar;

    RowKernels() {
#ifdef BRAID_DENSE_X86
        if (cpu_isa_at_least(CpuIsa::AVX512)) {
            max = row_max_avx512;
            exp_sum = row_exp_sum_avx512;
        } else if (cpu_isa_at_least(CpuIsa::AVX2)) {
            max = row_max_avx2;
            exp_sum = row_exp_sum_avx2;
        }
#endif
    }
};

const RowKernels& row_kernels() {
    static const RowKernels kernels;
    return kernels;
}

} // namespace

float row_max(const float* x, size_t n) {
    return row_kernels().max(x, n);
}

float row_exp_sum(float* x, size_t n, float shift) {
    return row_kernels().exp_sum(x, n, shift);
}

void row_scale(float* x, size_t n, float alpha) {
    for (size_t i = 0; i < n; ++i) x[i] *= alpha;
}

} // namespace braid::opr::kern
