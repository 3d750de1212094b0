#include "operators/conv_backward.h"
#include "graph/operator_registry.h"

#include "base/error.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "operators/dense_kernels.h"
#include "operators/kernel_utils.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

namespace braid::opr {

namespace {

void check_conv_param(const OperatorNode& opr, const Conv2dParam& p) {
    if (p.stride_h < 1 || p.stride_w < 1)
        BRAID_THROW(ValueError, "{}: strides must be >= 1, got {}x{}", opr.describe(), p.stride_h,
                    p.stride_w);
    if (p.dilation_h < 1 || p.dilation_w < 1)
        BRAID_THROW(ValueError, "{}: dilations must be >= 1, got {}x{}", opr.describe(),
                    p.dilation_h, p.dilation_w);
    if (p.pad_h < 0 || p.pad_w < 0)
        BRAID_THROW(ValueError, "{}: paddings must be >= 0, got {}x{}", opr.describe(), p.pad_h,
                    p.pad_w);
    if (p.groups < 1)
        BRAID_THROW(ValueError, "{}: groups must be >= 1, got {}", opr.describe(), p.groups);
}

void check_float_pair(OperatorNode& opr, const char* a, const char* b) {
    DType da = opr.input(0)->dtype(), db = opr.input(1)->dtype();
    if (da != db || !kern::is_dense_float(da))
        BRAID_THROW(DTypeError,
                    "{}: {} and {} must share a float dtype (float32, float16 or bfloat16), got "
                    "{} and {}",
                    opr.describe(), a, b, da.name(), db.name());
    opr.output(0)->set_dtype(da);
}

//! The forward output size along one spatial dim, or 0 when the dilated kernel does not fit.
size_t conv_out_size(size_t in, size_t kernel, int stride, int pad, int dilation) {
    size_t ek = size_t(dilation) * (kernel - 1) + 1, padded = in + 2 * size_t(pad);
    if (kernel == 0 || ek > padded) return 0;
    return (padded - ek) / size_t(stride) + 1;
}

//! A spatial size as the params store it (32 bits); ValueError naming the operator if larger.
uint32_t spatial_size(size_t v, const char* name, SymbolVar input, const char* type) {
    if (v > std::numeric_limits<uint32_t>::max())
        BRAID_THROW(ValueError, "{} of \"{}\": {} is {}; at most {} is supported", type,
                    input.node()->name(), name, v, std::numeric_limits<uint32_t>::max());
    return uint32_t(v);
}

//! Everything a task needs, in elements (x side: c, h, w; dy side: o, oh, ow).
struct Geometry {
    size_t n, c, h, w;
    size_t o, kh, kw;
    size_t oh, ow;
    size_t groups, cg, og;
    size_t k, p; //!< GEMM inner dim (cg·kh·kw) and output pixels (oh·ow)
    ptrdiff_t sh, sw, ph, pw, dh, dw;

    Geometry(const TensorShape& xs, const TensorShape& ws, const TensorShape& ys,
             const Conv2dParam& pr)
        : n(xs[0]), c(xs[1]), h(xs[2]), w(xs[3]), o(ws[0]), kh(ws[2]), kw(ws[3]), oh(ys[2]),
          ow(ys[3]), groups(size_t(pr.groups)), cg(ws[1]), og(ws[0] / size_t(pr.groups)),
          k(cg * kh * kw), p(oh * ow), sh(pr.stride_h), sw(pr.stride_w), ph(pr.pad_h), pw(pr.pad_w),
          dh(pr.dilation_h), dw(pr.dilation_w) {}

    bool direct() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
    //! Output pixels per block: the columns of one block fit the scratch budget.
    size_t block() const { return std::min(p, k ? std::max<size_t>(64, (256 * 1024) / k) : p); }
};

/*!
 * How Conv2dBackwardData splits its work: tasks of (item, block of input channels). Items
 * (batch item, group) write disjoint slices of dx, and so do an item's blocks of channels:
 * their rows of the columns fold back onto their own channels alone. An item splits into as
 * many blocks as give every thread a task (a batch of one: a detector's upsampling ran its
 * col2im on one thread), each at least PARALLEL_MIN_MACS of work. Where that leaves fewer tasks
 * than threads, they run one at a time with each GEMM split across the pool. Each task that
 * may run at once has a slice of the workspace for its columns.
 */
struct BackwardDataSchedule {
    size_t per_item = 1, tasks = 0;
    bool parallel_tasks = false;
    size_t cols = 0;   //!< floats of one task's columns (0: a 1x1 GEMM straight into dx)
    size_t slices = 1; //!< tasks that may run at once

