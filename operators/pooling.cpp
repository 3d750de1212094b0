#include "operators/pooling.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "operators/dense_kernels.h"
#include "operators/kernel_utils.h"
#include "operators/max_pool_vector.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace braid::opr {

const char* pool_mode_name(PoolMode mode) {
    switch (mode) {
    case PoolMode::MAX:
        return "MAX";
    case PoolMode::AVERAGE:
        return "AVERAGE";
    }
    return "?";
}

Pooling::Pooling(VarNode* x, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(x);
    add_output();
}

SymbolVar Pooling::make(SymbolVar x, Param param, const OperatorConfig& config) {
    return x.graph().insert_opr(std::make_unique<Pooling>(x.node(), param, config))->output(0);
}

SymbolVar max_pool2d(SymbolVar x, int window) {
    return max_pool2d(x, window, window, 0);
}

SymbolVar max_pool2d(SymbolVar x, int window, int stride, int padding) {
    return Pooling::make(x, {PoolMode::MAX, window, window, stride, stride, padding, padding});
}

SymbolVar avg_pool2d(SymbolVar x, int window) {
    return avg_pool2d(x, window, window, 0, true);
}

SymbolVar avg_pool2d(SymbolVar x, int window, int stride, int padding, bool count_include_pad) {
    return Pooling::make(x, {PoolMode::AVERAGE, window, window, stride, stride, padding, padding,
                             count_include_pad});
}

void Pooling::init_output_dtypes() {
    // Params are checked here, the first step after the operator got its name.
    const auto& p = m_param;
    if (p.window_h < 1 || p.window_w < 1)
        BRAID_THROW(ValueError, "{}: window must be >= 1, got {}x{}", describe(), p.window_h,
                    p.window_w);
    if (p.stride_h < 1 || p.stride_w < 1)
        BRAID_THROW(ValueError, "{}: strides must be >= 1, got {}x{}", describe(), p.stride_h,
                    p.stride_w);
    if (p.pad_h < 0 || p.pad_w < 0 || p.pad_h >= p.window_h || p.pad_w >= p.window_w)
        BRAID_THROW(ValueError, "{}: padding {}x{} must be >= 0 and smaller than the window {}x{}",
                    describe(), p.pad_h, p.pad_w, p.window_h, p.window_w);
    DType dt = input(0)->dtype();
    if (!kern::is_dense_float(dt))
        BRAID_THROW(DTypeError, "{}: input dtype {} is not supported (float32, float16, bfloat16)",
                    describe(), dt.name());
    output(0)->set_dtype(dt);
}

bool Pooling::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    const auto& x = *ctx.shape(0);
    const auto& p = m_param;
    if (x.ndim() != 4)
        BRAID_THROW(ShapeError, "{}: input must be 4-D NCHW, got {}", describe(), x.to_string());
    if (x[2] == 0 || x[3] == 0)
        BRAID_THROW(ShapeError, "{}: input {} has empty spatial dims; windows would be empty",
                    describe(), x.to_string());
    size_t ph = x[2] + 2 * size_t(p.pad_h), pw = x[3] + 2 * size_t(p.pad_w);
    if (ph < size_t(p.window_h) || pw < size_t(p.window_w))
        BRAID_THROW(ShapeError, "{}: window {}x{} is larger than the padded input {}x{} of {}",
                    describe(), p.window_h, p.window_w, ph, pw, x.to_string());
    out[0] = TensorShape{x[0], x[1], (ph - size_t(p.window_h)) / size_t(p.stride_h) + 1,
                         (pw - size_t(p.window_w)) / size_t(p.stride_w) + 1};
    return true;
}

