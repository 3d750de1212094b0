// ONNX neural-network ops → braid: convolution and its transpose, pooling, normalizations,
// the two losses, Resize and RoiAlign. Geometry braid's operators do not take directly (asymmetric
// or automatic pads, ceil mode, output padding, interpolation) is resolved at import, where every
// shape is known, into explicit pads, crops and constant index/weight tensors.
#include "op_util.h"

#include "operators/batch_norm.h"
#include "operators/conv.h"
#include "operators/conv_backward.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/indexing.h"
#include "operators/io.h"
#include "operators/normalization.h"
#include "operators/pooling.h"
#include "operators/reduce.h"
#include "operators/roi_align.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace braid::onnx_import {

using namespace braid::opr;

namespace {

//! The spatial geometry of a convolution or pooling window, one entry per spatial dim.
struct Window {
    std::vector<int64_t> kernel, strides, dilations, begin, end; //!< begin/end: pads
};

//! Reads kernel (given), strides, dilations and pads (explicit or auto_pad) for `spatial`
//! input sizes. `ceil` adds the end padding ceil_mode needs.
Window window_of(const NodeCtx& c, const std::vector<int64_t>& kernel,
                 const std::vector<size_t>& spatial, bool ceil) {
    size_t n = spatial.size();
    Window w;
    w.kernel = kernel;
    w.strides = c.attr_ints("strides"), w.dilations = c.attr_ints("dilations");
    if (w.strides.empty()) w.strides.assign(n, 1);
    if (w.dilations.empty()) w.dilations.assign(n, 1);
    if (kernel.size() != n || w.strides.size() != n || w.dilations.size() != n)
        c.invalid(fmt::format("kernel_shape, strides and dilations need {} values", n));
    auto pads = c.attr_ints("pads");
    if (pads.empty()) pads.assign(2 * n, 0);
    if (pads.size() != 2 * n) c.invalid(fmt::format("pads need {} values", 2 * n));
    std::string autopad = c.attr_string("auto_pad", "NOTSET");
    for (size_t i = 0; i < n; ++i) {
        int64_t in = int64_t(spatial[i]), s = w.strides[i];
        int64_t span = (kernel[i] - 1) * w.dilations[i] + 1;
        if (s <= 0 || w.dilations[i] <= 0 || kernel[i] <= 0)
            c.invalid("kernel_shape, strides and dilations must be positive");
        int64_t b = pads[i], e = pads[i + n];
        if (autopad == "SAME_UPPER" || autopad == "SAME_LOWER") {
            int64_t out = (in + s - 1) / s;
            int64_t total = std::max<int64_t>((out - 1) * s + span - in, 0);
            b = autopad == "SAME_UPPER" ? total / 2 : total - total / 2;
            e = total - b;
        } else if (autopad == "VALID") {
            b = e = 0;
        } else if (autopad != "NOTSET") {
            c.invalid("auto_pad \"" + autopad + "\"");
        }
        if (ceil) {
            // The last window may hang over the end, but must start inside the input or the
            // begin padding.
            int64_t out = (in + b + e - span + s - 1) / s + 1;
            if ((out - 1) * s >= in + b) --out;
            e = std::max<int64_t>(e, (out - 1) * s + span - in - b);
        }
        w.begin.push_back(b), w.end.push_back(e);
    }
    return w;
}

//! Output size of a window over `in` elements with the window's pads.
int64_t window_out(const Window& w, size_t i, size_t in) {
    int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1;
    return (int64_t(in) + w.begin[i] + w.end[i] - span) / w.strides[i] + 1;
}

bool symmetric(const Window& w) {
    for (size_t i = 0; i < w.begin.size(); ++i)
        if (w.begin[i] != w.end[i]) return false;
    return true;
}

//! A 1-D input (N, C, L) seen as 2-D (N, C, 1, L), with its window given a unit height.
void as_2d(SymbolVar& x, Window& w) {
    x = expand_dims(x, {2});
    for (auto* v : {&w.kernel, &w.strides, &w.dilations}) v->insert(v->begin(), 1);
    w.begin.insert(w.begin.begin(), 0), w.end.insert(w.end.begin(), 0);
}

std::vector<size_t> spatial_of(const SymbolVar& x) {
    auto d = x.shape().dims();
    return std::vector<size_t>(d.begin() + 2, d.end());
}

size_t check_spatial(const NodeCtx& c, const SymbolVar& x, const char* what) {
    size_t rank = rank_of(c, x);
    if (rank != 3 && rank != 4)
        c.unsupported(fmt::format("{}-D {} (only 1-D and 2-D)", int(rank) - 2, what));
    return rank - 2;
}

//! x padded by the window's pads (with `value`), which are then zero.
SymbolVar pad_explicitly(SymbolVar x, Window& w, double value) {
    for (size_t i = 0; i < w.begin.size(); ++i) {
        x = pad_axis(x, int(i) + 2, w.begin[i], w.end[i], value);
        w.begin[i] = w.end[i] = 0;
    }
    return x;
}

//! A 3-D convolution as a sum over the kernel's depth of 2-D convolutions, each of the depth
//! slices that kernel plane meets (stacked into the batch). Pads are explicit.
SymbolVar conv3d(SymbolVar x, SymbolVar wt, Window w, int groups, bool exact) {
    x = pad_explicitly(x, w, 0);
    auto xs = x.shape();
    long n = long(xs[0]), ch = long(xs[1]), h = long(xs[3]), wd = long(xs[4]);
    int64_t od = (int64_t(xs[2]) - (w.kernel[0] - 1) * w.dilations[0] - 1) / w.strides[0] + 1;
    Conv2dParam p;
    p.stride_h = int(w.strides[1]), p.stride_w = int(w.strides[2]);
    p.dilation_h = int(w.dilations[1]), p.dilation_w = int(w.dilations[2]);
    p.groups = groups;
    if (exact) p.exact = true;
    SymbolVar acc;
    for (int64_t j = 0; j < w.kernel[0]; ++j) {
        long start = long(j * w.dilations[0]);
        SymbolVar planes =
            subtensor(x, {AxisIndex::slice(2, start, start + long((od - 1) * w.strides[0] + 1),
                                           long(w.strides[0]))});
        planes = transpose(planes, {0, 2, 1, 3, 4}).reshape({n * long(od), ch, h, wd});
        SymbolVar y = Conv2d::make(planes, subtensor(wt, {AxisIndex::index(2, long(j))}), p);
        acc = acc.node() ? acc + y : y;
    }
    auto ys = acc.shape();
    return transpose(acc.reshape({n, long(od), long(ys[1]), long(ys[2]), long(ys[3])}),
                     {0, 2, 1, 3, 4});
}

} // namespace

