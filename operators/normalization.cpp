#include "operators/normalization.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "operators/kernel_utils.h"
#include "operators/vec_math.h"

#include <cmath>
#include <limits>
#include <memory>

namespace braid::opr {

namespace {

constexpr size_t NORM_LANES = 16;
constexpr size_t NORM_BLOCK =
    1024;                         //!< float32 lanes are widened to double every NORM_BLOCK elements
constexpr size_t NORM_TILE = 256; //!< columns per work item when the axis is not the last

BRAID_INLINE float row_max(const float* x, size_t n) {
    float acc[NORM_LANES];
    for (size_t j = 0; j < NORM_LANES; ++j) acc[j] = -INFINITY;
    size_t i = 0;
    for (; i + NORM_LANES <= n; i += NORM_LANES)
        for (size_t j = 0; j < NORM_LANES; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    float m = -INFINITY;
    for (size_t j = 0; j < NORM_LANES; ++j) m = acc[j] > m ? acc[j] : m;
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

//! sum of e^{x - m}; stores each term in y when y is not null.
BRAID_INLINE double row_sum_exp(const float* x, float m, float* y, size_t n) {
    double total = 0;
    for (size_t b = 0; b < n; b += NORM_BLOCK) {
        size_t len = std::min(NORM_BLOCK, n - b);
        const float* p = x + b;
        float acc[NORM_LANES] = {};
        size_t i = 0;
        if (y) {
            float* q = y + b;
            for (; i + NORM_LANES <= len; i += NORM_LANES)
                for (size_t j = 0; j < NORM_LANES; ++j) {
                    float e = vmath::exp(p[i + j] - m);
                    q[i + j] = e;
                    acc[j] += e;
                }
            for (; i < len; ++i) {
                q[i] = vmath::exp(p[i] - m);
                acc[0] += q[i];
            }
        } else {
            for (; i + NORM_LANES <= len; i += NORM_LANES)
                for (size_t j = 0; j < NORM_LANES; ++j) acc[j] += vmath::exp(p[i + j] - m);
            for (; i < len; ++i) acc[0] += vmath::exp(p[i] - m);
        }
        for (size_t j = 0; j < NORM_LANES; ++j) total += acc[j];
    }
    return total;
}

BRAID_SIMD_CLONES void softmax_row_range(const float* x, float* y, size_t b, size_t e, size_t n,
                                         bool log) {
    for (size_t r = b; r < e; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        float m = row_max(xr, n);
        if (log) {
            // (x - m) is exact near the maximum; adding m back to log(sum) first would
            // round the result to the ulp of m.
            float ls = float(std::log(row_sum_exp(xr, m, nullptr, n)));
            for (size_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) - ls;
        } else {
            float inv = float(1.0 / row_sum_exp(xr, m, yr, n));
            for (size_t i = 0; i < n; ++i) yr[i] *= inv;
        }
    }
}

#ifdef BRAID_VMATH_AVX2
// ---- AVX2 + FMA row kernels, chosen at run time (vmath::avx2_fma_supported()). They follow the
// portable loops above: the same passes, the same 16 float partial sums widened to double every
// NORM_BLOCK elements, scalar vmath tails, so results match them to within FMA rounding.
#define BRAID_AVX2 __attribute__((target("avx2,fma")))

//! Horizontal sum of two 8-float accumulators, in double.
BRAID_AVX2 inline double hsum(__m256 a, __m256 b) {
    __m256 s = _mm256_add_ps(a, b);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    __m256d d = _mm256_cvtps_pd(h);
    __m128d q = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(q) + _mm_cvtsd_f64(_mm_unpackhi_pd(q, q));
}

BRAID_AVX2 float row_max_avx2(const float* x, size_t n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
    size_t i = 0;
    // max_ps(a, b) returns b when either is NaN: the running maximum ignores NaN, like the
    // portable loop (a NaN input still makes its own output NaN through exp).
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
        m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
        m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    __m256 m = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float r = -INFINITY;
    for (float v : lanes) r = v > r ? v : r;
    for (; i < n; ++i) r = x[i] > r ? x[i] : r;
    return r;
}

//! The blocked row sum that softmax and the norms share: the sum over n elements of x, each
//! folded in by Term, in blocks of NORM_BLOCK whose partial sums are added in double (two 8-wide
//! accumulators per block, the block's tail in float). Term::vec(acc, v, i) folds in the 8
//! elements v that start at index i; Term::one(acc, v, i) folds in one. `next` (may be null):
//! the row after this one, fetched into cache one line per 16 elements so that its pass does
//! not wait on memory.
template <typename Term>
BRAID_AVX2 double blocked_row_sum_avx2(const float* x, size_t n, const float* next,
                                       const Term& term) {
    double total = 0;
    for (size_t b = 0; b < n; b += NORM_BLOCK) {
        size_t len = std::min(NORM_BLOCK, n - b);
        const float* p = x + b;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        size_t i = 0;
        for (; i + NORM_LANES <= len; i += NORM_LANES) {
            if (next) _mm_prefetch(reinterpret_cast<const char*>(next + b + i), _MM_HINT_T0);
            acc0 = term.vec(acc0, _mm256_loadu_ps(p + i), b + i);
            acc1 = term.vec(acc1, _mm256_loadu_ps(p + i + 8), b + i + 8);
        }
        float tail = 0.f;
        for (; i < len; ++i) tail = term.one(tail, p[i], b + i);
        total += hsum(acc0, acc1) + double(tail);
    }
    return total;
}

//! The terms e^{x - m}, each also stored in y when STORE.
template <bool STORE> struct ExpTerm {
    __m256 mv;
    float m;
    float* y;
    BRAID_AVX2 __m256 vec(__m256 acc, __m256 v, size_t i) const {
        __m256 e = vmath::exp8_nonpositive(_mm256_sub_ps(v, mv));
        if constexpr (STORE) _mm256_storeu_ps(y + i, e);
        return _mm256_add_ps(acc, e);
    }
    BRAID_AVX2 float one(float acc, float v, size_t i) const {
        float e = vmath::exp(v - m);
        if constexpr (STORE) y[i] = e;
        return acc + e;
    }
};

//! sum of e^{x - m} over n elements; stores each term in y when STORE.
template <bool STORE>
BRAID_AVX2 double row_sum_exp_avx2(const float* x, float m, float* y, size_t n, const float* next) {
    return blocked_row_sum_avx2(x, n, next, ExpTerm<STORE>{_mm256_set1_ps(m), m, y});
}

//! Rows [b, e) of a softmax over rows of n. `scratch` (n floats, or null): when given, the
//! exponentials go there and the scaled results reach y through non-temporal stores, so y's
//! lines are never read.
BRAID_AVX2 void softmax_row_range_avx2(const float* x, float* y, size_t b, size_t e, size_t n,
                                       bool log, float* scratch) {
    for (size_t r = b; r < e; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        float m = row_max_avx2(xr, n);
        const float* next = r + 1 < e ? xr + n : nullptr;
        size_t i = 0;
        if (log) {
            float ls = float(std::log(row_sum_exp_avx2<false>(xr, m, nullptr, n, next)));
            if (scratch)
                for (; i < n && reinterpret_cast<uintptr_t>(yr + i) % 32; ++i)
                    yr[i] = (xr[i] - m) - ls;
            const __m256 mv = _mm256_set1_ps(m), lv = _mm256_set1_ps(ls);
            for (; i + 8 <= n; i += 8) {
                __m256 v = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + i), mv), lv);
                if (scratch)
                    _mm256_stream_ps(yr + i, v);
                else
                    _mm256_storeu_ps(yr + i, v);
            }
            for (; i < n; ++i) yr[i] = (xr[i] - m) - ls;
        } else {
            float* er = scratch ? scratch : yr;
            float inv = float(1.0 / row_sum_exp_avx2<true>(xr, m, er, n, next));
            if (scratch)
                for (; i < n && reinterpret_cast<uintptr_t>(yr + i) % 32; ++i) yr[i] = er[i] * inv;
            const __m256 iv = _mm256_set1_ps(inv);
            for (; i + 8 <= n; i += 8) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(er + i), iv);
                if (scratch)
                    _mm256_stream_ps(yr + i, v);
                else
                    _mm256_storeu_ps(yr + i, v);
            }
            for (; i < n; ++i) yr[i] = er[i] * inv;
        }
    }
    if (scratch) _mm_sfence(); // order the non-temporal stores before the task ends
}
#endif

