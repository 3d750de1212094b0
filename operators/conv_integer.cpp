#include "operators/conv_integer.h"
#include "graph/operator_registry.h"

#include "base/error.h"
#include "base/thread_pool.h"
#include "operators/dnnl_kernels.h"
#include "operators/io.h"
#include "operators/kernel_utils.h"
#include "operators/tensor_manip.h"

#include <algorithm>
#include <mutex>

namespace braid::opr {

namespace {

bool is_8bit(DType dt) {
    return dt == dtype::Uint8() || dt == dtype::Int8();
}

//! Element i of an 8-bit tensor.
int32_t element(const Tensor& t, size_t i) {
    return t.dtype() == dtype::Uint8() ? int32_t(t.ptr<uint8_t>()[i]) : int32_t(t.ptr<int8_t>()[i]);
}

//! The shift that takes w's dtype to int8: -128 for uint8, none for int8.
int32_t weight_shift(DType w) {
    return w == dtype::Uint8() ? 128 : 0;
}

//! uint8 weights minus 128, as int8.
Tensor shifted_to_int8(const Tensor& w) {
    Tensor s(w.shape(), dtype::Int8());
    const uint8_t* in = w.ptr<uint8_t>();
    int8_t* out = s.ptr<int8_t>();
    for (size_t i = 0, n = w.shape().total_nr_elems(); i < n; ++i) out[i] = int8_t(in[i] - 128);
    return s;
}

//! out[i] = float(t[first + i] - z) for i < n, from an 8-bit tensor.
void to_float(const Tensor& t, size_t first, size_t n, int32_t z, float* out) {
    auto run = [&](const auto* in) {
        for (size_t i = 0; i < n; ++i) out[i] = float(int32_t(in[first + i]) - z);
    };
    if (t.dtype() == dtype::Uint8())
        run(t.ptr<uint8_t>());
    else
        run(t.ptr<int8_t>());
}

//! IntegerConvGeometry of one integer convolution, in elements.
struct IntegerConvGeometry {
    size_t n, c, h, w, o, kh, kw, oh, ow, groups, cg, og;
    ptrdiff_t sh, sw, ph, pw, dh, dw;
};

IntegerConvGeometry geometry_of(const Conv2dParam& p, const TensorShape& xs, const TensorShape& ws,
                                const TensorShape& ys) {
    size_t groups = size_t(p.groups);
    return {xs[0],      xs[1],      xs[2],   xs[3],   ws[0],        ws[2],
            ws[3],      ys[2],      ys[3],   groups,  ws[1],        ws[0] / groups,
            p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w};
}

// The loops of add_window_sums(), compiled for AVX2 too (int32 products need SSE4.1).
template <typename T> BRAID_SIMD_CLONES void add_to(int32_t* sum, const T* v, size_t n) {
    for (size_t i = 0; i < n; ++i) sum[i] += int32_t(v[i]);
}

BRAID_SIMD_CLONES void add_scaled(int32_t* out, const int32_t* s, size_t n, int32_t a) {
    for (size_t i = 0; i < n; ++i) out[i] += a * s[i];
}

//! low = (x + move) & 127, high = (x + move) >> 7, bytewise (move: 128 takes int8 to uint8).
BRAID_SIMD_CLONES void split_bytes(const uint8_t* x, uint8_t* low, uint8_t* high, size_t n,
                                   uint8_t move) {
    for (size_t i = 0; i < n; ++i) {
        uint8_t v = uint8_t(x[i] + move);
        low[i] = v & 127;
        high[i] = v >> 7;
    }
}

//! Pixels per task of the channel sums.
constexpr size_t SUM_BLOCK = 4096;

/*!
 * Adds corr[o] * s[n, g, p] to y[n, o, p] for each output channel o of group g, where
 * s[n, g, p] is the sum of (x - xz) over output pixel p's window (its positions inside the
 * input) and group g's channels.
 */
void add_window_sums(const IntegerConvGeometry& g, const Tensor& x, int32_t xz,
                     const std::vector<int32_t>& corr, Tensor& y) {
    size_t plane = g.h * g.w, out_plane = g.oh * g.ow;
    // t[n, g, pixel] = sum over the group's channels of (x - xz), in blocks of pixels.
    std::vector<int32_t> t(g.n * g.groups * plane);
    size_t blocks = (plane + SUM_BLOCK - 1) / SUM_BLOCK;
    parallel_range(g.n * g.groups * blocks, g.cg * SUM_BLOCK, [&](size_t begin, size_t end) {
        for (size_t task = begin; task < end; ++task) {
            size_t item = task / blocks, p0 = task % blocks * SUM_BLOCK;
            size_t len = std::min(plane, p0 + SUM_BLOCK) - p0;
            int32_t* sum = t.data() + item * plane + p0;
            std::fill(sum, sum + len, -int32_t(g.cg) * xz);
            for (size_t c = 0; c < g.cg; ++c) {
                size_t at = (item * g.cg + c) * plane + p0;
                if (x.dtype() == dtype::Int8())
                    add_to(sum, x.ptr<int8_t>() + at, len);
                else
                    add_to(sum, x.ptr<uint8_t>() + at, len);
            }
        }
    });
    // Per output row: the window sums of its pixels, then corr[o] times them into each channel.
    int32_t* yp = y.ptr<int32_t>();
    parallel_range(
        g.n * g.groups * g.oh, g.ow * (g.kh * g.kw + g.og), [&](size_t begin, size_t end) {
            std::vector<int32_t> s(g.ow);
            for (size_t r = begin; r < end; ++r) {
                size_t item = r / g.oh, oh = r % g.oh;
                const int32_t* sum = t.data() + item * plane;
                std::fill(s.begin(), s.end(), 0);
                for (size_t i = 0; i < g.kh; ++i) {
                    ptrdiff_t ih = ptrdiff_t(oh) * g.sh - g.ph + ptrdiff_t(i) * g.dh;
                    if (ih < 0 || ih >= ptrdiff_t(g.h)) continue;
                    const int32_t* row = sum + size_t(ih) * g.w;
                    for (size_t j = 0; j < g.kw; ++j) {
                        ptrdiff_t off = ptrdiff_t(j) * g.dw - g.pw; // iw = ow * sw + off
                        // Output columns whose input column lies in [0, w).
                        ptrdiff_t lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
                        ptrdiff_t hi =
                            ptrdiff_t(g.w) - off > 0 ? (ptrdiff_t(g.w) - off + g.sw - 1) / g.sw : 0;
                        hi = std::min(hi, ptrdiff_t(g.ow));
                        if (lo >= hi) continue;
                        if (g.sw == 1)
                            add_to(s.data() + lo, row + lo + off, size_t(hi - lo));
                        else
                            for (ptrdiff_t ow = lo; ow < hi; ++ow)
                                s[size_t(ow)] += row[ow * g.sw + off];
                    }
                }
                size_t n = item / g.groups, grp = item % g.groups;
                for (size_t o = grp * g.og; o < (grp + 1) * g.og; ++o)
                    if (corr[o] != 0)
                        add_scaled(yp + (n * g.o + o) * out_plane + oh * g.ow, s.data(), g.ow,
                                   corr[o]);
            }
        });
}

} // namespace

ConvInteger::ConvInteger(VarNode* x, VarNode* w, VarNode* x_zero_point, VarNode* w_zero_point,
                         Param param, const OperatorConfig& config)
    : ParamOperator(param, config),
      m_constant_weights(std::make_shared<kern::DnnlConstantWeights>()) {
    add_input(x);
    add_input(w);
    add_input(x_zero_point);
    add_input(w_zero_point);
    add_output();
}

SymbolVar ConvInteger::make(SymbolVar x, SymbolVar w, SymbolVar x_zero_point,
                            SymbolVar w_zero_point, Param param, const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<ConvInteger>(x.node(), w.node(), x_zero_point.node(),
                                                  w_zero_point.node(), param, config))
        ->output(0);
}