    explicit BackwardDataSchedule(const Geometry& g) {
        size_t threads = kernel_threads(), items = g.n * g.groups;
        double item_macs = double(g.og) * double(g.k) * double(g.p);
        if (items < threads)
            per_item = std::min({(threads + items - 1) / items, g.cg,
                                 std::max<size_t>(1, size_t(item_macs / PARALLEL_MIN_MACS))});
        per_item = std::max<size_t>(per_item, 1);
        tasks = items * per_item;
        parallel_tasks = tasks >= threads;
        size_t most_channels = (g.cg + per_item - 1) / per_item;
        cols = g.direct() ? 0 : most_channels * g.kh * g.kw * g.block();
        slices = parallel_tasks ? std::min(threads, tasks) : 1;
    }
    size_t slice_bytes() const { return Workspace::aligned(cols * sizeof(float)); }
    size_t workspace_bytes() const { return slices * slice_bytes(); }
};

//! Calls fn(row, c, p, ih, iw) for every column element of input channels [c0, c1) and
//! pixels [p0, p1) whose input position lies inside the image (row = ((c - c0)·kh + i)·kw + j).
//! The output position advances without a division per element (two per element made the
//! transposed convolution's col2im several times slower than its GEMM).
template <typename Fn>
void for_each_col(const Geometry& g, size_t c0, size_t c1, size_t p0, size_t p1, Fn&& fn) {
    const ptrdiff_t h = ptrdiff_t(g.h), w = ptrdiff_t(g.w);
    for (size_t c = c0; c < c1; ++c)
        for (size_t i = 0; i < g.kh; ++i)
            for (size_t j = 0; j < g.kw; ++j) {
                size_t row = ((c - c0) * g.kh + i) * g.kw + j;
                size_t ox = p0 % g.ow;
                ptrdiff_t ih = ptrdiff_t(p0 / g.ow) * g.sh - g.ph + ptrdiff_t(i) * g.dh;
                const ptrdiff_t iw0 = -g.pw + ptrdiff_t(j) * g.dw;
                for (size_t p = p0; p < p1; ++p) {
                    ptrdiff_t iw = ptrdiff_t(ox) * g.sw + iw0;
                    if (ih >= 0 && ih < h && iw >= 0 && iw < w)
                        fn(row, c, p, size_t(ih), size_t(iw));
                    if (++ox == g.ow) {
                        ox = 0;
                        ih += g.sh;
                    }
                }
            }
}

//! cols [k, p1 - p0] = the im2col columns of one group's input channels `x` [cg, h, w].
void im2col(const Geometry& g, const float* x, size_t p0, size_t p1, float* cols) {
    size_t width = p1 - p0;
    std::fill(cols, cols + g.k * width, 0.f);
    for_each_col(g, 0, g.cg, p0, p1, [&](size_t row, size_t c, size_t p, size_t ih, size_t iw) {
        cols[row * width + p - p0] = x[(c * g.h + ih) * g.w + iw];
    });
}

//! dx [cg, h, w] += the columns `cols` [(c1 - c0)·kh·kw, p1 - p0] of channels [c0, c1) folded
//! back onto the image.
void col2im(const Geometry& g, const float* cols, size_t c0, size_t c1, size_t p0, size_t p1,
            float* dx) {
    size_t width = p1 - p0;
    if (g.kh <= size_t(g.sh) && g.kw <= size_t(g.sw) && g.ph == 0 && g.pw == 0 && g.dh == 1 &&
        g.dw == 1) {
        // Windows that do not overlap and lie inside the image (a transposed convolution's
        // 2x2/2 upsampling): each column element has its own output, no bounds to check; one
        // division per output row segment instead of the general walk (the text detector's
        // two upsamplings 0.86 -> 0.52 ms on one thread).
        for (size_t c = c0; c < c1; ++c)
            for (size_t i = 0; i < g.kh; ++i)
                for (size_t j = 0; j < g.kw; ++j) {
                    const float* src = cols + (((c - c0) * g.kh + i) * g.kw + j) * width;
                    for (size_t p = p0; p < p1;) {
                        size_t oy = p / g.ow, ox = p % g.ow, seg = std::min(p1 - p, g.ow - ox);
                        float* dst =
                            dx + (c * g.h + oy * size_t(g.sh) + i) * g.w + ox * size_t(g.sw) + j;
                        const float* s = src + (p - p0);
                        for (size_t x = 0; x < seg; ++x) dst[x * size_t(g.sw)] += s[x];
                        p += seg;
                    }
                }
        return;
    }
    for_each_col(g, c0, c1, p0, p1, [&](size_t row, size_t c, size_t p, size_t ih, size_t iw) {
        dx[(c * g.h + ih) * g.w + iw] += cols[row * width + p - p0];
    });
}

using Gemm = void (*)(bool, bool, size_t, size_t, size_t, float, const float*, size_t, const float*,
                      size_t, float, float*, size_t);

} // namespace

// ---------------------------------------------------------------- Conv2dBackwardData
Conv2dBackwardData::Conv2dBackwardData(VarNode* w, VarNode* dy, Param param,
                                       const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(w);
    add_input(dy);
    add_output();
}

SymbolVar Conv2dBackwardData::make(SymbolVar w, SymbolVar dy, Param param,
                                   const OperatorConfig& config) {
    return w.graph()
        .insert_opr(std::make_unique<Conv2dBackwardData>(w.node(), dy.node(), param, config))
        ->output(0);
}

SymbolVar conv2d_backward_data(SymbolVar w, SymbolVar dy, const Conv2dParam& param, size_t in_h,
                               size_t in_w) {
    return Conv2dBackwardData::make(w, dy,
                                    {param, spatial_size(in_h, "in_h", w, "Conv2dBackwardData"),
                                     spatial_size(in_w, "in_w", w, "Conv2dBackwardData")});
}

void Conv2dBackwardData::init_output_dtypes() {
    check_conv_param(*this, m_param.conv);
    check_float_pair(*this, "weight", "output gradient");
}

bool Conv2dBackwardData::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    const auto &w = *ctx.shape(0), &dy = *ctx.shape(1);
    const auto& p = m_param.conv;
    size_t groups = size_t(p.groups);
    if (w.ndim() != 4 || dy.ndim() != 4)
        BRAID_THROW(ShapeError,
                    "{}: weight must be 4-D OIHW and output gradient 4-D NCHW, got {} and {}",
                    describe(), w.to_string(), dy.to_string());
    size_t oh = conv_out_size(m_param.in_h, w[2], p.stride_h, p.pad_h, p.dilation_h);
    size_t ow = conv_out_size(m_param.in_w, w[3], p.stride_w, p.pad_w, p.dilation_w);
    if (w[0] != dy[1] || w[0] % groups != 0 || oh == 0 || ow == 0 || dy[2] != oh || dy[3] != ow)
        BRAID_THROW(ShapeError,
                    "{}: output gradient {} does not fit weight {} on a {}x{} input (expected "
                    "{{N,{},{},{}}})",
                    describe(), dy.to_string(), w.to_string(), m_param.in_h, m_param.in_w, w[0], oh,
                    ow);
    out[0] = TensorShape{dy[0], w[1] * groups, m_param.in_h, m_param.in_w};
    return true;
}