void softmax_rows(const float* x, float* y, size_t rows, size_t n, bool log) {
#ifdef BRAID_VMATH_AVX2
    if (vmath::avx2_fma_supported()) {
        bool stream = rows * n * sizeof(float) >= vmath::STREAM_MIN_BYTES;
        parallel_range(rows, n * 4, [&](size_t b, size_t e) {
            std::unique_ptr<float[]> scratch(stream ? new float[n] : nullptr);
            softmax_row_range_avx2(x, y, b, e, n, log, scratch.get());
        });
        return;
    }
#endif
    parallel_range(rows, n * 4, [&](size_t b, size_t e) { softmax_row_range(x, y, b, e, n, log); });
}

//! Softmax along the middle axis of (outer, n, inner) for work items [b, e), each a tile of
//! up to NORM_TILE columns of one outer index.
BRAID_SIMD_CLONES void softmax_tile_range(const float* x, float* y, size_t b, size_t e, size_t n,
                                          size_t inner, bool log) {
    size_t tiles = (inner + NORM_TILE - 1) / NORM_TILE;
    float mx[NORM_TILE], sum[NORM_TILE];
    for (size_t it = b; it < e; ++it) {
        size_t o = it / tiles, i0 = (it % tiles) * NORM_TILE, w = std::min(NORM_TILE, inner - i0);
        const float* xo = x + o * n * inner + i0;
        float* yo = y + o * n * inner + i0;
        for (size_t i = 0; i < w; ++i) {
            mx[i] = -INFINITY;
            sum[i] = 0.f;
        }
        for (size_t k = 0; k < n; ++k)
            for (size_t i = 0; i < w; ++i) {
                float v = xo[k * inner + i];
                mx[i] = v > mx[i] ? v : mx[i];
            }
        for (size_t k = 0; k < n; ++k)
            for (size_t i = 0; i < w; ++i) {
                float ev = vmath::exp(xo[k * inner + i] - mx[i]);
                if (!log) yo[k * inner + i] = ev;
                sum[i] += ev;
            }
        if (log) {
            for (size_t i = 0; i < w; ++i) sum[i] = vmath::log(sum[i]);
            for (size_t k = 0; k < n; ++k)
                for (size_t i = 0; i < w; ++i)
                    yo[k * inner + i] = (xo[k * inner + i] - mx[i]) - sum[i];
        } else {
            for (size_t i = 0; i < w; ++i) sum[i] = 1.f / sum[i];
            for (size_t k = 0; k < n; ++k)
                for (size_t i = 0; i < w; ++i) yo[k * inner + i] *= sum[i];
        }
    }
}