void ConvInteger::init_output_dtypes() {
    check_conv2d_param(m_param, describe());
    DType x = input(0)->dtype(), w = input(1)->dtype();
    if (!is_8bit(x) || !is_8bit(w))
        BRAID_THROW(DTypeError, "{}: input and weight must be uint8 or int8, got {} and {}",
                    describe(), x.name(), w.name());
    DType xz = input(2)->dtype(), wz = input(3)->dtype();
    if (xz != x || wz != w)
        BRAID_THROW(DTypeError,
                    "{}: zero points must have their tensor's dtype: input {} with zero point "
                    "{}, weight {} with zero point {}",
                    describe(), x.name(), xz.name(), w.name(), wz.name());
    output(0)->set_dtype(dtype::Int32());
}

bool ConvInteger::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    for (size_t i = 0; i < 4; ++i)
        if (!ctx.shape(i)) return false;
    const TensorShape &w = *ctx.shape(1), &xz = *ctx.shape(2), &wz = *ctx.shape(3);
    out[0] = conv2d_output_shape(m_param, *ctx.shape(0), w, describe());
    if (xz.total_nr_elems() != 1)
        BRAID_THROW(ShapeError, "{}: the input's zero point must have one element, got {}",
                    describe(), xz.to_string());
    if (wz.total_nr_elems() != 1 && !(wz.ndim() == 1 && wz[0] == w[0]))
        BRAID_THROW(ShapeError,
                    "{}: the weight's zero point must have one element or one per output "
                    "channel ({}), got {}",
                    describe(), w[0], wz.to_string());
    if (w[2] * w[3] > EXACT_INT8_TERMS)
        BRAID_THROW(ShapeError,
                    "{}: a {}x{} window has {} elements; integer convolutions are computed "
                    "exactly for windows of up to {}",
                    describe(), w[2], w[3], w[2] * w[3], EXACT_INT8_TERMS);
    return true;
}

