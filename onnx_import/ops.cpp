// ONNX op → braid operators, one converter per op type. Ops that are compositions in ONNX's
// own definition (Gemm, Softplus, HardSigmoid, ...) are built from braid operators here;
// inputs that braid takes as params (shapes, axes, pads) must be constants.
#include "onnx_internal.h"

#include "operators/batch_norm.h"
#include "operators/concat_split.h"
#include "operators/conv.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/indexing.h"
#include "operators/matmul.h"
#include "operators/normalization.h"
#include "operators/pooling.h"
#include "operators/reduce.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace braid::onnx_import {

namespace {

using namespace braid::opr;

int norm_axis(const NodeCtx& c, int64_t axis, size_t rank) {
    int64_t r = int64_t(rank);
    if (axis < -r || axis >= r)
        c.invalid(fmt::format("axis {} is out of range for rank {}", axis, rank));
    return int(axis < 0 ? axis + r : axis);
}

size_t rank_of(const NodeCtx& c, const SymbolVar& v) {
    if (!v.node()->shape_known()) c.unsupported("an input whose rank is known only at run time");
    return v.shape().ndim();
}

SymbolVarArray one(SymbolVar v) {
    return {v};
}

template <SymbolVar (*Fn)(SymbolVar)> Converter unary() {
    return [](const NodeCtx& c) { return one(Fn(c.in(0))); };
}

template <SymbolVar (*Fn)(SymbolVar, SymbolVar)> Converter binary() {
    return [](const NodeCtx& c) { return one(Fn(c.in(0), c.in(1))); };
}

//! Max, Min, Sum, Mean: any number of inputs, broadcast.
Converter variadic(SymbolVar (*fn)(SymbolVar, SymbolVar), bool mean) {
    return [fn, mean](const NodeCtx& c) {
        SymbolVar acc = c.in(0);
        for (size_t i = 1; i < c.nr_inputs(); ++i) acc = fn(acc, c.in(i));
        if (mean) acc = acc / double(c.nr_inputs());
        return one(acc);
    };
}

std::vector<int> axes_of(const NodeCtx& c, size_t rank, size_t input) {
    std::vector<int64_t> raw = c.has_attr("axes")   ? c.attr_ints("axes")
                               : c.has_input(input) ? c.ints_input(input)
                                                    : std::vector<int64_t>{};
    std::vector<int> axes;
    for (int64_t a : raw) axes.push_back(norm_axis(c, a, rank));
    std::sort(axes.begin(), axes.end());
    return axes;
}

Converter reduce(SymbolVar (*fn)(SymbolVar, std::vector<int>, bool)) {
    return [fn](const NodeCtx& c) {
        SymbolVar x = c.in(0);
        size_t rank = rank_of(c, x);
        auto axes = axes_of(c, rank, 1);
        bool keep = c.attr_int("keepdims", 1) != 0;
        if (axes.empty()) {
            if (c.attr_int("noop_with_empty_axes", 0)) return one(x);
            for (size_t i = 0; i < rank; ++i) axes.push_back(int(i));
        }
        return one(fn(x, axes, keep));
    };
}

//! 1-D spatial params as their 2-D form over a unit height: {a} -> {def, a}, pads {a, b} ->
//! {0, a, 0, b}.
std::vector<int64_t> as_2d(std::vector<int64_t> v, int64_t def, bool pads) {
    if (v.empty()) return v;
    if (pads) return {0, v[0], 0, v[1]};
    return {def, v[0]};
}

SymbolVarArray conv(const NodeCtx& c) {
    SymbolVar x = c.in(0), w = c.in(1);
    size_t rank = rank_of(c, x);
    if (rank != 4 && rank != 3)
        c.unsupported(fmt::format("{}-D convolutions (only 1-D and 2-D)", rank - 2));
    bool one_d = rank == 3;
    if (one_d) x = expand_dims(x, {2}), w = expand_dims(w, {2});
    if (c.attr_string("auto_pad", "NOTSET") != "NOTSET" &&
        c.attr_string("auto_pad", "NOTSET") != "VALID")
        c.unsupported("auto_pad " + c.attr_string("auto_pad", ""));
    auto pads = c.attr_ints("pads"), strides = c.attr_ints("strides"),
         dil = c.attr_ints("dilations");
    if (one_d)
        pads = as_2d(pads, 0, true), strides = as_2d(strides, 1, false), dil = as_2d(dil, 1, false);
    if (pads.size() == 4 && (pads[0] != pads[2] || pads[1] != pads[3]))
        c.unsupported("asymmetric pads");
    Conv2dParam p;
    if (pads.size() == 4) p.pad_h = int(pads[0]), p.pad_w = int(pads[1]);
    if (strides.size() == 2) p.stride_h = int(strides[0]), p.stride_w = int(strides[1]);
    if (dil.size() == 2) p.dilation_h = int(dil[0]), p.dilation_w = int(dil[1]);
    p.groups = int(c.attr_int("group", 1));
    SymbolVar y = Conv2d::make(x, w, p);
    if (c.has_input(2)) {
        SymbolVar b = c.in(2);
        y = y + b.reshape({1, -1, 1, 1});
    }
    return one(one_d ? squeeze(y, {2}) : y);
}

Converter pool(PoolMode mode) {
    return [mode](const NodeCtx& c) {
        SymbolVar x = c.in(0);
        size_t rank = rank_of(c, x);
        if (rank != 4 && rank != 3)
            c.unsupported(fmt::format("{}-D pooling (only 1-D and 2-D)", rank - 2));
        bool one_d = rank == 3;
        if (one_d) x = expand_dims(x, {2});
        if (c.attr_string("auto_pad", "NOTSET") != "NOTSET")
            c.unsupported("auto_pad " + c.attr_string("auto_pad", ""));
        if (c.attr_int("ceil_mode", 0)) c.unsupported("ceil_mode 1");
        if (c.node().output_size() > 1 && !c.node().output(1).empty())
            c.unsupported("the Indices output");
        auto k = c.attr_ints("kernel_shape"), pads = c.attr_ints("pads"),
             strides = c.attr_ints("strides"), dil = c.attr_ints("dilations");
        if (one_d)
            k = as_2d(k, 1, false), pads = as_2d(pads, 0, true), strides = as_2d(strides, 1, false);
        if (k.size() != 2) c.invalid("kernel_shape must have one value per spatial dim");
        if (pads.size() == 4 && (pads[0] != pads[2] || pads[1] != pads[3]))
            c.unsupported("asymmetric pads");
        for (int64_t d : dil)
            if (d != 1) c.unsupported("dilations other than 1");
        PoolingParam p;
        p.mode = mode;
        p.window_h = int(k[0]), p.window_w = int(k[1]);
        p.stride_h = strides.size() == 2 ? int(strides[0]) : 1;
        p.stride_w = strides.size() == 2 ? int(strides[1]) : 1;
        if (pads.size() == 4) p.pad_h = int(pads[0]), p.pad_w = int(pads[1]);
        p.count_include_pad = c.attr_int("count_include_pad", 0) != 0;
        SymbolVar y = Pooling::make(x, p);
        return one(one_d ? squeeze(y, {2}) : y);
    };
}

SymbolVarArray gemm(const NodeCtx& c) {
    SymbolVar a = c.in(0), b = c.in(1);
    SymbolVar y = matmul(a, b, c.attr_int("transA", 0) != 0, c.attr_int("transB", 0) != 0);
    float alpha = c.attr_float("alpha", 1.f), beta = c.attr_float("beta", 1.f);
    if (alpha != 1.f) y = y * double(alpha);
    if (c.has_input(2)) y = y + (beta != 1.f ? c.in(2) * double(beta) : c.in(2));
    return one(y);
}

SymbolVarArray matmul_nd(const NodeCtx& c) {
    SymbolVar a = c.in(0), b = c.in(1);
    size_t ra = rank_of(c, a), rb = rank_of(c, b);
    if (ra == 2 && rb == 2) return one(matmul(a, b));
    if (ra < 2 || rb < 2) c.unsupported("MatMul of a 1-D input");
    return one(batched_matmul(a, b));
}

SymbolVarArray reshape(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    auto shape = c.ints_input(1);
    bool allowzero = c.attr_int("allowzero", 0) != 0;
    std::vector<long> target;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == 0 && !allowzero) {
            if (i >= rank_of(c, x)) c.invalid("a 0 dim past the input's rank");
            target.push_back(long(x.shape()[i]));
        } else {
            target.push_back(long(shape[i]));
        }
    }
    return one(x.reshape(target));
}