void softmax_cols(const float* x, float* y, size_t outer, size_t n, size_t inner, bool log) {
    size_t tiles = (inner + NORM_TILE - 1) / NORM_TILE;
    parallel_range(outer * tiles, n * std::min(inner, NORM_TILE) * 4,
                   [&](size_t b, size_t e) { softmax_tile_range(x, y, b, e, n, inner, log); });
}

//! sum of (x - shift)^2 over n elements.
BRAID_INLINE double row_sum_sq(const float* x, float shift, size_t n) {
    double total = 0;
    for (size_t b = 0; b < n; b += NORM_BLOCK) {
        size_t len = std::min(NORM_BLOCK, n - b);
        const float* p = x + b;
        float acc[NORM_LANES] = {};
        size_t i = 0;
        for (; i + NORM_LANES <= len; i += NORM_LANES)
            for (size_t j = 0; j < NORM_LANES; ++j) {
                float d = p[i + j] - shift;
                acc[j] += d * d;
            }
        for (; i < len; ++i) acc[0] += (p[i] - shift) * (p[i] - shift);
        for (size_t j = 0; j < NORM_LANES; ++j) total += acc[j];
    }
    return total;
}

BRAID_INLINE double row_sum(const float* x, size_t n) {
    double total = 0;
    for (size_t b = 0; b < n; b += NORM_BLOCK) {
        size_t len = std::min(NORM_BLOCK, n - b);
        const float* p = x + b;
        float acc[NORM_LANES] = {};
        size_t i = 0;
        for (; i + NORM_LANES <= len; i += NORM_LANES)
            for (size_t j = 0; j < NORM_LANES; ++j) acc[j] += p[i + j];
        for (; i < len; ++i) acc[0] += p[i];
        for (size_t j = 0; j < NORM_LANES; ++j) total += acc[j];
    }
    return total;
}