namespace {

//! The window of the Conv-like node `c` over x's spatial axes (1-D to 3-D) for weights wt.
Window conv_window(const NodeCtx& c, SymbolVar x, SymbolVar wt) {
    size_t rank = rank_of(c, x);
    if (rank < 3 || rank > 5)
        c.unsupported(fmt::format("{}-D convolutions (only 1-D to 3-D)", int(rank) - 2));
    std::vector<int64_t> kernel = c.attr_ints("kernel_shape");
    if (kernel.empty())
        for (size_t i = 0; i + 2 < rank; ++i) kernel.push_back(int64_t(wt.shape()[i + 2]));
    return window_of(c, kernel, spatial_of(x), false);
}

//! The Conv2dParam of a 2-D window whose ends are padded alike.
Conv2dParam conv2d_param(const Window& w, int groups) {
    Conv2dParam p;
    p.pad_h = int(w.begin[0]), p.pad_w = int(w.begin[1]);
    p.stride_h = int(w.strides[0]), p.stride_w = int(w.strides[1]);
    p.dilation_h = int(w.dilations[0]), p.dilation_w = int(w.dilations[1]);
    p.groups = groups;
    return p;
}

} // namespace

std::optional<Conv2dParam> plain_conv2d_param(const NodeCtx& c, SymbolVar x, SymbolVar wt) {
    if (rank_of(c, x) != 4) return std::nullopt;
    Window w = conv_window(c, x, wt);
    if (!symmetric(w)) return std::nullopt;
    return conv2d_param(w, int(c.attr_int("group", 1)));
}

SymbolVar conv_with(const NodeCtx& c, SymbolVar x, SymbolVar wt, bool exact) {
    size_t nsp = rank_of(c, x) - 2;
    Window w = conv_window(c, x, wt);
    int groups = int(c.attr_int("group", 1));
    if (nsp == 3) return conv3d(x, wt, w, groups, exact);
    if (nsp == 1) as_2d(x, w), wt = expand_dims(wt, {2});
    if (!symmetric(w)) x = pad_explicitly(x, w, 0);
    Conv2dParam p = conv2d_param(w, groups);
    if (exact) p.exact = true;
    SymbolVar y = Conv2d::make(x, wt, p);
    return nsp == 1 ? squeeze(y, {2}) : y;
}