SymbolVarArray flatten(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    int64_t axis = c.attr_int("axis", 1);
    int a = axis == int64_t(rank) ? int(rank) : norm_axis(c, axis, rank);
    long outer = 1;
    for (int i = 0; i < a; ++i) outer *= long(x.shape()[size_t(i)]);
    return one(x.reshape({outer, -1}));
}

SymbolVarArray transpose_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    auto perm = c.attr_ints("perm");
    return one(transpose(x, std::vector<int>(perm.begin(), perm.end())));
}

SymbolVarArray squeeze_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    return one(squeeze(x, axes_of(c, rank_of(c, x), 1)));
}

SymbolVarArray unsqueeze_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    std::vector<int64_t> raw = c.has_attr("axes") ? c.attr_ints("axes") : c.ints_input(1);
    size_t out_rank = rank_of(c, x) + raw.size();
    std::vector<int> axes;
    for (int64_t a : raw) axes.push_back(norm_axis(c, a, out_rank));
    std::sort(axes.begin(), axes.end());
    return one(expand_dims(x, axes));
}

SymbolVarArray concat_op(const NodeCtx& c) {
    SymbolVarArray ins;
    for (size_t i = 0; i < c.nr_inputs(); ++i) ins.push_back(c.in(i));
    return one(concat(ins, norm_axis(c, c.attr_int("axis", 0), rank_of(c, ins.at(0)))));
}