size_t Conv2dBackwardData::workspace_bytes() const {
    const TensorShape& dx = output(0)->shape();
    if (dx.is_empty()) return 0;
    return BackwardDataSchedule(Geometry(dx, input(0)->shape(), input(1)->shape(), m_param.conv))
        .workspace_bytes();
}

void Conv2dBackwardData::execute(ExecCtx& ctx) {
    Tensor w = kern::as_float32(ctx.input(0)), dy = kern::as_float32(ctx.input(1));
    Tensor& dx = ctx.output(0);
    if (dx.shape().is_empty()) return;
    Tensor dxf = kern::float32_target(dx);
    Geometry g(dxf.shape(), w.shape(), dy.shape(), m_param.conv);
    float* dxp = dxf.ptr<float>();
    std::memset(dxp, 0, dxf.shape().total_nr_elems() * sizeof(float));
    const float* wp = w.ptr<float>();
    const float* dyp = dy.ptr<float>();
    const BackwardDataSchedule sc(g);
    const size_t block = g.block(), per_item = sc.per_item;
    uint8_t* base = ctx.workspace().get(sc.workspace_bytes());
    WorkspaceSlices slices(sc.slices);
    kern::blas_single_thread();
    Gemm gemm = sc.parallel_tasks ? &kern::sgemm : &kern::sgemm_parallel;
    auto run_task = [&](size_t task, float* cols) {
        size_t item = task / per_item, part = task % per_item;
        size_t c0 = g.cg * part / per_item, c1 = g.cg * (part + 1) / per_item;
        size_t n = item / g.groups, grp = item % g.groups, rows = (c1 - c0) * g.kh * g.kw;
        const float* wg = wp + grp * g.og * g.k + c0 * g.kh * g.kw; // columns of w_g [og, k]
        const float* dyg = dyp + (n * g.o + grp * g.og) * g.p;
        float* dxg = dxp + (n * g.c + grp * g.cg) * g.h * g.w;
        if (g.direct()) {
            gemm(true, false, rows, g.p, g.og, 1.f, wg, g.k, dyg, g.p, 0.f, dxg + c0 * g.p, g.p);
            return;
        }
        for (size_t p0 = 0; p0 < g.p; p0 += block) {
            size_t p1 = std::min(g.p, p0 + block), width = p1 - p0;
            gemm(true, false, rows, width, g.og, 1.f, wg, g.k, dyg + p0, g.p, 0.f, cols, width);
            col2im(g, cols, c0, c1, p0, p1, dxg);
        }
    };
    auto slice_of = [&](const WorkspaceSlices::Claim& claim) {
        return reinterpret_cast<float*>(base + claim.index() * sc.slice_bytes());
    };
    if (sc.parallel_tasks) {
        parallel_for(sc.tasks, 1, [&](size_t b, size_t e) {
            WorkspaceSlices::Claim claim(slices);
            for (size_t task = b; task < e; ++task) run_task(task, slice_of(claim));
        });
    } else {
        WorkspaceSlices::Claim claim(slices);
        for (size_t task = 0; task < sc.tasks; ++task) run_task(task, slice_of(claim));
    }
    kern::store_float32(dxf, dx);
}

