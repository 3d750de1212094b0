#include "operators/conv.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "operators/conv_direct.h"
#include "operators/dense_kernels.h"
#include "operators/dnnl_kernels.h"
#include "operators/kernel_utils.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace braid::opr {

Conv2d::Conv2d(VarNode* x, VarNode* w, Param param, const OperatorConfig& config)
    : ParamOperator(param, config),
      m_constant_weights(std::make_shared<kern::DnnlConstantWeights>()) {
    add_input(x);
    add_input(w);
    add_output();
}

SymbolVar Conv2d::make(SymbolVar x, SymbolVar w, Param param, const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<Conv2d>(x.node(), w.node(), param, config))
        ->output(0);
}

SymbolVar conv2d(SymbolVar x, SymbolVar w, int stride, int padding, int dilation, int groups) {
    return Conv2d::make(x, w, {stride, stride, padding, padding, dilation, dilation, groups});
}

void check_conv2d_param(const Conv2dParam& p, const std::string& who) {
    if (p.stride_h < 1 || p.stride_w < 1)
        BRAID_THROW(ValueError, "{}: strides must be >= 1, got {}x{}", who, p.stride_h, p.stride_w);
    if (p.dilation_h < 1 || p.dilation_w < 1)
        BRAID_THROW(ValueError, "{}: dilations must be >= 1, got {}x{}", who, p.dilation_h,
                    p.dilation_w);
    if (p.pad_h < 0 || p.pad_w < 0)
        BRAID_THROW(ValueError, "{}: paddings must be >= 0, got {}x{}", who, p.pad_h, p.pad_w);
    if (p.groups < 1) BRAID_THROW(ValueError, "{}: groups must be >= 1, got {}", who, p.groups);
}

void Conv2d::init_output_dtypes() {
    // Params are checked here, the first step after the operator got its name.
    check_conv2d_param(m_param, describe());
    DType x = input(0)->dtype(), w = input(1)->dtype();
    if (x != w || !kern::is_dense_float(x))
        BRAID_THROW(DTypeError,
                    "{}: input and weight must share a float dtype (float32, float16 or "
                    "bfloat16), got {} and {}",
                    describe(), x.name(), w.name());
    output(0)->set_dtype(x);
}

bool Conv2d::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    out[0] = conv2d_output_shape(m_param, *ctx.shape(0), *ctx.shape(1), describe());
    return true;
}

TensorShape conv2d_output_shape(const Conv2dParam& p, const TensorShape& x, const TensorShape& w,
                                const std::string& who) {
    if (x.ndim() != 4 || w.ndim() != 4)
        BRAID_THROW(ShapeError, "{}: input must be 4-D NCHW and weight 4-D OIHW, got {} and {}",
                    who, x.to_string(), w.to_string());
    size_t groups = size_t(p.groups);
    if (x[1] != w[1] * groups)
        BRAID_THROW(ShapeError,
                    "{}: input {} has {} channels, weight {} expects {} ({} per group x {} "
                    "groups)",
                    who, x.to_string(), x[1], w.to_string(), w[1] * groups, w[1], groups);
    if (w[0] % groups != 0)
        BRAID_THROW(ShapeError, "{}: groups={} does not divide the {} output channels of weight {}",
                    who, groups, w[0], w.to_string());
    if (w[2] == 0 || w[3] == 0)
        BRAID_THROW(ShapeError, "{}: weight {} has an empty kernel", who, w.to_string());
    size_t ekh = size_t(p.dilation_h) * (w[2] - 1) + 1, ekw = size_t(p.dilation_w) * (w[3] - 1) + 1;
    size_t ph = x[2] + 2 * size_t(p.pad_h), pw = x[3] + 2 * size_t(p.pad_w);
    if (ekh > ph || ekw > pw)
        BRAID_THROW(ShapeError,
                    "{}: dilated kernel {}x{} of weight {} is larger than the padded input {}x{} "
                    "of {}",
                    who, ekh, ekw, w.to_string(), ph, pw, x.to_string());
    size_t oh = (ph - ekh) / size_t(p.stride_h) + 1, ow = (pw - ekw) / size_t(p.stride_w) + 1;
    size_t k = w[1] * w[2] * w[3];
    constexpr size_t int_max = size_t(std::numeric_limits<int>::max());
    if (k > int_max || oh * ow > int_max || w[0] > int_max)
        BRAID_THROW(ShapeError, "{}: {} with weight {} exceeds the BLAS size limit {}", who,
                    x.to_string(), w.to_string(), int_max);
    return TensorShape{x[0], w[0], oh, ow};
}