Converter softmax_op(bool log) {
    return [log](const NodeCtx& c) {
        SymbolVar x = c.in(0);
        size_t rank = rank_of(c, x);
        int64_t def = c.opset() >= 13 ? -1 : 1;
        int axis = norm_axis(c, c.attr_int("axis", def), rank);
        if (c.opset() < 13 && axis != int(rank) - 1) {
            // Before opset 13: softmax over the input flattened to 2-D at `axis`.
            auto shape = x.shape();
            long outer = 1;
            for (int i = 0; i < axis; ++i) outer *= long(shape[size_t(i)]);
            SymbolVar flat = x.reshape({outer, -1});
            SymbolVar y = log ? log_softmax(flat, 1) : softmax(flat, 1);
            std::vector<long> back(shape.dims().begin(), shape.dims().end());
            return one(y.reshape(back));
        }
        return one(log ? log_softmax(x, axis) : softmax(x, axis));
    };
}

//! Indices as int32 with negative ones counted from the end of a dim of size `dim`.
SymbolVar index_of(SymbolVar idx, size_t dim) {
    if (idx.dtype() != dtype::Int32()) idx = TypeCvt::make(idx, dtype::Int32());
    return where(less(idx, scalar_like(idx, 0)), idx + double(dim), idx);
}

//! ONNX Gather (numpy take): out = x[:axis] + indices' shape + x[axis + 1:]. The axis is moved
//! to the front and the rest flattened, rows are taken with Embedding, and the dims are put
//! back in order.
SymbolVarArray gather_op(const NodeCtx& c) {
    SymbolVar x = c.in(0), idx = c.in(1);
    size_t rank = rank_of(c, x), k = rank_of(c, idx);
    int axis = norm_axis(c, c.attr_int("axis", 0), rank);
    const TensorShape xs = x.shape();
    SymbolVar ids = index_of(k == 0 ? idx.reshape({1}) : idx, xs[size_t(axis)]);
    size_t kk = std::max<size_t>(k, 1);
    std::vector<int> perm{axis};
    std::vector<long> rest;
    for (size_t d = 0; d < rank; ++d)
        if (int(d) != axis) perm.push_back(int(d)), rest.push_back(long(xs[d]));
    SymbolVar table = transpose(x, perm).reshape({long(xs[size_t(axis)]), -1});
    SymbolVar rows = embedding(table, ids); // ids' shape + [product of rest]
    std::vector<long> shape;
    for (size_t d = 0; d < kk; ++d) shape.push_back(long(ids.shape()[d]));
    shape.insert(shape.end(), rest.begin(), rest.end());
    SymbolVar y = rows.reshape(shape); // [ids..., before..., after...]
    std::vector<int> back;
    for (int d = 0; d < axis; ++d) back.push_back(int(kk) + d);
    for (size_t d = 0; d < kk; ++d) back.push_back(int(d));
    for (size_t d = size_t(axis) + 1; d < rank; ++d) back.push_back(int(kk + d - 1));
    y = transpose(y, back);
    return one(k == 0 ? squeeze(y, {axis}) : y);
}