template <bool W, bool B>
BRAID_INLINE void norm_apply(const float* x, float shift, float rstd, const float* w,
                             const float* b, float* y, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        float v = (x[i] - shift) * rstd;
        if constexpr (W) v *= w[i];
        if constexpr (B) v += b[i];
        y[i] = v;
    }
}

BRAID_SIMD_CLONES void norm_row_range(bool layer, const float* x, const float* w, const float* b,
                                      float* y, size_t rb, size_t re, size_t n, float eps) {
    for (size_t r = rb; r < re; ++r) {
        const float* xr = x + r * n;
        // Two passes (mean, then squared deviations) stay accurate when |mean| >> std.
        float shift = layer ? float(row_sum(xr, n) / double(n)) : 0.f;
        double var = row_sum_sq(xr, shift, n) / double(n);
        float rstd = float(1.0 / std::sqrt(var + double(eps)));
        float* yr = y + r * n;
        if (w && b)
            norm_apply<true, true>(xr, shift, rstd, w, b, yr, n);
        else if (w)
            norm_apply<true, false>(xr, shift, rstd, w, b, yr, n);
        else if (b)
            norm_apply<false, true>(xr, shift, rstd, w, b, yr, n);
        else
            norm_apply<false, false>(xr, shift, rstd, w, b, yr, n);
    }
}

#ifdef BRAID_VMATH_AVX2
//! The terms (x - shift)^2 (SQ) or x (!SQ).
template <bool SQ> struct MomentTerm {
    __m256 sv;
    float shift;
    BRAID_AVX2 __m256 vec(__m256 acc, __m256 v, size_t) const {
        if constexpr (!SQ) return _mm256_add_ps(acc, v);
        v = _mm256_sub_ps(v, sv);
        return _mm256_fmadd_ps(v, v, acc);
    }
    BRAID_AVX2 float one(float acc, float v, size_t) const {
        return SQ ? acc + (v - shift) * (v - shift) : acc + v;
    }
};

//! sum of (x - shift)^2 (SQ) or of x (!SQ) over n elements; prefetches `next` like
//! row_sum_exp_avx2.
template <bool SQ>
BRAID_AVX2 double row_sum_avx2(const float* x, float shift, size_t n, const float* next) {
    return blocked_row_sum_avx2(x, n, next, MomentTerm<SQ>{_mm256_set1_ps(shift), shift});
}