void ConvInteger::execute(ExecCtx& ctx) {
    const Tensor &x = ctx.input(0), &w = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    int32_t xz = element(ctx.input(2), 0);
    const Tensor& wz = ctx.input(3);
    std::vector<int32_t> wzs(w.shape()[0]);
    for (size_t o = 0; o < wzs.size(); ++o)
        wzs[o] = element(wz, wz.shape().total_nr_elems() == 1 ? 0 : o);
    if (!execute_int8(x, w, xz, wzs, y, ctx.workspace()))
        execute_float32(x, w, xz, wzs, y, ctx.workspace());
}

size_t ConvInteger::workspace_bytes() const {
    // oneDNN's kernel on the whole source, or (without exact int8 sums) on its halves.
    const auto &x = input(0)->shape(), &w = input(1)->shape();
    DType xd = input(0)->dtype();
    size_t whole = kern::dnnl_conv_integer_workspace(m_param, x, xd, w);
    return whole ? whole : kern::dnnl_conv_integer_workspace(m_param, x, xd, w, true);
}

bool ConvInteger::execute_int8(const Tensor& x, const Tensor& w, int32_t xz,
                               const std::vector<int32_t>& wz, Tensor& y, Workspace& workspace) {
    if (!kern::dnnl_conv_enabled()) return false;
    int32_t shift = weight_shift(w.dtype());
    // The weights as int8: uint8 ones shifted (kept while they are constants).
    Tensor w8 = w;
    kern::DnnlConstantWeights* kept = kern::if_constant(*m_constant_weights, {input(1)});
    if (shift) {
        if (kept) {
            static std::mutex mutex;
            std::lock_guard lock(mutex);
            if (!m_shifted_weights.raw_ptr()) m_shifted_weights = shifted_to_int8(w);
            w8 = m_shifted_weights;
        } else {
            w8 = shifted_to_int8(w);
        }
    }
    if (!kern::dnnl_conv_integer_forward(m_param, x, w8, xz, y, kept, workspace) &&
        !conv_in_halves(x, w8, xz, y, kept, workspace))
        return false;
    // y holds sum (x - xz)(w - shift); the true sums add (shift - wz) * sum (x - xz).
    std::vector<int32_t> corr(wz.size());
    bool any = false;
    for (size_t o = 0; o < wz.size(); ++o) any |= (corr[o] = shift - wz[o]) != 0;
    if (any) add_window_sums(geometry_of(m_param, x.shape(), w.shape(), y.shape()), x, xz, corr, y);
    return true;
}

bool ConvInteger::conv_in_halves(const Tensor& x, const Tensor& w8, int32_t xz, Tensor& y,
                                 kern::DnnlConstantWeights* kept, Workspace& workspace) {
    // x as uint8 (int8 moved up by 128, its zero point too), split into its low 7 bits and
    // its top bit: x = low + 128 * high.
    size_t n = x.shape().total_nr_elems();
    Tensor low(x.shape(), dtype::Uint8()), high(x.shape(), dtype::Uint8());
    int32_t move = x.dtype() == dtype::Int8() ? 128 : 0;
    split_bytes(static_cast<const uint8_t*>(x.raw_ptr()), low.ptr<uint8_t>(), high.ptr<uint8_t>(),
                n, uint8_t(move));
    // sum (x - xz) w = sum (low - xz) w + 128 * sum high * w.
    if (!kern::dnnl_conv_integer_forward(m_param, low, w8, xz + move, y, kept, workspace, true))
        return false;
    Tensor upper(y.shape(), dtype::Int32());
    if (!kern::dnnl_conv_integer_forward(m_param, high, w8, 0, upper, kept, workspace, true))
        return false;
    size_t m = y.shape().total_nr_elems();
    parallel_range((m + SUM_BLOCK - 1) / SUM_BLOCK, SUM_BLOCK, [&](size_t begin, size_t end) {
        size_t first = begin * SUM_BLOCK, last = std::min(m, end * SUM_BLOCK);
        add_scaled(y.ptr<int32_t>() + first, upper.ptr<int32_t>() + first, last - first, 128);
    });
    return true;
}

