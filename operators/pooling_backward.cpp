#include "operators/pooling_backward.h"
#include "graph/operator_registry.h"

#include "base/error.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "operators/dense_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace braid::opr {

PoolingBackward::PoolingBackward(VarNode* x, VarNode* dy, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(x);
    add_input(dy);
    add_output();
}

SymbolVar PoolingBackward::make(SymbolVar x, SymbolVar dy, Param param,
                                const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<PoolingBackward>(x.node(), dy.node(), param, config))
        ->output(0);
}

SymbolVar pooling_backward(SymbolVar x, SymbolVar dy, const PoolingParam& param) {
    return PoolingBackward::make(x, dy, param);
}

void PoolingBackward::init_output_dtypes() {
    const auto& p = m_param;
    if (p.window_h < 1 || p.window_w < 1 || p.stride_h < 1 || p.stride_w < 1 || p.pad_h < 0 ||
        p.pad_w < 0 || p.pad_h >= p.window_h || p.pad_w >= p.window_w)
        BRAID_THROW(ValueError,
                    "{}: windows and strides must be >= 1 and paddings in [0, window), got {}",
                    describe(), param_string());
    DType x = input(0)->dtype(), dy = input(1)->dtype();
    if (x != dy || !kern::is_dense_float(x))
        BRAID_THROW(DTypeError,
                    "{}: input and output gradient must share a float dtype (float32, float16 or "
                    "bfloat16), got {} and {}",
                    describe(), x.name(), dy.name());
    output(0)->set_dtype(x);
}

bool PoolingBackward::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    const auto &x = *ctx.shape(0), &dy = *ctx.shape(1);
    const auto& p = m_param;
    bool ok = x.ndim() == 4 && dy.ndim() == 4 && x[2] && x[3];
    if (ok) {
        size_t ph = x[2] + 2 * size_t(p.pad_h), pw = x[3] + 2 * size_t(p.pad_w);
        ok = ph >= size_t(p.window_h) && pw >= size_t(p.window_w) && dy[0] == x[0] &&
             dy[1] == x[1] && dy[2] == (ph - size_t(p.window_h)) / size_t(p.stride_h) + 1 &&
             dy[3] == (pw - size_t(p.window_w)) / size_t(p.stride_w) + 1;
    }
    if (!ok)
        BRAID_THROW(ShapeError, "{}: output gradient {} is not the pooling output shape of {}",
                    describe(), dy.to_string(), x.to_string());
    out[0] = x;
    return true;
}

namespace {

struct Geometry {
    ptrdiff_t h, w, oh, ow, kh, kw, sh, sw, ph, pw;
};

void max_plane(const Geometry& g, const float* x, const float* dy, float* dx) {
    for (ptrdiff_t i = 0; i < g.oh; ++i) {
        ptrdiff_t h0 = std::max<ptrdiff_t>(i * g.sh - g.ph, 0);
        ptrdiff_t h1 = std::min(i * g.sh - g.ph + g.kh, g.h);
        for (ptrdiff_t j = 0; j < g.ow; ++j) {
            ptrdiff_t w0 = std::max<ptrdiff_t>(j * g.sw - g.pw, 0);
            ptrdiff_t w1 = std::min(j * g.sw - g.pw + g.kw, g.w);
            // The forward's pick: the first largest, or the first NaN.
            ptrdiff_t best = h0 * g.w + w0;
            float m = x[best];
            for (ptrdiff_t a = h0; a < h1 && !std::isnan(m); ++a)
                for (ptrdiff_t b = w0; b < w1; ++b) {
                    float v = x[a * g.w + b];
                    if (v > m || std::isnan(v)) {
                        m = v;
                        best = a * g.w + b;
                        if (std::isnan(v)) break;
                    }
                }
            dx[best] += dy[i * g.ow + j];
        }
    }
}

void avg_plane(const Geometry& g, bool include_pad, const float* dy, float* dx) {
    float full = 1.f / float(g.kh * g.kw);
    for (ptrdiff_t i = 0; i < g.oh; ++i) {
        ptrdiff_t h0 = std::max<ptrdiff_t>(i * g.sh - g.ph, 0);
        ptrdiff_t h1 = std::min(i * g.sh - g.ph + g.kh, g.h);
        for (ptrdiff_t j = 0; j < g.ow; ++j) {
            ptrdiff_t w0 = std::max<ptrdiff_t>(j * g.sw - g.pw, 0);
            ptrdiff_t w1 = std::min(j * g.sw - g.pw + g.kw, g.w);
            float share =
                dy[i * g.ow + j] * (include_pad ? full : 1.f / float((h1 - h0) * (w1 - w0)));
            for (ptrdiff_t a = h0; a < h1; ++a)
                for (ptrdiff_t b = w0; b < w1; ++b) dx[a * g.w + b] += share;
        }
    }
}

} // namespace

void PoolingBackward::execute(ExecCtx& ctx) {
    Tensor x = kern::as_float32(ctx.input(0)), dy = kern::as_float32(ctx.input(1));
    Tensor& dx = ctx.output(0);
    if (dx.shape().is_empty()) return;
    Tensor dxf = kern::float32_target(dx);
    const auto &xs = x.shape(), &ys = dy.shape();
    const auto& p = m_param;
    Geometry g{ptrdiff_t(xs[2]), ptrdiff_t(xs[3]), ptrdiff_t(ys[2]), ptrdiff_t(ys[3]), p.window_h,
               p.window_w,       p.stride_h,       p.stride_w,       p.pad_h,          p.pad_w};
    size_t in_plane = xs[2] * xs[3], out_plane = ys[2] * ys[3];
    size_t work = out_plane * size_t(p.window_h * p.window_w) + in_plane;
    const float* xp = x.ptr<float>();
    const float* dyp = dy.ptr<float>();
    float* dxp = dxf.ptr<float>();
    bool is_max = p.mode == PoolMode::MAX;
    parallel_for(xs[0] * xs[1], std::max<size_t>(1, 16384 / work), [&](size_t begin, size_t end) {
        for (size_t plane = begin; plane < end; ++plane) {
            float* dxpl = dxp + plane * in_plane;
            std::memset(dxpl, 0, in_plane * sizeof(float));
            if (is_max)
                max_plane(g, xp + plane * in_plane, dyp + plane * out_plane, dxpl);
            else
                avg_plane(g, p.count_include_pad, dyp + plane * out_plane, dxpl);
        }
    });
    kern::store_float32(dxf, dx);
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

void register_pooling_backward_operators() {
    auto& reg = OperatorRegistry::instance();
    // Loaded by make(), which checks the params as Pooling's does, and that dy is the pooling
    // output of x.
    reg.add("PoolingBackward", "pooling_backward", dump_param<PoolingBackward>,
            load_param<PoolingBackward>);
    register_grad_rule("PoolingBackward", PoolingBackward::grad_rule);
}

} // namespace braid::opr