SymbolVarArray cast_op(const NodeCtx& c) {
    DType to = dtype_of(int32_t(c.attr_int("to", 0)), c.where());
    return one(TypeCvt::make(c.in(0), to));
}

SymbolVarArray clip_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    if (c.has_attr("min") || c.has_attr("max"))
        return one(clip(x, c.attr_float("min", -INFINITY), c.attr_float("max", INFINITY)));
    SymbolVar y = x;
    if (c.has_input(1)) y = maximum(y, c.in(1));
    if (c.has_input(2)) y = minimum(y, c.in(2));
    return one(y);
}

SymbolVarArray arg_op(const NodeCtx& c, bool max) {
    SymbolVar x = c.in(0);
    if (c.attr_int("select_last_index", 0)) c.unsupported("select_last_index 1");
    int axis = norm_axis(c, c.attr_int("axis", 0), rank_of(c, x));
    bool keep = c.attr_int("keepdims", 1) != 0;
    SymbolVar y = max ? argmax(x, axis, keep) : argmin(x, axis, keep);
    return one(y.dtype() == dtype::Int64() ? y : TypeCvt::make(y, dtype::Int64()));
}

SymbolVarArray batchnorm_op(const NodeCtx& c) {
    if (c.node().output_size() > 1) c.unsupported("training mode (more than one output)");
    return one(
        batch_norm(c.in(0), c.in(1), c.in(2), c.in(3), c.in(4), c.attr_float("epsilon", 1e-5f)));
}

SymbolVarArray leaky_relu(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    double alpha = c.attr_float("alpha", 0.01f);
    return one(where(less(x, scalar_like(x, 0)), x * alpha, x));
}

SymbolVarArray elu(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    double alpha = c.attr_float("alpha", 1.f);
    return one(where(less(x, scalar_like(x, 0)), expm1(x) * alpha, x));
}

SymbolVarArray selu(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    double alpha = c.attr_float("alpha", 1.67326319217681884765625f);
    double gamma = c.attr_float("gamma", 1.05070102214813232421875f);
    return one(where(less(x, scalar_like(x, 0)), expm1(x) * (alpha * gamma), x * gamma));
}

SymbolVarArray hard_sigmoid(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    double alpha = c.attr_float("alpha", 0.2f), beta = c.attr_float("beta", 0.5f);
    return one(clip(x * alpha + beta, 0.0, 1.0));
}

SymbolVarArray softplus(const NodeCtx& c) {
    return one(log1p(exp(c.in(0))));
}

SymbolVarArray softsign(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    return one(x / (abs(x) + 1.0));
}

SymbolVarArray reciprocal(const NodeCtx& c) {
    return one(1.0 / c.in(0));
}

SymbolVarArray identity(const NodeCtx& c) {
    return one(c.in(0));
}

SymbolVarArray greater(const NodeCtx& c) {
    return one(less(c.in(1), c.in(0)));
}

SymbolVarArray greater_equal(const NodeCtx& c) {
    return one(less_equal(c.in(1), c.in(0)));
}