//! y = (x - shift) * rstd [* w] [+ b]. STREAM: y is written with non-temporal stores past its
//! first 32-byte boundary (see vmath::STREAM_MIN_BYTES).
template <bool W, bool B, bool STREAM>
BRAID_AVX2 void norm_apply_avx2(const float* x, float shift, float rstd, const float* w,
                                const float* b, float* y, size_t n) {
    auto one = [&](size_t i) {
        float v = (x[i] - shift) * rstd;
        if constexpr (W) v *= w[i];
        if constexpr (B) v += b[i];
        y[i] = v;
    };
    size_t i = 0;
    if constexpr (STREAM)
        for (; i < n && reinterpret_cast<uintptr_t>(y + i) % 32; ++i) one(i);
    const __m256 sv = _mm256_set1_ps(shift), rv = _mm256_set1_ps(rstd);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), sv), rv);
        if constexpr (W && B)
            v = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + i), _mm256_loadu_ps(b + i));
        else if constexpr (W)
            v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        else if constexpr (B)
            v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
        if constexpr (STREAM)
            _mm256_stream_ps(y + i, v);
        else
            _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; ++i) one(i);
}

template <bool STREAM>
BRAID_AVX2 void norm_apply_any_avx2(const float* x, float shift, float rstd, const float* w,
                                    const float* b, float* y, size_t n) {
    if (w && b)
        norm_apply_avx2<true, true, STREAM>(x, shift, rstd, w, b, y, n);
    else if (w)
        norm_apply_avx2<true, false, STREAM>(x, shift, rstd, w, b, y, n);
    else if (b)
        norm_apply_avx2<false, true, STREAM>(x, shift, rstd, w, b, y, n);
    else
        norm_apply_avx2<false, false, STREAM>(x, shift, rstd, w, b, y, n);
}

BRAID_AVX2 void norm_row_range_avx2(bool layer, const float* x, const float* w, const float* b,
                                    float* y, size_t rb, size_t re, size_t n, float eps,
                                    bool stream) {
    for (size_t r = rb; r < re; ++r) {
        const float* xr = x + r * n;
        const float* next = r + 1 < re ? xr + n : nullptr;
        float shift = layer ? float(row_sum_avx2<false>(xr, 0.f, n, nullptr) / double(n)) : 0.f;
        double var = row_sum_avx2<true>(xr, shift, n, next) / double(n);
        float rstd = float(1.0 / std::sqrt(var + double(eps)));
        float* yr = y + r * n;
        if (stream)
            norm_apply_any_avx2<true>(xr, shift, rstd, w, b, yr, n);
        else
            norm_apply_any_avx2<false>(xr, shift, rstd, w, b, yr, n);
    }
    if (stream) _mm_sfence(); // order the non-temporal stores before the task ends
}
#endif

void norm_rows(bool layer, const float* x, const float* w, const float* b, float* y, size_t rows,
               size_t n, float eps) {
#ifdef BRAID_VMATH_AVX2
    if (vmath::avx2_fma_supported()) {
        bool stream = rows * n * sizeof(float) >= vmath::STREAM_MIN_BYTES;
        parallel_range(rows, n * 3, [&](size_t rb, size_t re) {
            norm_row_range_avx2(layer, x, w, b, y, rb, re, n, eps, stream);
        });
        return;
    }
#endif
    parallel_range(rows, n * 3, [&](size_t rb, size_t re) {
        norm_row_range(layer, x, w, b, y, rb, re, n, eps);
    });
}

void check_float_input(const OperatorNode& opr, VarNode* var, const char* role) {
    DType dt = var->dtype();
    // float64 is a float, but these kernels compute in float32 only: rejected, not narrowed.
    if (!dt.is_float() || dt == dtype::Float64())
        BRAID_THROW(DTypeError, "{}: {} \"{}\" has dtype {}; expected {}", opr.describe(), role,
                    var->name(), dt.name(),
                    dtype_list({dtype::Float32(), dtype::Float16(), dtype::BFloat16()}));
}

} // namespace