namespace {

SymbolVarArray conv(const NodeCtx& c) {
    SymbolVar y = conv_with(c, c.in(0), c.in(1));
    if (!c.has_input(2)) return one(y);
    std::vector<long> bshape(y.shape().ndim(), 1);
    bshape[1] = -1;
    return one(y + c.in(2).reshape(bshape));
}

//! ConvTranspose is the data gradient of a convolution: the full output (no pads) is
//! Conv2dBackwardData of an input sized to fit, and the pads crop it.
SymbolVarArray conv_transpose(const NodeCtx& c) {
    SymbolVar x = c.in(0), wt = c.in(1);
    size_t nsp = check_spatial(c, x, "transposed convolutions");
    std::vector<int64_t> kernel = c.attr_ints("kernel_shape");
    if (kernel.empty())
        for (size_t i = 0; i < nsp; ++i) kernel.push_back(int64_t(wt.shape()[i + 2]));
    auto strides = c.attr_ints("strides"), dil = c.attr_ints("dilations"),
         outpad = c.attr_ints("output_padding"), out_shape = c.attr_ints("output_shape"),
         pads = c.attr_ints("pads");
    if (strides.empty()) strides.assign(nsp, 1);
    if (dil.empty()) dil.assign(nsp, 1);
    if (outpad.empty()) outpad.assign(nsp, 0);
    if (pads.empty()) pads.assign(2 * nsp, 0);
    if (kernel.size() != nsp || strides.size() != nsp || dil.size() != nsp ||
        outpad.size() != nsp || pads.size() != 2 * nsp ||
        (!out_shape.empty() && out_shape.size() != nsp))
        c.invalid(fmt::format("geometry attributes need {} values per list", nsp));
    std::string autopad = c.attr_string("auto_pad", "NOTSET");
    auto in = spatial_of(x);
    std::vector<int64_t> full(nsp), begin(nsp), end(nsp);
    for (size_t i = 0; i < nsp; ++i) {
        if (outpad[i] < 0 || outpad[i] >= std::max(strides[i], dil[i]))
            c.invalid(
                fmt::format("output_padding {} must be below the stride or dilation", outpad[i]));
        full[i] = (int64_t(in[i]) - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 + outpad[i];
        begin[i] = pads[i], end[i] = pads[i + nsp];
        int64_t want = !out_shape.empty()              ? out_shape[i]
                       : autopad.rfind("SAME", 0) == 0 ? int64_t(in[i]) * strides[i]
                                                       : -1;
        if (want >= 0) {
            int64_t total = full[i] - want;
            bool upper = autopad != "SAME_LOWER";
            begin[i] = upper ? total / 2 : total - total / 2;
            end[i] = total - begin[i];
        }
    }
    if (nsp == 1) {
        x = expand_dims(x, {2}), wt = expand_dims(wt, {2});
        for (auto* v : {&kernel, &strides, &dil, &full}) v->insert(v->begin(), 1);
    }
    Conv2dParam p;
    p.stride_h = int(strides[0]), p.stride_w = int(strides[1]);
    p.dilation_h = int(dil[0]), p.dilation_w = int(dil[1]);
    p.groups = int(c.attr_int("group", 1));
    // The full size exceeds what the convolution reads by output_padding < stride, so the
    // convolution of an input of that size has exactly x's spatial size.
    SymbolVar y = Conv2dBackwardData::make(wt, x, {p, uint32_t(full[0]), uint32_t(full[1])});
    if (nsp == 1) y = squeeze(y, {2});
    for (size_t i = 0; i < nsp; ++i) y = pad_axis(y, int(i) + 2, -begin[i], -end[i], 0);
    if (c.has_input(2)) {
        std::vector<long> bshape(nsp + 2, 1);
        bshape[1] = -1;
        y = y + c.in(2).reshape(bshape);
    }
    return one(y);
}

//! For each output position of an average pool (row-major), the number of elements its
//! window averages: those of the input, plus the declared pads with count_include_pad.
std::vector<int64_t> avg_counts(const Window& declared, const std::vector<size_t>& spatial,
                                const std::vector<int64_t>& outs, bool include_pad) {
    size_t nsp = spatial.size(), total = 1;
    for (int64_t o : outs) total *= size_t(o);
    std::vector<int64_t> counts(total);
    for (size_t flat = 0; flat < total; ++flat) {
        size_t rem = flat;
        int64_t count = 1;
        for (size_t i = nsp; i-- > 0;) {
            int64_t pos = int64_t(rem % size_t(outs[i]));
            rem /= size_t(outs[i]);
            int64_t lo = pos * declared.strides[i] - declared.begin[i];
            int64_t hi = lo + (declared.kernel[i] - 1) * declared.dilations[i] + 1;
            int64_t from = include_pad ? -declared.begin[i] : 0;
            int64_t to = int64_t(spatial[i]) + (include_pad ? declared.end[i] : 0);
            // Window elements lo, lo + d, ... inside [from, to).
            int64_t n = 0;
            for (int64_t e = lo; e < hi; e += declared.dilations[i]) n += e >= from && e < to;
            count *= n;
        }
        counts[flat] = count;
    }
    return counts;
}

//! A pooling over any number of spatial dims, with dilation: the max or sum of one strided
//! slice per window element, of the input padded explicitly. For a max pool, `indices` (when
//! given) receives the flat position of each maximum in x (row-major, or with the spatial dims
//! column-major when `column_major`), the first one among equals.
SymbolVar pool_by_taps(SymbolVar x, Window w, PoolMode mode, const std::vector<int64_t>& outs,
                       SymbolVar* indices = nullptr, bool column_major = false) {
    std::vector<size_t> spatial = spatial_of(x);
    Window declared = w;
    x = pad_explicitly(x, w, mode == PoolMode::MAX ? -INFINITY : 0.0);
    size_t nsp = outs.size(), taps = 1, positions = 1, plane = 1;
    for (int64_t k : w.kernel) taps *= size_t(k);
    for (int64_t o : outs) positions *= size_t(o);
    for (size_t d : spatial) plane *= d;
    std::vector<size_t> oshape(outs.begin(), outs.end());
    SymbolVar acc, best;
    for (size_t t = 0; t < taps; ++t) {
        std::vector<AxisIndex> items;
        std::vector<int64_t> tap(nsp);
        size_t rem = t;
        for (size_t i = nsp; i-- > 0;) {
            tap[i] = int64_t(rem % size_t(w.kernel[i]));
            rem /= size_t(w.kernel[i]);
            long start = long(tap[i] * w.dilations[i]);
            items.push_back(AxisIndex::slice(int(i) + 2, start,
                                             start + long((outs[i] - 1) * w.strides[i] + 1),
                                             long(w.strides[i])));
        }
        SymbolVar part = subtensor(x, items);
        SymbolVar where_tap;
        if (indices) {
            // Where this window element sits in x's spatial plane, per output position.
            Tensor pos(TensorShape(oshape), dtype::Int64());
            for (size_t flat = 0; flat < positions; ++flat) {
                size_t r = flat;
                int64_t off = 0, scale = 1;
                std::vector<int64_t> coord(nsp);
                for (size_t i = nsp; i-- > 0;) {
                    int64_t o = int64_t(r % size_t(outs[i]));
                    r /= size_t(outs[i]);
                    coord[i] = o * w.strides[i] + tap[i] * w.dilations[i] - declared.begin[i];
                }
                for (size_t k = 0; k < nsp; ++k) {
                    size_t i = column_major ? k : nsp - 1 - k;
                    off += coord[i] * scale;
                    scale *= int64_t(spatial[i]);
                }
                pos.ptr<int64_t>()[flat] = off;
            }
            where_tap = ImmutableTensor::make(*x.node()->graph(), pos);
        }
        if (!acc.node()) {
            acc = part;
            if (indices) best = Broadcast::make(where_tap, part.shape());
        } else if (mode == PoolMode::MAX) {
            if (indices)
                best = where(less(acc, part), Broadcast::make(where_tap, part.shape()), best);
            acc = maximum(acc, part);
        } else {
            acc = acc + part;
        }
    }
    if (indices) {
        // Each (sample, channel) plane starts at its index times the plane size.
        auto xs = x.shape();
        size_t planes = xs[0] * xs[1];
        Tensor base(TensorShape{xs[0], xs[1]}, dtype::Int64());
        for (size_t i = 0; i < planes; ++i) base.ptr<int64_t>()[i] = int64_t(i * plane);
        std::vector<long> bshape{long(xs[0]), long(xs[1])};
        bshape.resize(nsp + 2, 1);
        *indices = best + ImmutableTensor::make(*x.node()->graph(), base).reshape(bshape);
    }
    return acc;
}

Converter pool(PoolMode mode) {
    return [mode](const NodeCtx& c) {
        SymbolVar x = c.in(0);
        size_t rank = rank_of(c, x);
        if (rank < 3) c.invalid("the input needs a spatial dim");
        size_t nsp = rank - 2;
        bool with_indices = c.node().output_size() > 1 && !c.node().output(1).empty();
        if (with_indices && mode != PoolMode::MAX) c.invalid("only MaxPool has an Indices output");
        auto spatial = spatial_of(x);
        Window w = window_of(c, c.attr_ints("kernel_shape"), spatial, c.attr_int("ceil_mode", 0));
        bool include_pad = c.attr_int("count_include_pad", 0) != 0;
        // The area averaged over: the input, plus the declared pads with count_include_pad
        // (never the extra end padding of ceil mode).
        Window declared = window_of(c, w.kernel, spatial, false);
        std::vector<int64_t> outs;
        double taps = 1, positions = 1;
        for (size_t i = 0; i < nsp; ++i) {
            outs.push_back(window_out(w, i, spatial[i]));
            if (outs.back() < 1)
                c.invalid(fmt::format("the window (kernel {}, dilation {}) is larger than spatial "
                                      "dim {} ({} with pads)",
                                      w.kernel[i], w.dilations[i], i,
                                      int64_t(spatial[i]) + w.begin[i] + w.end[i]));
            taps *= double(w.kernel[i]), positions *= double(outs.back());
        }
        check_size(c, taps, "the pooling window");
        check_size(c, positions, "the pooled plane");
        bool dilated = false;
        for (int64_t d : w.dilations) dilated = dilated || d != 1;
        DType dt = x.dtype();
        if (!dt.is_float()) x = TypeCvt::make(x, dtype::Float32()); // exact for 8-bit ints
        SymbolVar y;
        // How the result relates to the average: y * scale[position].
        bool rescale = false, sum = false;
        SymbolVar indices;
        if (nsp > 2 || dilated || with_indices) {
            y = pool_by_taps(x, w, mode, outs, with_indices ? &indices : nullptr,
                             c.attr_int("storage_order", 0) != 0);
            rescale = sum = mode == PoolMode::AVERAGE;
        } else {
            bool is_1d = nsp == 1;
            if (is_1d) as_2d(x, w);
            bool explicit_pads = !symmetric(w);
            if (explicit_pads) x = pad_explicitly(x, w, mode == PoolMode::MAX ? -INFINITY : 0.0);
            PoolingParam p;
            p.mode = mode;
            p.window_h = int(w.kernel[0]), p.window_w = int(w.kernel[1]);
            p.stride_h = int(w.strides[0]), p.stride_w = int(w.strides[1]);
            p.pad_h = int(w.begin[0]), p.pad_w = int(w.begin[1]);
            p.count_include_pad = explicit_pads || include_pad;
            y = Pooling::make(x, p);
            if (is_1d) y = squeeze(y, {2});
            rescale = mode == PoolMode::AVERAGE && explicit_pads;
        }
        if (rescale) {
            // y is a sum (or an average over whole windows): scale by 1 (or the window size)
            // over the number of elements counted.
            int64_t full = 1;
            for (int64_t k : declared.kernel) full *= k;
            auto counts = avg_counts(declared, spatial, outs, include_pad);
            std::vector<size_t> oshape(outs.begin(), outs.end());
            Tensor t{TensorShape(oshape), dtype::Float32()};
            for (size_t i = 0; i < counts.size(); ++i)
                t.ptr<float>()[i] = counts[i] ? float(sum ? 1 : full) / float(counts[i]) : 0.f;
            y = y * ImmutableTensor::make(c.graph(), t);
        }
        if (y.dtype() != dt) y = TypeCvt::make(y, dt);
        if (with_indices) return SymbolVarArray{y, indices};
        return one(y);
    };
}

SymbolVarArray batchnorm_op(const NodeCtx& c) {
    SymbolVar x = c.in(0), scale = c.in(1), bias = c.in(2), mean = c.in(3), var = c.in(4);
    float eps = c.attr_float("epsilon", 1e-5f);
    bool training = c.attr_int("training_mode", 0) != 0 || c.node().output_size() > 1;
    if (!training) return one(batch_norm(x, scale, bias, mean, var, eps));
    // Training: normalize with the batch statistics and update the running ones.
    size_t rank = rank_of(c, x);
    if (rank < 2)
        c.invalid(fmt::format("the input has rank {}; it needs a batch and a channel dim", rank));
    std::vector<int> axes{0};
    for (size_t i = 2; i < rank; ++i) axes.push_back(int(i));
    std::vector<long> shape(rank, 1);
    shape[1] = -1;
    SymbolVar bm = reduce_mean(x, axes, false);
    SymbolVar bv = reduce_mean(square(x - bm.reshape(shape)), axes, false);
    SymbolVar y =
        (x - bm.reshape(shape)) * rsqrt(bv.reshape(shape) + double(eps)) * scale.reshape(shape) +
        bias.reshape(shape);
    double momentum = c.attr_float("momentum", 0.9f);
    return {y, mean * momentum + bm * (1 - momentum), var * momentum + bv * (1 - momentum)};
}

//! (x - mean) / sqrt(var + eps) over the spatial dims of each sample and channel.
SymbolVarArray instance_norm(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    if (rank < 3) c.invalid("the input needs a spatial dim");
    std::vector<int> axes;
    for (size_t i = 2; i < rank; ++i) axes.push_back(int(i));
    std::vector<long> shape(rank, 1);
    shape[1] = -1;
    double eps = c.attr_float("epsilon", 1e-5f);
    SymbolVar centered = x - reduce_mean(x, axes, true);
    SymbolVar y = centered * rsqrt(reduce_mean(square(centered), axes, true) + eps);
    return one(y * c.in(1).reshape(shape) + c.in(2).reshape(shape));
}

SymbolVarArray mean_variance_norm(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    std::vector<int> axes;
    for (int64_t a : c.has_attr("axes") ? c.attr_ints("axes") : std::vector<int64_t>{0, 2, 3})
        axes.push_back(norm_axis(c, a, rank));
    std::sort(axes.begin(), axes.end());
    SymbolVar centered = x - reduce_mean(x, axes, true);
    return one(centered / (sqrt(reduce_mean(square(centered), axes, true)) + 1e-9));
}

//! x / (bias + alpha / size * sum of squares over `size` neighbouring channels) ^ beta.
SymbolVarArray lrn(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    if (rank_of(c, x) < 3) c.invalid("the input needs a channel and a spatial dim");
    int64_t size = c.attr_int("size", 0);
    if (size <= 0) c.invalid("size must be positive");
    double alpha = c.attr_float("alpha", 1e-4f), beta = c.attr_float("beta", 0.75f),
           bias = c.attr_float("bias", 1.f);
    long ch = long(x.shape()[1]);
    SymbolVar sq = pad_axis(square(x), 1, (size - 1) / 2, size / 2, 0);
    SymbolVar sum;
    for (long j = 0; j < size; ++j) {
        SymbolVar part = subtensor(sq, {AxisIndex::slice(1, j, j + ch)});
        sum = j == 0 ? part : sum + part;
    }
    SymbolVar base = sum * (alpha / double(size)) + bias;
    return one(x / pow(base, scalar_like(base, beta)));
}

//! NegativeLogLikelihoodLoss of log-probabilities x (N, C, d...) for integer targets (N, d...),
//! with optional class weights and an ignored target value.
SymbolVar nll(const NodeCtx& c, SymbolVar x, SymbolVar target, SymbolVar weight) {
    std::string reduction = c.attr_string("reduction", "mean");
    if (reduction != "mean" && reduction != "sum" && reduction != "none")
        c.invalid("reduction \"" + reduction + "\"");
    if (rank_of(c, x) < 2 || rank_of(c, target) + 1 != rank_of(c, x))
        c.invalid(fmt::format("input {} and target {} do not fit (N, C, d...) and (N, d...)",
                              x.shape().to_string(), target.shape().to_string()));
    SymbolVar t = TypeCvt::make(target, dtype::Int32());
    SymbolVar mask; // where the target is not ignored
    if (c.has_attr("ignore_index")) {
        mask = not_equal(t, scalar_like(t, double(c.attr_int("ignore_index", 0))));
        t = where(mask, t, zeros_like(t));
    }
    SymbolVar loss = neg(indexing_one_hot(x, t, 1));
    SymbolVar w; // each position's weight
    if (weight.node()) {
        auto d = t.shape().dims();
        w = embedding(weight.reshape({-1, 1}), t).reshape(std::vector<long>(d.begin(), d.end()));
    }
    if (mask.node()) {
        SymbolVar m = TypeCvt::make(mask, x.dtype());
        w = w.node() ? w * m : m;
    }
    if (w.node()) loss = loss * w;
    if (reduction == "none") return loss;
    std::vector<int> all;
    for (size_t i = 0; i < loss.shape().ndim(); ++i) all.push_back(int(i));
    SymbolVar total = reduce_sum(loss, all, false);
    if (reduction == "sum") return total;
    return w.node() ? total / reduce_sum(w, all, false) : reduce_mean(loss, all, false);
}

SymbolVarArray nll_loss(const NodeCtx& c) {
    return one(nll(c, c.in(0), c.in(1), c.has_input(2) ? c.in(2) : SymbolVar{}));
}

SymbolVarArray softmax_cross_entropy(const NodeCtx& c) {
    SymbolVar logp = log_softmax(c.in(0), 1);
    SymbolVarArray outs{nll(c, logp, c.in(1), c.has_input(2) ? c.in(2) : SymbolVar{})};
    if (c.node().output_size() > 1) outs.push_back(logp);
    return outs;
}

// ---------------------------------------------------------------- Resize
//! Where output position `o` of an axis resized from `in` to `out` (in * scale, unrounded;
//! `length` positions) reads, in input coordinates.
double source_coord(const NodeCtx& c, const std::string& mode, double o, double in, double out,
                    size_t length, double scale, double roi_start, double roi_end) {
    if (mode == "half_pixel") return (o + 0.5) / scale - 0.5;
    if (mode == "half_pixel_symmetric") {
        // Resize-19: half_pixel, shifted so that the rounding of the length is shared by
        // both ends.
        double offset = in / 2 * (1 - double(length) / out);
        return offset + (o + 0.5) / scale - 0.5;
    }
    if (mode == "pytorch_half_pixel") return out > 1 ? (o + 0.5) / scale - 0.5 : 0;
    if (mode == "align_corners") return out == 1 ? 0 : o * (in - 1) / (out - 1);
    if (mode == "asymmetric") return o / scale;
    if (mode == "tf_half_pixel_for_nn") return (o + 0.5) / scale;
    if (mode == "tf_crop_and_resize")
        return out > 1 ? roi_start * (in - 1) + o * (roi_end - roi_start) * (in - 1) / (out - 1)
                       : 0.5 * (roi_start + roi_end) * (in - 1);
    c.unsupported("coordinate_transformation_mode \"" + mode + "\"");
}

//! The interpolation taps of one output position: coefficients for neighbours base-k+1 ..
//! base+k around x, where base = ceil(x) - 1 and ratio = x - base is in (0, 1].
std::vector<double> coeffs(const NodeCtx& c, const std::string& mode, const std::string& nm,
                           double ratio) {
    if (mode == "linear") return {1 - ratio, ratio};
    if (mode == "cubic") {
        double a = c.attr_float("cubic_coeff_a", -0.75f), r = ratio, s = 1 - ratio;
        return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                ((a + 2) * r - (a + 3)) * r * r + 1, ((a + 2) * s - (a + 3)) * s * s + 1,
                ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a};
    }
    bool right = nm == "round_prefer_floor"  ? ratio > 0.5
                 : nm == "round_prefer_ceil" ? ratio >= 0.5
                 : nm == "floor"             ? ratio == 1
                 : nm == "ceil"              ? true
                                : (c.unsupported("nearest_mode \"" + nm + "\""), false);
    return {right ? 0.0 : 1.0, right ? 1.0 : 0.0};
}

//! x resized along `axis` to `out` positions.
//! How Resize interpolates.
struct ResizeMode {
    std::string mode, coord, nearest;
};

//! x resized along `axis` to `out` positions.
SymbolVar resize_axis(const NodeCtx& c, const ResizeMode& rm, SymbolVar x, int axis, size_t out,
                      double scale, double roi_start, double roi_end) {
    const std::string &mode = rm.mode, &coord = rm.coord;
    bool exclude = c.attr_int("exclude_outside", 0) != 0;
    int64_t in = int64_t(x.shape()[size_t(axis)]);
    size_t taps = mode == "cubic" ? 4 : 2;
    std::vector<std::vector<int64_t>> idx(taps);
    std::vector<std::vector<float>> wts(taps);
    std::vector<float> outside(out, 0.f); // 1 where tf_crop_and_resize extrapolates
    bool identity = size_t(in) == out;
    for (size_t o = 0; o < out; ++o) {
        // ONNX's reference takes the output length as in * scale, unrounded.
        double xo = source_coord(c, coord, double(o), double(in), double(in) * scale, out, scale,
                                 roi_start, roi_end);
        if (coord == "tf_crop_and_resize" && (xo < 0 || xo > double(in - 1))) outside[o] = 1;
        double base = std::ceil(xo) - 1, ratio = xo - base;
        auto cf = coeffs(c, mode, rm.nearest, ratio);
        int64_t first = int64_t(base) - int64_t(taps / 2) + 1;
        double sum = 0;
        for (size_t k = 0; k < taps; ++k) {
            int64_t p = first + int64_t(k);
            if (exclude && (p < 0 || p >= in)) cf[k] = 0;
            sum += cf[k];
        }
        for (size_t k = 0; k < taps; ++k) {
            int64_t p = std::clamp<int64_t>(first + int64_t(k), 0, in - 1);
            idx[k].push_back(p);
            wts[k].push_back(float(exclude && sum != 0 ? cf[k] / sum : cf[k]));
            if (wts[k].back() != 0 && (p != int64_t(o) || wts[k].back() != 1)) identity = false;
        }
        if (outside[o]) identity = false;
    }
    if (identity) return x;
    // One tap of weight 1 per position (nearest, or linear at whole source positions): one
    // take of those positions, rather than a take, a product and a sum per tap.
    bool single = std::find(outside.begin(), outside.end(), 1.f) == outside.end();
    std::vector<int64_t> chosen(out, -1);
    for (size_t o = 0; o < out && single; ++o)
        for (size_t k = 0; k < taps; ++k) {
            if (wts[k][o] == 0) continue;
            single = single && wts[k][o] == 1 && chosen[o] < 0;
            chosen[o] = idx[k][o];
        }
    if (single && std::find(chosen.begin(), chosen.end(), -1) == chosen.end())
        return take(x, axis, chosen);
    std::vector<long> wshape(x.shape().ndim(), 1);
    wshape[size_t(axis)] = long(out);
    auto weights = [&](const std::vector<float>& v) {
        Tensor t(TensorShape{v.size()}, dtype::Float32());
        std::copy(v.begin(), v.end(), t.ptr<float>());
        SymbolVar w = ImmutableTensor::make(c.graph(), t).reshape(wshape);
        return w.dtype() == x.dtype() ? w : TypeCvt::make(w, x.dtype());
    };
    SymbolVar y;
    for (size_t k = 0; k < taps; ++k) {
        bool all_one = true, all_zero = true;
        for (float v : wts[k]) all_one = all_one && v == 1, all_zero = all_zero && v == 0;
        if (all_zero) continue;
        SymbolVar part = take(x, axis, idx[k]);
        if (!all_one) part = part * weights(wts[k]);
        y = y.node() ? y + part : part;
    }
    if (!y.node()) y = take(x, axis, idx[0]) * 0.0;
    if (std::find(outside.begin(), outside.end(), 1.f) != outside.end()) {
        SymbolVar m = TypeCvt::make(weights(outside), dtype::Bool());
        SymbolVar e = scalar_like(y, c.attr_float("extrapolation_value", 0.f));
        y = where(Broadcast::make(m, y.shape()), Broadcast::make(e, y.shape()), y);
    }
    return y;
}

//! Resize-18's roi, scales and sizes given for `axes` only, widened to every axis: the others
//! keep their size (scale 1, the whole axis as roi).
void widen_to_rank(const NodeCtx& c, const SymbolVar& x, const std::vector<int>& axes,
                   std::vector<float>& roi, std::vector<float>& scales,
                   std::vector<int64_t>& sizes) {
    size_t rank = x.shape().ndim(), n = axes.size();
    if ((!scales.empty() && scales.size() != n) || (!sizes.empty() && sizes.size() != n) ||
        (!roi.empty() && roi.size() != 2 * n))
        c.invalid(fmt::format("{} axes but {} scales, {} sizes and {} roi values", n, scales.size(),
                              sizes.size(), roi.size()));
    std::vector<float> wide_roi, wide_scales;
    std::vector<int64_t> wide_sizes;
    if (!roi.empty()) {
        wide_roi.assign(rank, 0.f);
        wide_roi.resize(2 * rank, 1.f);
    }
    if (!scales.empty()) wide_scales.assign(rank, 1.f);
    if (!sizes.empty())
        for (size_t i = 0; i < rank; ++i) wide_sizes.push_back(int64_t(x.shape()[i]));
    for (size_t k = 0; k < n; ++k) {
        size_t a = size_t(axes[k]);
        if (!roi.empty()) wide_roi[a] = roi[k], wide_roi[a + rank] = roi[k + n];
        if (!scales.empty()) wide_scales[a] = scales[k];
        if (!sizes.empty()) wide_sizes[a] = sizes[k];
    }
    roi = wide_roi, scales = wide_scales, sizes = wide_sizes;
}

SymbolVarArray resize(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    std::vector<float> roi, scales;
    std::vector<int64_t> sizes;
    ResizeMode rm{c.attr_string("mode", "nearest"),
                  c.attr_string("coordinate_transformation_mode", "half_pixel"),
                  c.attr_string("nearest_mode", "round_prefer_floor")};
    if (c.nr_inputs() == 2) {
        // Resize-10 and Upsample: (X, scales), output = floor(input * scale), positions
        // scaled from the start, nearest rounds down.
        scales = c.floats_input(1);
        rm.coord = "asymmetric", rm.nearest = "floor";
        if (rm.mode == "bilinear") rm.mode = "linear";
    } else {
        if (c.has_input(1)) roi = c.floats_input(1);
        if (c.has_input(2)) scales = c.floats_input(2);
        if (c.has_input(3)) sizes = c.ints_input(3);
    }
    if (rm.mode != "nearest" && rm.mode != "linear" && rm.mode != "cubic")
        c.unsupported("mode \"" + rm.mode + "\"");
    if (!sizes.empty()) scales.clear();
    // Resize-18: scales, sizes and roi may list only the given axes (the others keep their
    // size), and sizes may keep the aspect ratio.
    std::vector<int> axes;
    for (int64_t a : c.attr_ints("axes")) axes.push_back(norm_axis(c, a, rank));
    if (axes.empty())
        for (size_t i = 0; i < rank; ++i) axes.push_back(int(i));
    else
        widen_to_rank(c, x, axes, roi, scales, sizes);
    std::string policy = c.attr_string("keep_aspect_ratio_policy", "stretch");
    double kept = 0; // the common scale of a kept aspect ratio
    if (!sizes.empty() && policy != "stretch") {
        if (policy != "not_larger" && policy != "not_smaller")
            c.invalid("keep_aspect_ratio_policy \"" + policy + "\"");
        kept = policy == "not_larger" ? INFINITY : 0;
        for (int a : axes) {
            double s = double(sizes[size_t(a)]) / double(x.shape()[size_t(a)]);
            kept = policy == "not_larger" ? std::min(kept, s) : std::max(kept, s);
        }
        for (int a : axes) sizes[size_t(a)] = int64_t(kept * double(x.shape()[size_t(a)]) + 0.5);
    }
    if (sizes.empty() && scales.size() != rank)
        c.invalid(fmt::format("{} scales for rank {}", scales.size(), rank));
    if (!sizes.empty() && sizes.size() != rank)
        c.invalid(fmt::format("{} sizes for rank {}", sizes.size(), rank));
    if (!roi.empty() && roi.size() != 2 * rank)
        c.invalid(fmt::format("{} roi values for rank {}", roi.size(), rank));
    std::vector<size_t> out(rank);
    std::vector<double> scale(rank);
    for (size_t i = 0; i < rank; ++i) {
        double in = double(x.shape()[i]);
        if (!sizes.empty()) {
            if (sizes[i] < 0) c.invalid(fmt::format("negative size {}", sizes[i]));
            out[i] = size_t(sizes[i]);
            bool kept_axis = kept > 0 && std::count(axes.begin(), axes.end(), int(i));
            scale[i] = kept_axis ? kept : in > 0 ? double(out[i]) / in : 1;
        } else {
            if (!(scales[i] > 0)) c.invalid(fmt::format("scale {} is not positive", scales[i]));
            scale[i] = scales[i];
            check_size(c, std::floor(in * scale[i]), "a resized axis");
            out[i] = size_t(std::floor(in * scale[i]));
        }
        check_size(c, double(out[i]), "a resized axis");
        if (scale[i] < 1 && rm.mode != "nearest" && c.attr_int("antialias", 0) != 0)
            c.unsupported(fmt::format("antialias when downscaling axis {} ({} to {})", i,
                                      x.shape()[i], out[i]));
    }
    // Separable: one axis at a time, the last first (as ONNX's reference nests them).
    for (size_t k = rank; k-- > 0;) {
        double rs = roi.empty() ? 0 : roi[k], re = roi.empty() ? 1 : roi[k + rank];
        x = resize_axis(c, rm, x, int(k), out[k], scale[k], rs, re);
    }
    return one(x);
}

// ---------------------------------------------------------------- GridSample
//! Grid coordinates (-1 .. 1) as input positions along an axis of `size`, with the padding
//! mode's fold: "border" clamps, "reflection" mirrors at the edges (then clamps).
SymbolVar grid_coord(SymbolVar g, double size, bool align, const std::string& padding) {
    SymbolVar p = align ? (g + 1.0) * ((size - 1) / 2) : ((g + 1.0) * size - 1.0) * 0.5;
    if (padding == "reflection") {
        double lo = align ? 0 : -0.5, hi = align ? size - 1 : size - 0.5, span = hi - lo;
        if (span > 0) {
            // Distance past the edge, folded: even folds count from the edge, odd from the other.
            auto fold = [&](SymbolVar d, double from, double other, double dir) {
                SymbolVar n = floor(d / span);
                SymbolVar r = d - n * span;
                SymbolVar even = equal(mod(n, scalar_like(n, 2)), scalar_like(n, 0));
                return where(even, r * dir + from, r * -dir + other);
            };
            SymbolVar below = fold(lo - p, lo, hi, 1), above = fold(p - hi, hi, lo, -1);
            p = where(less(p, scalar_like(p, lo)), below,
                      where(less(scalar_like(p, hi), p), above, p));
        } else {
            p = zeros_like(p);
        }
    }
    if (padding == "border" || padding == "reflection") p = clip(p, 0.0, size - 1);
    return p;
}

SymbolVarArray grid_sample(const NodeCtx& c) {
    SymbolVar x = c.in(0), grid = c.in(1);
    if (rank_of(c, x) != 4 || rank_of(c, grid) != 4 || grid.shape()[3] != 2 ||
        grid.shape()[0] != x.shape()[0])
        c.unsupported(fmt::format("input {} and grid {} (only 2-D sampling: (N, C, H, W) and "
                                  "(N, H_out, W_out, 2))",
                                  x.shape().to_string(), grid.shape().to_string()));
    std::string mode = c.attr_string("mode", "bilinear"),
                padding = c.attr_string("padding_mode", "zeros");
    if (c.opset() >= 20 && mode == "linear") mode = "bilinear"; // renamed by GridSample-20
    if (mode != "bilinear" && mode != "nearest") c.unsupported("mode \"" + mode + "\"");
    if (padding != "zeros" && padding != "border" && padding != "reflection")
        c.invalid("padding_mode \"" + padding + "\"");
    bool align = c.attr_int("align_corners", 0) != 0;
    auto xs = x.shape();
    long n = long(xs[0]), ch = long(xs[1]), h = long(xs[2]), w = long(xs[3]);
    long oh = long(grid.shape()[1]), ow = long(grid.shape()[2]);
    SymbolVar gx = subtensor(grid, {AxisIndex::index(3, 0)}),
              gy = subtensor(grid, {AxisIndex::index(3, 1)});
    SymbolVar px = grid_coord(gx, double(w), align, padding),
              py = grid_coord(gy, double(h), align, padding);
    SymbolVar flat = x.reshape({n, ch, h * w});
    // The value at integer positions (ix, iy) [N, Ho, Wo] (float), zero outside the image.
    auto tap = [&](SymbolVar ix, SymbolVar iy) {
        SymbolVar inside = logical_and(logical_and(less_equal(scalar_like(ix, 0), ix),
                                                   less_equal(ix, scalar_like(ix, double(w - 1)))),
                                       logical_and(less_equal(scalar_like(iy, 0), iy),
                                                   less_equal(iy, scalar_like(iy, double(h - 1)))));
        SymbolVar pos = clip(iy, 0.0, double(h - 1)) * double(w) + clip(ix, 0.0, double(w - 1));
        SymbolVar idx = TypeCvt::make(pos, dtype::Int32()).reshape({n, 1, oh * ow});
        SymbolVar v =
            gather(flat, Broadcast::make(idx, TensorShape{size_t(n), size_t(ch), size_t(oh * ow)}),
                   2)
                .reshape({n, ch, oh, ow});
        SymbolVar m = TypeCvt::make(inside, x.dtype()).reshape({n, 1, oh, ow});
        return v * m;
    };
    if (mode == "nearest") return one(tap(round(px), round(py)));
    SymbolVar x0 = floor(px), y0 = floor(py);
    SymbolVar fx = (px - x0).reshape({n, 1, oh, ow}), fy = (py - y0).reshape({n, 1, oh, ow});
    SymbolVar x1 = x0 + 1.0, y1 = y0 + 1.0;
    SymbolVar top = tap(x0, y0) * (1.0 - fx) + tap(x1, y0) * fx;
    SymbolVar bottom = tap(x0, y1) * (1.0 - fx) + tap(x1, y1) * fx;
    return one(top * (1.0 - fy) + bottom * fy);
}

SymbolVarArray roi_align(const NodeCtx& c) {
    RoiAlign::Param p;
    std::string mode = c.attr_string("mode", "avg");
    if (mode != "avg" && mode != "max") c.invalid("mode \"" + mode + "\"");
    p.mode = mode == "max" ? PoolMode::MAX : PoolMode::AVERAGE;
    p.output_height = int(c.attr_int("output_height", 1));
    p.output_width = int(c.attr_int("output_width", 1));
    p.sampling_ratio = int(c.attr_int("sampling_ratio", 0));
    p.spatial_scale = c.attr_float("spatial_scale", 1.f);
    // Opset 10 has no coordinate_transformation_mode: its rois are in output_half_pixel.
    std::string coords = c.attr_string("coordinate_transformation_mode",
                                       c.opset() >= 16 ? "half_pixel" : "output_half_pixel");
    if (coords != "half_pixel" && coords != "output_half_pixel")
        c.invalid("coordinate_transformation_mode \"" + coords + "\"");
    p.half_pixel = coords == "half_pixel";
    return one(RoiAlign::make(c.in(0), c.in(1), c.in(2), p));
}

} // namespace

void add_nn_converters(ConverterTable& t) {
    t["RoiAlign"] = roi_align;
    t["GridSample"] = grid_sample;
    t["Conv"] = conv;
    t["ConvTranspose"] = conv_transpose;
    t["MaxPool"] = pool(PoolMode::MAX);
    t["AveragePool"] = pool(PoolMode::AVERAGE);
    t["BatchNormalization"] = batchnorm_op;
    t["InstanceNormalization"] = instance_norm;
    t["MeanVarianceNormalization"] = mean_variance_norm;
    t["LRN"] = lrn;
    t["NegativeLogLikelihoodLoss"] = nll_loss;
    t["SoftmaxCrossEntropyLoss"] = softmax_cross_entropy;
    t["Resize"] = resize;
    t["Upsample"] = resize;
}

} // namespace braid::onnx_import