SymbolVarArray expand_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    auto shape = c.ints_input(1);
    // Numpy broadcast of x with `shape` (either side may have 1s).
    size_t rank = std::max(rank_of(c, x), shape.size());
    std::vector<size_t> target(rank);
    for (size_t i = 0; i < rank; ++i) {
        size_t xi = i + x.shape().ndim() >= rank ? x.shape()[i + x.shape().ndim() - rank] : 1;
        int64_t si = i + shape.size() >= rank ? shape[i + shape.size() - rank] : 1;
        target[i] = si == 1 ? xi : size_t(si);
    }
    return one(Broadcast::make(x, TensorShape(target)));
}

SymbolVarArray slice_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    std::vector<int64_t> starts, ends, axes, steps;
    if (c.has_attr("starts")) {
        starts = c.attr_ints("starts"), ends = c.attr_ints("ends"), axes = c.attr_ints("axes");
    } else {
        starts = c.ints_input(1), ends = c.ints_input(2);
        if (c.has_input(3)) axes = c.ints_input(3);
        if (c.has_input(4)) steps = c.ints_input(4);
    }
    if (axes.empty())
        for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() ||
        steps.size() != starts.size())
        c.invalid("starts, ends, axes and steps differ in length");
    std::vector<AxisIndex> items;
    for (size_t i = 0; i < starts.size(); ++i) {
        auto clampl = [](int64_t v) {
            return long(std::clamp<int64_t>(v, -(int64_t(1) << 62), int64_t(1) << 62));
        };
        items.push_back(AxisIndex::slice(norm_axis(c, axes[i], rank), clampl(starts[i]),
                                         clampl(ends[i]), long(steps[i])));
    }
    return one(subtensor(x, items));
}

SymbolVarArray constant_of_shape(const NodeCtx& c) {
    auto dims = c.ints_input(0);
    std::vector<size_t> shape;
    for (int64_t d : dims) {
        if (d < 0) c.invalid(fmt::format("negative dim {}", d));
        shape.push_back(size_t(d));
    }
    double value = 0;
    DType dt = dtype::Float32();
    if (auto* a = c.attr("value"); a && a->has_t()) {
        Tensor v = tensor_of(a->t(), ".", c.where());
        dt = v.dtype();
        Tensor f = v; // convert through float32 for the value
        if (dt == dtype::Float32())
            value = f.ptr<float>()[0];
        else if (dt == dtype::Int64())
            value = double(f.ptr<int64_t>()[0]);
        else if (dt == dtype::Int32())
            value = f.ptr<int32_t>()[0];
        else
            c.unsupported(fmt::format("value of dtype {}", dt.name()));
    }
    return one(fill(c.graph(), TensorShape(shape), value, dt));
}

SymbolVarArray shape_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    if (!x.node()->shape_known()) {
        if (c.has_attr("start") || c.has_attr("end"))
            c.unsupported("start or end attributes on a shape known only at run time");
        return one(TypeCvt::make(x.symshape(), dtype::Int64()));
    }
    // A static shape is a constant: later Reshape, Slice or Expand nodes can read it.
    int64_t rank = int64_t(x.shape().ndim());
    auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
    int64_t start = clampi(c.attr_int("start", 0)), end = clampi(c.attr_int("end", rank));
    size_t n = size_t(std::max<int64_t>(end - start, 0));
    Tensor t(TensorShape{n}, dtype::Int64());
    for (size_t i = 0; i < n; ++i) t.ptr<int64_t>()[i] = int64_t(x.shape()[size_t(start) + i]);
    return one(c.known_output(0, t));
}

SymbolVarArray size_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    if (!x.node()->shape_known()) c.unsupported("a shape known only at run time");
    Tensor t(TensorShape{}, dtype::Int64());
    t.ptr<int64_t>()[0] = int64_t(x.shape().total_nr_elems());
    return one(c.known_output(0, t));
}