// ---------------------------------------------------------------- Softmax
Softmax::Softmax(VarNode* x, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(x);
    add_output();
}

SymbolVar Softmax::make(SymbolVar x, Param param, const OperatorConfig& config) {
    return x.graph().insert_opr(std::make_unique<Softmax>(x.node(), param, config))->output(0);
}

SymbolVar softmax(SymbolVar x, int axis) {
    return Softmax::make(x, {axis, false});
}

SymbolVar log_softmax(SymbolVar x, int axis) {
    return Softmax::make(x, {axis, true});
}

void Softmax::init_output_dtypes() {
    check_float_input(*this, input(0), "input");
    output(0)->set_dtype(input(0)->dtype());
}

bool Softmax::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    normalize_axis(m_param.axis, ctx.shape(0)->ndim(), describe());
    out[0] = *ctx.shape(0);
    return true;
}

void Softmax::execute(ExecCtx& ctx) {
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    Tensor x = as_float32(ctx.input(0));
    Tensor yf = float32_like(y);
    size_t axis = normalize_axis(m_param.axis, x.shape().ndim(), describe());
    AxisSplit sp = split_shape(x.shape(), axis, axis + 1);
    if (sp.inner == 1)
        softmax_rows(x.ptr<float>(), yf.ptr<float>(), sp.outer, sp.n, m_param.log);
    else
        softmax_cols(x.ptr<float>(), yf.ptr<float>(), sp.outer, sp.n, sp.inner, m_param.log);
    store_float32(yf, y);
}

// ---------------------------------------------------------------- LayerNorm / RMSNorm
Normalization::Normalization(VarNode* x, VarNode* weight, VarNode* bias, Param param,
                             const OperatorConfig& config)
    : ParamOperator(param, config) {
    m_param.has_weight = weight != nullptr;
    m_param.has_bias = bias != nullptr;
    add_input(x);
    if (weight) add_input(weight);
    if (bias) add_input(bias);
    add_output();
}

SymbolVar Normalization::make(SymbolVar x, SymbolVar weight, SymbolVar bias, Param param,
                              const OperatorConfig& config) {
    return x.graph()
        .insert_opr(
            std::make_unique<Normalization>(x.node(), weight.node(), bias.node(), param, config))
        ->output(0);
}

SymbolVar layer_norm(SymbolVar x, SymbolVar weight, SymbolVar bias, size_t normalized_ndim,
                     float eps) {
    return Normalization::make(x, weight, bias,
                               {Normalization::Kind::LAYER, normalized_ndim, eps, false, false});
}

SymbolVar rms_norm(SymbolVar x, SymbolVar weight, SymbolVar bias, size_t normalized_ndim,
                   float eps) {
    return Normalization::make(x, weight, bias,
                               {Normalization::Kind::RMS, normalized_ndim, eps, false, false});
}

void Normalization::init_output_dtypes() {
    check_float_input(*this, input(0), "input");
    for (size_t i = 1; i < inputs().size(); ++i) {
        const char* role = (i == 1 && m_param.has_weight) ? "weight" : "bias";
        if (input(i)->dtype() != input(0)->dtype())
            BRAID_THROW(DTypeError, "{}: {} \"{}\" has dtype {}; expected {} like the input",
                        describe(), role, input(i)->name(), input(i)->dtype().name(),
                        input(0)->dtype().name());
    }
    output(0)->set_dtype(input(0)->dtype());
}