// ---------------------------------------------------------------- Conv2dBackwardFilter
Conv2dBackwardFilter::Conv2dBackwardFilter(VarNode* x, VarNode* dy, Param param,
                                           const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(x);
    add_input(dy);
    add_output();
}

SymbolVar Conv2dBackwardFilter::make(SymbolVar x, SymbolVar dy, Param param,
                                     const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<Conv2dBackwardFilter>(x.node(), dy.node(), param, config))
        ->output(0);
}

SymbolVar conv2d_backward_filter(SymbolVar x, SymbolVar dy, const Conv2dParam& param,
                                 size_t kernel_h, size_t kernel_w) {
    return Conv2dBackwardFilter::make(
        x, dy,
        {param, spatial_size(kernel_h, "kernel_h", x, "Conv2dBackwardFilter"),
         spatial_size(kernel_w, "kernel_w", x, "Conv2dBackwardFilter")});
}

void Conv2dBackwardFilter::init_output_dtypes() {
    check_conv_param(*this, m_param.conv);
    check_float_pair(*this, "input", "output gradient");
}

bool Conv2dBackwardFilter::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    const auto &x = *ctx.shape(0), &dy = *ctx.shape(1);
    const auto& p = m_param.conv;
    size_t groups = size_t(p.groups);
    if (x.ndim() != 4 || dy.ndim() != 4)
        BRAID_THROW(ShapeError,
                    "{}: input must be 4-D NCHW and output gradient 4-D NCHW, got {} and {}",
                    describe(), x.to_string(), dy.to_string());
    size_t oh = conv_out_size(x[2], m_param.kernel_h, p.stride_h, p.pad_h, p.dilation_h);
    size_t ow = conv_out_size(x[3], m_param.kernel_w, p.stride_w, p.pad_w, p.dilation_w);
    if (x[0] != dy[0] || x[1] % groups != 0 || dy[1] % groups != 0 || oh == 0 || ow == 0 ||
        dy[2] != oh || dy[3] != ow)
        BRAID_THROW(ShapeError,
                    "{}: output gradient {} does not fit input {} with a {}x{} kernel and "
                    "groups={} (expected {{{},O,{},{}}})",
                    describe(), dy.to_string(), x.to_string(), m_param.kernel_h, m_param.kernel_w,
                    groups, x[0], oh, ow);
    out[0] = TensorShape{dy[1], x[1] / groups, m_param.kernel_h, m_param.kernel_w};
    return true;
}