SymbolVarArray dropout_op(const NodeCtx& c) {
    if (c.attr_int("training_mode", 0) || (c.has_input(2) && !c.constant(2)))
        c.unsupported("training mode");
    if (const Tensor* t = c.constant(2); t && t->dtype() == dtype::Bool() && t->ptr<bool>()[0])
        c.unsupported("training mode");
    SymbolVar x = c.in(0);
    SymbolVarArray outs{x};
    if (c.node().output_size() > 1) outs.push_back(TypeCvt::make(full_like(x, 1.0), dtype::Bool()));
    return outs;
}

SymbolVarArray prelu(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    return one(where(less(x, scalar_like(x, 0)), x * c.in(1), x));
}

SymbolVarArray mod_op(const NodeCtx& c) {
    if (c.attr_int("fmod", 0)) c.unsupported("fmod 1");
    return one(mod(c.in(0), c.in(1)));
}

SymbolVarArray cast_like(const NodeCtx& c) {
    return one(TypeCvt::make(c.in(0), c.in(1).dtype()));
}

SymbolVarArray split_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    int axis = norm_axis(c, c.attr_int("axis", 0), rank_of(c, x));
    std::vector<int64_t> sizes = c.has_attr("split") ? c.attr_ints("split")
                                 : c.has_input(1)    ? c.ints_input(1)
                                                     : std::vector<int64_t>{};
    if (sizes.empty()) return split(x, axis, size_t(c.node().output_size()));
    std::vector<size_t> s;
    for (int64_t v : sizes) {
        if (v < 0) c.invalid(fmt::format("negative split size {}", v));
        s.push_back(size_t(v));
    }
    return split(x, axis, s);
}

SymbolVarArray where_op(const NodeCtx& c) {
    return one(where(c.in(0), c.in(1), c.in(2)));
}

SymbolVarArray pow_op(const NodeCtx& c) {
    SymbolVar a = c.in(0), b = c.in(1);
    if (b.dtype() != a.dtype()) b = TypeCvt::make(b, a.dtype());
    return one(pow(a, b));
}

SymbolVarArray global_avg_pool(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    std::vector<int> axes;
    for (size_t i = 2; i < rank; ++i) axes.push_back(int(i));
    return one(reduce_mean(x, axes, true));
}

SymbolVarArray global_max_pool(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    std::vector<int> axes;
    for (size_t i = 2; i < rank; ++i) axes.push_back(int(i));
    return one(reduce_max(x, axes, true));
}

SymbolVarArray layer_norm_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    int axis = norm_axis(c, c.attr_int("axis", -1), rank);
    float eps = c.attr_float("epsilon", 1e-5f);
    if (c.attr_int("stash_type", 1) != 1) c.unsupported("stash_type other than float32");
    SymbolVarArray outs{
        layer_norm(x, c.in(1), c.has_input(2) ? c.in(2) : SymbolVar{}, rank - size_t(axis), eps)};
    if (c.node().output_size() > 1) {
        // Mean and 1 / sqrt(variance + eps) over the normalized dims, kept as size-1 dims.
        std::vector<int> axes;
        for (size_t i = size_t(axis); i < rank; ++i) axes.push_back(int(i));
        SymbolVar mean = reduce_mean(x, axes, true);
        outs.push_back(mean);
        outs.push_back(rsqrt(reduce_mean(square(x - mean), axes, true) + double(eps)));
    }
    return outs;
}

Converter reduce_composed(SymbolVar (*pre)(SymbolVar),
                          SymbolVar (*fn)(SymbolVar, std::vector<int>, bool),
                          SymbolVar (*post)(SymbolVar)) {
    return [pre, fn, post](const NodeCtx& c) {
        SymbolVar x = c.in(0);
        size_t rank = rank_of(c, x);
        auto axes = axes_of(c, rank, 1);
        bool keep = c.attr_int("keepdims", 1) != 0;
        if (axes.empty())
            for (size_t i = 0; i < rank; ++i) axes.push_back(int(i));
        SymbolVar y = fn(pre ? pre(x) : x, axes, keep);
        return one(post ? post(y) : y);
    };
}