bool Normalization::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    for (size_t i = 0; i < ctx.nr_inputs(); ++i)
        if (!ctx.shape(i)) return false;
    const TensorShape& xs = *ctx.shape(0);
    size_t k = m_param.normalized_ndim;
    if (k == 0 || k > xs.ndim())
        BRAID_THROW(ShapeError,
                    "{}: normalized_ndim {} does not fit a rank-{} input {} (expected 1..{})",
                    describe(), k, xs.ndim(), xs.to_string(), xs.ndim());
    std::vector<size_t> dims = xs.dims();
    TensorShape expected(std::vector<size_t>(dims.end() - long(k), dims.end()));
    for (size_t i = 1; i < ctx.nr_inputs(); ++i) {
        const char* role = (i == 1 && m_param.has_weight) ? "weight" : "bias";
        if (*ctx.shape(i) != expected)
            BRAID_THROW(ShapeError, "{}: {} has shape {}; expected {} (the last {} dims of {})",
                        describe(), role, ctx.shape(i)->to_string(), expected.to_string(), k,
                        xs.to_string());
    }
    out[0] = xs;
    return true;
}

void Normalization::execute(ExecCtx& ctx) {
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    Tensor x = as_float32(ctx.input(0));
    Tensor w, b;
    size_t next = 1;
    if (m_param.has_weight) w = as_float32(ctx.input(next++));
    if (m_param.has_bias) b = as_float32(ctx.input(next++));
    Tensor yf = float32_like(y);
    size_t nd = x.shape().ndim();
    AxisSplit sp = split_shape(x.shape(), nd - m_param.normalized_ndim, nd);
    norm_rows(m_param.kind == Kind::LAYER, x.ptr<float>(), w.empty() ? nullptr : w.ptr<float>(),
              b.empty() ? nullptr : b.ptr<float>(), yf.ptr<float>(), sp.outer, sp.n, m_param.eps);
    store_float32(yf, y);
}

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

namespace {

//! LayerNorm and RMSNorm share their params; only the type (the kind) differs.
static SymbolVarArray load_normalization(const OprLoadContext& ctx, Normalization::Kind kind) {
    const auto& r = ctx.params;
    auto p = read_param<Normalization::Param>(r);
    p.kind = kind;
    if (p.normalized_ndim < 1 || p.normalized_ndim > TensorShape::MAX_NDIM)
        BRAID_THROW(SerializationError, "{}: param \"normalized_ndim\" is {}; expected 1..{}",
                    r.context(), p.normalized_ndim, TensorShape::MAX_NDIM);
    if (!(p.eps >= 0 && p.eps <= std::numeric_limits<float>::max()))
        BRAID_THROW(SerializationError,
                    "{}: param \"eps\" is {}; expected a finite float32 value >= 0", r.context(),
                    p.eps);
    size_t n = 1 + size_t(p.has_weight) + size_t(p.has_bias);
    ctx.expect_inputs(n, n); // x, then the weight and the bias the params say it has
    SymbolVar weight = p.has_weight ? ctx.input(1) : SymbolVar{};
    SymbolVar bias = p.has_bias ? ctx.input(n - 1) : SymbolVar{};
    return {Normalization::make(ctx.input(0), weight, bias, p, ctx.config)};
}

static SymbolVarArray load_layer_norm(const OprLoadContext& ctx) {
    return load_normalization(ctx, Normalization::Kind::LAYER);
}

static SymbolVarArray load_rms_norm(const OprLoadContext& ctx) {
    return load_normalization(ctx, Normalization::Kind::RMS);
}

} // namespace

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_normalization_kernels();
}
#endif

void register_normalization_operators() {
    auto& reg = OperatorRegistry::instance();
    // Loaded by make(), which checks the axis against the input's rank.
    reg.add("Softmax", "normalization", dump_param<Softmax>, load_param<Softmax>);
    reg.add("LayerNorm", "normalization", dump_param<Normalization>, load_layer_norm);
    reg.add("RMSNorm", "normalization", dump_param<Normalization>, load_rms_norm);
    register_grad_rule("Softmax", Softmax::grad_rule);
    register_grad_rule("LayerNorm", Normalization::grad_rule);
    register_grad_rule("RMSNorm", Normalization::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_normalization_kernels(); // operators/cuda/normalization.cpp
#endif
}

} // namespace braid::opr