namespace {

//! Everything a conv task needs, in elements.
struct ConvGeometry {
    size_t n, c, h, w;        //!< input
    size_t o, kh, kw;         //!< weight
    size_t oh, ow;            //!< output spatial
    size_t groups, cg, og;    //!< groups, input and output channels per group
    size_t k, p;              //!< GEMM inner dim (cg·kh·kw) and output pixels (oh·ow)
    ptrdiff_t sh, sw, ph, pw; //!< stride, padding
    ptrdiff_t dh, dw;         //!< dilation
};

ptrdiff_t ceil_div(ptrdiff_t a, ptrdiff_t b) {
    return (a + b - 1) / b;
}

//! Writes the im2col columns of output pixels [p0, p1) of one group's input channels
//! `x` [cg, h, w] into `cols` [k, p1 - p0] (row r = (channel, kernel row, kernel column)).
void im2col_block(const ConvGeometry& g, const float* x, size_t p0, size_t p1, float* cols) {
    size_t width = p1 - p0;
    for (size_t c = 0; c < g.cg; ++c)
        for (size_t i = 0; i < g.kh; ++i)
            for (size_t j = 0; j < g.kw; ++j) {
                float* dst = cols + ((c * g.kh + i) * g.kw + j) * width;
                ptrdiff_t row_off = ptrdiff_t(i) * g.dh - g.ph;
                ptrdiff_t iw0 = ptrdiff_t(j) * g.dw - g.pw;
                // Output columns whose input column iw = ow·sw + iw0 lies in [0, w).
                ptrdiff_t lo = iw0 >= 0 ? 0 : ceil_div(-iw0, g.sw);
                ptrdiff_t hi = ptrdiff_t(g.w) - iw0 > 0 ? ceil_div(ptrdiff_t(g.w) - iw0, g.sw) : 0;
                hi = std::min(hi, ptrdiff_t(g.ow));
                lo = std::min(lo, hi);
                for (size_t p = p0; p < p1;) {
                    size_t oh = p / g.ow, ow_begin = p % g.ow;
                    size_t ow_end = std::min(g.ow, ow_begin + (p1 - p));
                    float* d = dst + (p - p0) - ow_begin;
                    ptrdiff_t ih = ptrdiff_t(oh) * g.sh + row_off;
                    if (ih < 0 || ih >= ptrdiff_t(g.h)) {
                        std::fill(d + ow_begin, d + ow_end, 0.f);
                    } else {
                        const float* src = x + (c * g.h + size_t(ih)) * g.w;
                        size_t a = std::clamp(size_t(lo), ow_begin, ow_end);
                        size_t b = std::clamp(size_t(hi), ow_begin, ow_end);
                        std::fill(d + ow_begin, d + a, 0.f);
                        if (g.sw == 1)
                            std::memcpy(d + a, src + ptrdiff_t(a) + iw0, (b - a) * sizeof(float));
                        else
                            for (size_t ow = a; ow < b; ++ow)
                                d[ow] = src[ptrdiff_t(ow) * g.sw + iw0];
                        std::fill(d + b, d + ow_end, 0.f);
                    }
                    p += ow_end - ow_begin;
                }
            }
}

//! Floats of im2col scratch per task (1 MiB), so a block's columns stay in L2 between im2col
//! and the GEMM that reads them. Measured on a 2 MiB-L2 core for 64x56x56, 3x3: 1 MiB blocks
//! run at the rate of the one large GEMM, 512 KiB ~5% and 128 KiB ~15% slower, unblocked ~25%.
constexpr size_t COLS_BLOCK_FLOATS = 256 * 1024;

} // namespace

void Conv2d::execute(ExecCtx& ctx) {
    Tensor x = kern::as_float32(ctx.input(0)), w = kern::as_float32(ctx.input(1));
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    Tensor yf = kern::float32_target(y);
    conv2d_float32(m_param, x, w, yf, ctx.workspace(),
                   kern::if_constant(*m_constant_weights, {input(1)}));
    kern::store_float32(yf, y);
}

size_t Conv2d::workspace_bytes() const {
    return conv2d_workspace(m_param, input(0)->shape(), input(1)->shape(), {});
}

void conv2d_float32(const Conv2dParam& param, const Tensor& x, const Tensor& w, Tensor& y,
                    Workspace& workspace, kern::DnnlConstantWeights* constant_weights) {
    kern::DnnlConvFusion fusion;
    fusion.constant_weights = constant_weights;
    if (!kern::dnnl_conv2d_forward(param, x, w, y, fusion, nullptr, workspace))
        conv2d_forward(param, x, w, y, nullptr, workspace);
}