SymbolVarArray pad_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    std::string mode = c.attr_string("mode", "constant");
    if (mode != "constant") c.unsupported("mode \"" + mode + "\" (only constant)");
    auto pads = c.has_attr("pads") ? c.attr_ints("pads") : c.ints_input(1);
    std::vector<int64_t> axes;
    if (c.has_input(3))
        axes = c.ints_input(3);
    else
        for (size_t i = 0; i < rank; ++i) axes.push_back(int64_t(i));
    if (pads.size() != 2 * axes.size())
        c.invalid(fmt::format("{} pads for {} axes", pads.size(), axes.size()));
    double value = c.attr_float("value", 0.f);
    if (const Tensor* v = c.constant(2); v && v->shape().total_nr_elems() == 1) {
        float f;
        convert_elements(v->dtype(), v->raw_ptr(), dtype::Float32(), &f, 1);
        value = f;
    } else if (c.has_input(2) && !c.constant(2)) {
        c.unsupported("a constant_value that is not a constant");
    }
    std::vector<size_t> shape = x.shape().dims();
    std::vector<AxisIndex> items;
    for (size_t i = 0; i < axes.size(); ++i) {
        int a = norm_axis(c, axes[i], rank);
        int64_t before = pads[i], after = pads[i + axes.size()];
        if (before < 0 || after < 0) c.unsupported("negative pads (cropping)");
        if (before == 0 && after == 0) continue;
        items.push_back(
            AxisIndex::slice(a, long(before), long(before + int64_t(shape[size_t(a)]))));
        shape[size_t(a)] += size_t(before + after);
    }
    if (items.empty()) return one(x);
    SymbolVar base = fill(c.graph(), TensorShape(shape), value, x.dtype());
    return one(set_subtensor(base, x, items));
}

SymbolVarArray trilu(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    if (rank < 2) c.invalid("the input needs at least 2 dims");
    size_t n = x.shape()[rank - 2], m = x.shape()[rank - 1];
    // Column minus row index for every position; kept where it is >= k (upper) or <= k.
    SymbolVar rows = arange(c.graph(), 0, double(n)).reshape({long(n), 1});
    SymbolVar cols = arange(c.graph(), 0, double(m)).reshape({1, long(m)});
    SymbolVar d = cols - rows;
    // k: a constant, or a scalar input known only at run time.
    SymbolVar k = !c.has_input(1) ? scalar_like(d, 0)
                  : c.constant(1) ? scalar_like(d, double(c.ints_input(1).at(0)))
                                  : TypeCvt::make(c.in(1), dtype::Float32());
    SymbolVar keep = c.attr_int("upper", 1) ? less_equal(k, d) : less_equal(d, k);
    return one(where(keep, x, zeros_like(x)));
}

SymbolVarArray hardmax(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    int axis = norm_axis(c, c.attr_int("axis", c.opset() >= 13 ? -1 : 1), rank);
    if (c.opset() < 13 && axis != int(rank) - 1)
        c.unsupported("axis other than the last before opset 13 (2-D flattening)");
    size_t dim = x.shape()[size_t(axis)];
    std::vector<long> shape(rank, 1);
    shape[size_t(axis)] = long(dim);
    SymbolVar idx = arange(c.graph(), 0, double(dim), 1, dtype::Int32()).reshape(shape);
    SymbolVar best = argmax(x, axis, true);
    if (best.dtype() != dtype::Int32()) best = TypeCvt::make(best, dtype::Int32());
    return one(TypeCvt::make(equal(idx, best), x.dtype()));
}

//! GatherElements is braid's Gather (numpy take_along_axis).
SymbolVarArray gather_elements(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    int axis = norm_axis(c, c.attr_int("axis", 0), rank_of(c, x));
    return one(gather(x, index_of(c.in(1), x.shape()[size_t(axis)]), axis));
}