namespace {

//! The larger of a and v, where a NaN on either side wins and stays (written as one select,
//! so that the loops below vectorize).
inline float max_nan(float a, float v) {
    return ((v > a) | (v != v)) ? v : a;
}

//! y[j] = the NaN-propagating maximum of r[j·SW .. j·SW + KW) for j < count, with the window
//! known at compile time so that the loop vectorizes (strided loads for SW > 1).
template <int KW, int SW> void max_pool_cols(const float* r, float* y, ptrdiff_t count) {
    for (ptrdiff_t j = 0; j < count; ++j) {
        const float* win = r + j * SW;
        float m = win[0];
        for (int b = 1; b < KW; ++b) m = max_nan(m, win[b]);
        y[j] = m;
    }
}

//! The window's column pass for output columns [j0, j1), whose windows lie inside the row.
void max_pool_interior(const PoolGeometry& g, const float* rowmax, float* y, ptrdiff_t j0,
                       ptrdiff_t j1) {
    const float* r = rowmax + j0 * g.sw - g.pw;
    ptrdiff_t count = j1 - j0;
    if (count <= 0) return;
    if (g.kw == 3 && g.sw == 2) return max_pool_cols<3, 2>(r, y + j0, count);
    if (g.kw == 2 && g.sw == 2) return max_pool_cols<2, 2>(r, y + j0, count);
    if (g.kw == 3 && g.sw == 1) return max_pool_cols<3, 1>(r, y + j0, count);
    for (ptrdiff_t j = 0; j < count; ++j) {
        const float* win = r + j * g.sw;
        float m = win[0];
        for (ptrdiff_t b = 1; b < g.kw; ++b) m = max_nan(m, win[b]);
        y[j0 + j] = m;
    }
}

//! Max pooling of one plane, separably: for each output row the maximum of its window's input
//! rows (a vectorized pass over whole rows), then of each window's columns of that row (a
//! vectorized pass over the columns whose windows lie inside the row, and a clamped loop at the
//! two edges).
void max_pool_plane(const PoolGeometry& g, const float* x, float* y, float* rowmax) {
    // Output columns [j_lo, j_hi) have windows [j·sw − pw, j·sw − pw + kw) inside [0, w).
    ptrdiff_t j_lo = std::min(g.ow, (g.pw + g.sw - 1) / g.sw);
    ptrdiff_t j_hi = g.w >= g.kw - g.pw ? std::min(g.ow, (g.w - g.kw + g.pw) / g.sw + 1) : 0;
    j_hi = std::max(j_hi, j_lo);
    auto edge = [&](float* yrow, ptrdiff_t j) {
        ptrdiff_t w0 = std::max<ptrdiff_t>(j * g.sw - g.pw, 0);
        ptrdiff_t w1 = std::min(j * g.sw - g.pw + g.kw, g.w);
        float m = -std::numeric_limits<float>::infinity();
        for (ptrdiff_t b = w0; b < w1; ++b) m = max_nan(m, rowmax[b]);
        yrow[j] = m;
    };
    for (ptrdiff_t i = 0; i < g.oh; ++i) {
        ptrdiff_t h0 = std::max<ptrdiff_t>(i * g.sh - g.ph, 0);
        ptrdiff_t h1 = std::min(i * g.sh - g.ph + g.kh, g.h);
        const float* first = x + h0 * g.w;
        for (ptrdiff_t b = 0; b < g.w; ++b) rowmax[b] = first[b];
        for (ptrdiff_t a = h0 + 1; a < h1; ++a) {
            const float* row = x + a * g.w;
            for (ptrdiff_t b = 0; b < g.w; ++b) rowmax[b] = max_nan(rowmax[b], row[b]);
        }
        float* yrow = y + i * g.ow;
        for (ptrdiff_t j = 0; j < j_lo; ++j) edge(yrow, j);
        max_pool_interior(g, rowmax, yrow, j_lo, j_hi);
        for (ptrdiff_t j = j_hi; j < g.ow; ++j) edge(yrow, j);
    }
}

/*!
 * Max pooling with windows that tile the input (window = stride, no padding: 2x2/2, 1x2/(1,2))
 * over output rows [r0, r1) of all planes taken as one sequence (row r is row r % oh of plane
 * r / oh): each output element straight from its KH·KW inputs, no row buffer. On small maps
 * the separable pass cost more per row than the row's work (a speech embedding's five pools
 * on 16-32 pixel rows: 84 us where this takes 22).
 */
template <int KH, int KW>
void max_pool_tiles(const PoolGeometry& g, const float* x, float* y, size_t r0, size_t r1) {
    const size_t oh = size_t(g.oh), ow = size_t(g.ow), w = size_t(g.w), in_plane = g.h * w;
    for (size_t r = r0; r < r1; ++r) {
        const float* in = x + r / oh * in_plane + r % oh * KH * w;
        float* out = y + r * ow;
        for (size_t j = 0; j < ow; ++j) {
            float m = in[j * KW];
            for (int a = 0; a < KH; ++a)
                for (int b = a == 0 ? 1 : 0; b < KW; ++b) m = max_nan(m, in[a * w + j * KW + b]);
            out[j] = m;
        }
    }
}

//! max_pool_tiles() for the window, or null where it has no specialization.
using TilePool = void (*)(const PoolGeometry&, const float*, float*, size_t, size_t);
TilePool tile_pool(const PoolGeometry& g) {
    if (g.kh != g.sh || g.kw != g.sw || g.ph != 0 || g.pw != 0) return nullptr;
    if (g.kh == 2 && g.kw == 2) return max_pool_tiles<2, 2>;
    if (g.kh == 1 && g.kw == 2) return max_pool_tiles<1, 2>;
    if (g.kh == 2 && g.kw == 1) return max_pool_tiles<2, 1>;
    if (g.kh == 3 && g.kw == 3) return max_pool_tiles<3, 3>;
    return nullptr;
}

void avg_pool_plane(const PoolGeometry& g, bool include_pad, const float* x, float* y) {
    float full = 1.f / float(g.kh * g.kw);
    for (ptrdiff_t i = 0; i < g.oh; ++i) {
        ptrdiff_t h0 = std::max<ptrdiff_t>(i * g.sh - g.ph, 0);
        ptrdiff_t h1 = std::min(i * g.sh - g.ph + g.kh, g.h);
        for (ptrdiff_t j = 0; j < g.ow; ++j) {
            ptrdiff_t w0 = std::max<ptrdiff_t>(j * g.sw - g.pw, 0);
            ptrdiff_t w1 = std::min(j * g.sw - g.pw + g.kw, g.w);
            float sum = 0.f;
            for (ptrdiff_t a = h0; a < h1; ++a) {
                const float* row = x + a * g.w;
                for (ptrdiff_t b = w0; b < w1; ++b) sum += row[b];
            }
            y[i * g.ow + j] = include_pad ? sum * full : sum / float((h1 - h0) * (w1 - w0));
        }
    }
}

} // namespace