namespace {

//! How conv2d_forward()'s im2col path splits a convolution: tasks of (batch item, group, block
//! of output pixels), each with `cols` floats of columns in its slice of the workspace.
struct Im2colSchedule {
    ConvGeometry g;
    bool pointwise = false; //!< 1x1, stride 1, no padding: one GEMM on x itself, no columns
    size_t items = 0, block = 0, nblocks = 0;
    size_t cols = 0;   //!< floats of one task's columns (0: pointwise)
    size_t slices = 0; //!< tasks that may run at once
    size_t workspace_bytes() const { return slices * Workspace::aligned(cols * sizeof(float)); }
};

Im2colSchedule im2col_schedule(const Conv2dParam& pr, const TensorShape& xs, const TensorShape& ws,
                               const TensorShape& ys) {
    Im2colSchedule sc;
    ConvGeometry& g = sc.g;
    g = {xs[0],
         xs[1],
         xs[2],
         xs[3],
         ws[0],
         ws[2],
         ws[3],
         ys[2],
         ys[3],
         size_t(pr.groups),
         ws[1],
         ws[0] / size_t(pr.groups),
         0,
         0,
         pr.stride_h,
         pr.stride_w,
         pr.pad_h,
         pr.pad_w,
         pr.dilation_h,
         pr.dilation_w};
    g.k = g.cg * g.kh * g.kw;
    g.p = g.oh * g.ow;
    sc.pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
    // The block is as wide as fits the scratch budget, and narrower when needed to give every
    // thread work, as long as each block stays worth its dispatch (PARALLEL_MIN_MACS).
    size_t threads = kernel_threads();
    size_t block = g.k ? std::max<size_t>(64, COLS_BLOCK_FLOATS / g.k) : g.p;
    sc.items = g.n * g.groups;
    size_t worth = size_t(PARALLEL_MIN_MACS / double(std::max<size_t>(g.og * g.k, 1)));
    if (sc.items < threads)
        block = std::min(block, std::max({size_t(64), g.p * sc.items / threads, worth}));
    sc.block = std::min(block, g.p);
    sc.nblocks = sc.block ? (g.p + sc.block - 1) / sc.block : 0;
    sc.cols = sc.pointwise ? 0 : g.k * sc.block;
    sc.slices = std::min(threads, sc.items * sc.nblocks);
    return sc;
}

} // namespace

size_t conv2d_forward_workspace(const Conv2dParam& param, const TensorShape& x,
                                const TensorShape& w) {
    TensorShape y = conv2d_output_shape(param, x, w, "conv2d_forward_workspace");
    if (y.is_empty() || conv_direct_applies(param, x, w)) return 0;
    return im2col_schedule(param, x, w, y).workspace_bytes();
}

size_t conv2d_workspace(const Conv2dParam& param, const TensorShape& x, const TensorShape& w,
                        const kern::DnnlConvFusion& fusion) {
    if (auto dnnl = kern::dnnl_conv2d_workspace(param, x, w, fusion)) return *dnnl;
    return conv2d_forward_workspace(param, x, w);
}

void conv2d_forward(const Conv2dParam& pr, const Tensor& x, const Tensor& w, Tensor& yf,
                    const ConvEpilogue* epilogue, Workspace& workspace) {
    if (yf.shape().is_empty()) return;
    if (conv_direct_forward(pr, x, w, yf, epilogue)) return;
    const Im2colSchedule sc = im2col_schedule(pr, x.shape(), w.shape(), yf.shape());
    const ConvGeometry& g = sc.g;
    const size_t block = sc.block, nblocks = sc.nblocks;
    uint8_t* base = workspace.get(sc.workspace_bytes());
    WorkspaceSlices slices(sc.slices);

    const float* xp = x.ptr<float>();
    const float* wp = w.ptr<float>();
    float* yp = yf.ptr<float>();
    kern::blas_single_thread();
    parallel_for(sc.items * nblocks, 1, [&](size_t begin, size_t end) {
        WorkspaceSlices::Claim slice(slices);
        auto* cols = reinterpret_cast<float*>(
            base + slice.index() * Workspace::aligned(sc.cols * sizeof(float)));
        for (size_t t = begin; t < end; ++t) {
            size_t item = t / nblocks, p0 = (t % nblocks) * block;
            size_t p1 = std::min(g.p, p0 + block);
            size_t n = item / g.groups, grp = item % g.groups;
            const float* xg = xp + (n * g.c + grp * g.cg) * g.h * g.w;
            float* yb = yp + (n * g.o + grp * g.og) * g.p + p0;
            const float* wg = wp + grp * g.og * g.k;
            if (sc.pointwise) {
                kern::sgemm(false, false, g.og, p1 - p0, g.k, 1.f, wg, g.k, xg + p0, g.p, 0.f, yb,
                            g.p);
            } else {
                im2col_block(g, xg, p0, p1, cols);
                kern::sgemm(false, false, g.og, p1 - p0, g.k, 1.f, wg, g.k, cols, p1 - p0, 0.f, yb,
                            g.p);
            }
            if (epilogue) (*epilogue)(yb, grp * g.og, g.og, p1 - p0, g.p);
        }
    });
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_conv_kernels();
}
#endif

void register_conv_operators() {
    auto& reg = OperatorRegistry::instance();
    // Loaded by make(), which refuses strides, dilations or groups below 1 and negative
    // paddings (ValueError naming the operator), and geometry that does not fit the inputs
    // (ShapeError).
    reg.add("Conv2d", "conv", dump_param<Conv2d>, load_param<Conv2d>);
    register_grad_rule("Conv2d", Conv2d::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_conv_kernels(); // operators/cuda/conv.cpp
#endif
}

} // namespace braid::opr