void Conv2dBackwardFilter::execute(ExecCtx& ctx) {
    Tensor x = kern::as_float32(ctx.input(0)), dy = kern::as_float32(ctx.input(1));
    Tensor& dw = ctx.output(0);
    if (dw.shape().is_empty()) return;
    Tensor dwf = kern::float32_target(dw);
    Geometry g(x.shape(), dwf.shape(), dy.shape(), m_param.conv);
    float* dwp = dwf.ptr<float>();
    std::memset(dwp, 0, dwf.shape().total_nr_elems() * sizeof(float));
    const float* xp = x.ptr<float>();
    const float* dyp = dy.ptr<float>();
    size_t block = g.block();
    std::vector<float> cols(g.direct() ? 0 : g.k * block);
    kern::blas_single_thread();
    // dw_g [og, k] += dy_g [og, pixels] · cols [k, pixels]^T, accumulated over the batch; each
    // GEMM is split across the pool.
    for (size_t n = 0; n < g.n; ++n)
        for (size_t grp = 0; grp < g.groups; ++grp) {
            const float* xg = xp + (n * g.c + grp * g.cg) * g.h * g.w;
            const float* dyg = dyp + (n * g.o + grp * g.og) * g.p;
            float* dwg = dwp + grp * g.og * g.k;
            if (g.direct()) {
                kern::sgemm_parallel(false, true, g.og, g.k, g.p, 1.f, dyg, g.p, xg, g.p, 1.f, dwg,
                                     g.k);
                continue;
            }
            for (size_t p0 = 0; p0 < g.p; p0 += block) {
                size_t p1 = std::min(g.p, p0 + block), width = p1 - p0;
                im2col(g, xg, p0, p1, cols.data());
                kern::sgemm_parallel(false, true, g.og, g.k, width, 1.f, dyg + p0, g.p, cols.data(),
                                     width, 1.f, dwg, g.k);
            }
        }
    kern::store_float32(dwf, dw);
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_conv_grad_kernels();
}
#endif

void register_conv_backward_operators() {
    auto& reg = OperatorRegistry::instance();
    // Loaded by make(). Spatial sizes are fields of 32 bits, so no size computed from them
    // overflows; make() checks that they fit the kernel and the output gradient.
    reg.add("Conv2dBackwardData", "conv_backward", dump_param<Conv2dBackwardData>,
            load_param<Conv2dBackwardData>);
    reg.add("Conv2dBackwardFilter", "conv_backward", dump_param<Conv2dBackwardFilter>,
            load_param<Conv2dBackwardFilter>);
    register_grad_rule("Conv2dBackwardData", Conv2dBackwardData::grad_rule);
    register_grad_rule("Conv2dBackwardFilter", Conv2dBackwardFilter::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_conv_grad_kernels(); // operators/cuda/conv_backward.cpp
#endif
}

} // namespace braid::opr