void Pooling::execute(ExecCtx& ctx) {
    Tensor x = kern::as_float32(ctx.input(0));
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    Tensor yf = kern::float32_target(y);
    const auto &xs = x.shape(), &ys = y.shape();
    const auto& p = m_param;
    PoolGeometry g{ptrdiff_t(xs[2]), ptrdiff_t(xs[3]), ptrdiff_t(ys[2]), ptrdiff_t(ys[3]),
                   p.window_h,       p.window_w,       p.stride_h,       p.stride_w,
                   p.pad_h,          p.pad_w};
    size_t in_plane = xs[2] * xs[3], out_plane = ys[2] * ys[3];
    size_t work = out_plane * size_t(p.window_h * p.window_w);
    const float* xp = x.ptr<float>();
    float* yp = yf.ptr<float>();
    bool is_max = p.mode == PoolMode::MAX;
    if (TilePool tiles = is_max ? tile_pool(g) : nullptr) {
        size_t rows = xs[0] * xs[1] * ys[2], row_work = ys[3] * size_t(p.window_h * p.window_w);
        parallel_range(rows, row_work,
                       [&](size_t begin, size_t end) { tiles(g, xp, yp, begin, end); });
        kern::store_float32(yf, y);
        return;
    }
    if (is_max && max_pool_vector_applies(g)) {
        parallel_range(xs[0] * xs[1], work,
                       [&](size_t begin, size_t end) { max_pool_vector(g, xp, yp, begin, end); });
        kern::store_float32(yf, y);
        return;
    }
    parallel_range(xs[0] * xs[1], work, [&](size_t begin, size_t end) {
        std::vector<float> rowmax(is_max ? size_t(g.w) : 0);
        for (size_t plane = begin; plane < end; ++plane) {
            const float* xpl = xp + plane * in_plane;
            float* ypl = yp + plane * out_plane;
            if (is_max)
                max_pool_plane(g, xpl, ypl, rowmax.data());
            else
                avg_pool_plane(g, p.count_include_pad, xpl, ypl);
        }
    });
    kern::store_float32(yf, y);
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_pooling_kernels();
}
#endif

void register_pooling_operators() {
    auto& reg = OperatorRegistry::instance();
    // Loaded by make(), which refuses windows or strides below 1 and paddings outside
    // [0, window) (ValueError naming the operator), and inputs smaller than the window
    // (ShapeError).
    reg.add("Pooling", "pooling", dump_param<Pooling>, load_param<Pooling>);
    register_grad_rule("Pooling", Pooling::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_pooling_kernels(); // operators/cuda/pooling.cpp
#endif
}

} // namespace braid::opr