void ConvInteger::execute_float32(const Tensor& x, const Tensor& w, int32_t xz,
                                  const std::vector<int32_t>& wz, Tensor& y, Workspace& workspace) {
    IntegerConvGeometry g = geometry_of(m_param, x.shape(), w.shape(), y.shape());
    size_t window = g.kh * g.kw, plane = g.h * g.w, out_plane = g.oh * g.ow;
    // One convolution of all channels where its sums are exact, else per group one per chunk
    // of the group's input channels.
    bool whole = g.cg * window <= EXACT_INT8_TERMS;
    size_t chunk = whole ? g.cg : EXACT_INT8_TERMS / window;
    Conv2dParam p = m_param;
    p.exact = true;
    if (!whole) p.groups = 1;
    size_t calls_groups = whole ? 1 : g.groups;
    int32_t* yp = y.ptr<int32_t>();
    std::fill(yp, yp + y.shape().total_nr_elems(), 0);
    for (size_t grp = 0; grp < calls_groups; ++grp)
        for (size_t c0 = 0; c0 < (whole ? 1 : g.cg); c0 += chunk) {
            size_t cc = whole ? g.c : std::min(chunk, g.cg - c0);
            size_t oc = whole ? g.o : g.og, o0 = whole ? 0 : grp * g.og;
            size_t first_c = whole ? 0 : grp * g.cg + c0, w_c = whole ? g.cg : cc;
            Tensor xf(TensorShape{g.n, cc, g.h, g.w}, dtype::Float32());
            Tensor wf(TensorShape{oc, w_c, g.kh, g.kw}, dtype::Float32());
            Tensor yf(TensorShape{g.n, oc, g.oh, g.ow}, dtype::Float32());
            float* xfp = xf.ptr<float>();
            for (size_t n = 0; n < g.n; ++n) // channels [first_c, first_c + cc) of each item
                to_float(x, (n * g.c + first_c) * plane, cc * plane, xz, xfp + n * cc * plane);
            float* wfp = wf.ptr<float>();
            size_t c_begin = whole ? 0 : c0;
            for (size_t o = 0; o < oc; ++o)
                to_float(w, ((o0 + o) * g.cg + c_begin) * window, w_c * window, wz[o0 + o],
                         wfp + o * w_c * window);
            conv2d_float32(p, xf, wf, yf, workspace);
            const float* yfp = yf.ptr<float>();
            for (size_t n = 0; n < g.n; ++n)
                for (size_t o = 0; o < oc; ++o) {
                    int32_t* out = yp + (n * g.o + o0 + o) * out_plane;
                    const float* in = yfp + (n * oc + o) * out_plane;
                    for (size_t i = 0; i < out_plane; ++i) out[i] += int32_t(in[i]);
                }
        }
}

namespace {

// x rounded into uint8 as a 1x2x3x4 image, convolved with uint8 and int8 weights.
SymbolVarArray conv_integer_example(SymbolVar x) {
    auto& graph = x.graph();
    auto image = TypeCvt::make(x.reshape(std::vector<long>{1, 2, 3, 4}), dtype::Uint8());
    Tensor wu(TensorShape{2, 2, 2, 2}, dtype::Uint8()), ws(TensorShape{4, 1, 3, 3}, dtype::Int8());
    for (size_t i = 0; i < 16; ++i) wu.ptr<uint8_t>()[i] = uint8_t(i * 37 % 256);
    for (size_t i = 0; i < 36; ++i) ws.ptr<int8_t>()[i] = int8_t(int(i * 29 % 256) - 128);
    Tensor xz(TensorShape{}, dtype::Uint8()), wzu(TensorShape{}, dtype::Uint8()),
        wzs(TensorShape{4}, dtype::Int8());
    xz.ptr<uint8_t>()[0] = 3;
    wzu.ptr<uint8_t>()[0] = 140;
    for (size_t i = 0; i < 4; ++i) wzs.ptr<int8_t>()[i] = int8_t(int(i) * 5 - 7);
    auto c = [&](const Tensor& t) { return ImmutableTensor::make(graph, t); };
    return {ConvInteger::make(image, c(wu), c(xz), c(wzu), {1, 2, 1, 0, 1, 1, 1}),
            ConvInteger::make(image, c(ws), c(xz), c(wzs), {1, 1, 1, 1, 1, 1, 2})};
}

} // namespace

void register_conv_integer_operators() {
    // Loaded by make(), which checks params, dtypes and shapes as for a new operator.
    OperatorRegistry::instance().add("ConvInteger", "conv_integer", dump_param<ConvInteger>,
                                     load_param<ConvInteger>, conv_integer_example);
    register_non_differentiable("ConvInteger", "integer convolutions have no gradient");
}

} // namespace braid::opr