const std::map<std::string, Converter>& table() {
    static const std::map<std::string, Converter> t = {
        {"Abs", unary<abs>()},
        {"Neg", unary<neg>()},
        {"Relu", unary<relu>()},
        {"Exp", unary<exp>()},
        {"Log", unary<log>()},
        {"Sqrt", unary<sqrt>()},
        {"Sigmoid", unary<sigmoid>()},
        {"Tanh", unary<tanh>()},
        {"Sin", unary<sin>()},
        {"Cos", unary<cos>()},
        {"Floor", unary<floor>()},
        {"Ceil", unary<ceil>()},
        {"Round", unary<round>()},
        {"Erf", unary<erf>()},
        {"Sign", unary<sign>()},
        {"Not", unary<logical_not>()},
        {"Reciprocal", reciprocal},
        {"Identity", identity},
        {"Dropout", dropout_op},
        {"Softplus", softplus},
        {"Softsign", softsign},
        {"LeakyRelu", leaky_relu},
        {"Elu", elu},
        {"Selu", selu},
        {"HardSigmoid", hard_sigmoid},
        {"Add", binary<add>()},
        {"Sub", binary<sub>()},
        {"Mul", binary<mul>()},
        {"Div", binary<true_div>()},
        {"Pow", pow_op},
        {"Equal", binary<equal>()},
        {"Less", binary<less>()},
        {"LessOrEqual", binary<less_equal>()},
        {"Greater", greater},
        {"GreaterOrEqual", greater_equal},
        {"And", binary<logical_and>()},
        {"Or", binary<logical_or>()},
        {"Xor", binary<logical_xor>()},
        {"Where", where_op},
        {"Max", variadic(maximum, false)},
        {"Min", variadic(minimum, false)},
        {"Sum", variadic(add, false)},
        {"Mean", variadic(add, true)},
        {"Clip", clip_op},
        {"MatMul", matmul_nd},
        {"Gemm", gemm},
        {"Conv", conv},
        {"MaxPool", pool(PoolMode::MAX)},
        {"AveragePool", pool(PoolMode::AVERAGE)},
        {"GlobalAveragePool", global_avg_pool},
        {"GlobalMaxPool", global_max_pool},
        {"BatchNormalization", batchnorm_op},
        {"LayerNormalization", layer_norm_op},
        {"Reshape", reshape},
        {"Flatten", flatten},
        {"Transpose", transpose_op},
        {"Squeeze", squeeze_op},
        {"Unsqueeze", unsqueeze_op},
        {"Concat", concat_op},
        {"Softmax", softmax_op(false)},
        {"LogSoftmax", softmax_op(true)},
        {"Gather", gather_op},
        {"Cast", cast_op},
        {"ReduceSum", reduce(reduce_sum)},
        {"ReduceMean", reduce(reduce_mean)},
        {"ReduceMax", reduce(reduce_max)},
        {"ReduceMin", reduce(reduce_min)},
        {"ReduceProd", reduce(reduce_prod)},
        {"ReduceSumSquare", reduce(reduce_sum_sqr)},
        {"ArgMax", [](const NodeCtx& c) { return arg_op(c, true); }},
        {"ArgMin", [](const NodeCtx& c) { return arg_op(c, false); }},
        {"Expand", expand_op},
        {"Slice", slice_op},
        {"ConstantOfShape", constant_of_shape},
        {"Shape", shape_op},
        {"Size", size_op},
        {"Pad", pad_op},
        {"GatherElements", gather_elements},
        {"Trilu", trilu},
        {"Hardmax", hardmax},
        {"PRelu", prelu},
        {"Mod", mod_op},
        {"CastLike", cast_like},
        {"Split", split_op},
        {"ReduceL1", reduce_composed(abs, reduce_sum, nullptr)},
        {"ReduceL2", reduce_composed(nullptr, reduce_sum_sqr, sqrt)},
        {"ReduceLogSum", reduce_composed(nullptr, reduce_sum, log)},
        {"ReduceLogSumExp", reduce_composed(exp, reduce_sum, log)},
    };
    return t;
}

} // namespace

const Converter* find_converter(const std::string& op_type) {
    auto it = table().find(op_type);
    return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> converter_names() {
    std::vector<std::string> names;
    for (auto& [name, _] : table()) names.push_back(name);
    return names;
}

} // namespace braid::onnx_import
