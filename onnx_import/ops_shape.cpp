// ONNX shape and indexing ops → braid: reshapes, transposes, squeezes, concatenation, slicing,
// padding, tiling, gathers and the shape queries. Their shape, axes and bounds arguments must be
// known at import (NodeCtx::ints_input: constants, folded values or bound shape inputs).
#include "op_util.h"

#include "operators/concat_split.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/indexing.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

#include <algorithm>

namespace braid::onnx_import {

using namespace braid::opr;

namespace {

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

//! Indices as int32 with negative ones counted from the end of a dim of size `dim`.
SymbolVar index_of(SymbolVar idx, size_t dim) {
    if (idx.dtype() != dtype::Int32()) idx = TypeCvt::make(idx, dtype::Int32());
    return where(less(idx, scalar_like(idx, 0)), idx + double(dim), idx);
}

//! ONNX Gather is numpy take.
SymbolVarArray gather_op(const NodeCtx& c) {
    SymbolVar x = c.in(0), idx = c.in(1);
    int axis = norm_axis(c, c.attr_int("axis", 0), rank_of(c, x));
    rank_of(c, idx);
    return one(take(x, axis, index_of(idx, x.shape()[size_t(axis)])));
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

SymbolVarArray split_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    int axis = norm_axis(c, c.attr_int("axis", 0), rank_of(c, x));
    std::vector<int64_t> sizes = c.has_attr("split") ? c.attr_ints("split")
                                 : c.has_input(1)    ? c.ints_input(1)
                                                     : std::vector<int64_t>{};
    if (sizes.empty() && c.has_attr("num_outputs")) {
        // Split-18: parts of ceil(dim / n), the last one smaller when n does not divide dim.
        int64_t n = c.attr_int("num_outputs", 0), dim = int64_t(x.shape()[size_t(axis)]);
        if (n != c.node().output_size())
            c.invalid(fmt::format("num_outputs {} but {} outputs", n, c.node().output_size()));
        if (n < 1) c.invalid(fmt::format("num_outputs {}", n));
        int64_t part = (dim + n - 1) / n;
        if (part * (n - 1) > dim)
            c.invalid(
                fmt::format("an axis of {} cannot be split into {} parts of {}", dim, n, part));
        sizes.assign(size_t(n - 1), part);
        sizes.push_back(dim - part * (n - 1));
    }
    if (sizes.empty()) return split(x, axis, size_t(c.node().output_size()));
    std::vector<size_t> s;
    for (int64_t v : sizes) {
        if (v < 0) c.invalid(fmt::format("negative split size {}", v));
        s.push_back(size_t(v));
    }
    return split(x, axis, s);
}

//! Positions of x along an axis of size `dim` for each output position of a pad by `before` and
//! `after` in mode "edge" (clamped) or "reflect" (mirrored without repeating the edge).
std::vector<int64_t> pad_positions(const NodeCtx& c, const std::string& mode, int64_t dim,
                                   int64_t before, int64_t after) {
    check_size(c, double(dim) + double(before) + double(after), "the padded axis");
    std::vector<int64_t> idx;
    if (mode == "reflect" && dim == 1) return std::vector<int64_t>(size_t(dim + before + after), 0);
    for (int64_t o = -before; o < dim + after; ++o) {
        int64_t i = o;
        if (mode == "edge") {
            i = std::clamp<int64_t>(o, 0, dim - 1);
        } else {
            int64_t period = 2 * (dim - 1);
            i = ((o % period) + period) % period;
            if (i >= dim) i = period - i;
        }
        idx.push_back(i);
    }
    if (dim == 0) c.invalid("cannot pad an empty dim in mode " + mode);
    return idx;
}

SymbolVarArray pad_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    std::string mode = c.attr_string("mode", "constant");
    if (mode != "constant" && mode != "edge" && mode != "reflect")
        c.unsupported("mode \"" + mode + "\"");
    auto pads = c.has_attr("pads") ? c.attr_ints("pads") : c.ints_input(1);
    std::vector<int64_t> axes;
    if (c.has_input(3))
        axes = c.ints_input(3);
    else
        for (size_t i = 0; i < rank; ++i) axes.push_back(int64_t(i));
    if (pads.size() != 2 * axes.size())
        c.invalid(fmt::format("{} pads for {} axes", pads.size(), axes.size()));
    double value = c.attr_float("value", 0.f);
    if (c.has_input(2)) {
        std::vector<float> v = c.floats_input(2);
        if (v.size() != 1) c.invalid("constant_value must hold one value");
        value = v[0];
    }
    for (size_t i = 0; i < axes.size(); ++i) {
        int a = norm_axis(c, axes[i], rank);
        int64_t before = pads[i], after = pads[i + axes.size()];
        if (mode == "constant" || (before <= 0 && after <= 0)) {
            x = pad_axis(x, a, before, after, value);
            continue;
        }
        // Negative pads crop first; the positive ones then index into what is left.
        x = pad_axis(x, a, std::min<int64_t>(before, 0), std::min<int64_t>(after, 0), 0);
        int64_t dim = int64_t(x.shape()[size_t(a)]);
        x = take(
            x, a,
            pad_positions(c, mode, dim, std::max<int64_t>(before, 0), std::max<int64_t>(after, 0)));
    }
    return one(x);
}

//! GatherElements is braid's Gather (numpy take_along_axis).
SymbolVarArray gather_elements(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    int axis = norm_axis(c, c.attr_int("axis", 0), rank_of(c, x));
    return one(gather(x, index_of(c.in(1), x.shape()[size_t(axis)]), axis));
}

//! x repeated `repeats[i]` times along each axis: positions i % dim along each repeated axis.
SymbolVarArray tile(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    auto reps = c.ints_input(1);
    if (reps.size() != rank) c.invalid(fmt::format("{} repeats for rank {}", reps.size(), rank));
    for (size_t i = 0; i < rank; ++i) {
        if (reps[i] < 0) c.invalid(fmt::format("negative repeat {}", reps[i]));
        if (reps[i] == 1) continue;
        int64_t dim = int64_t(x.shape()[i]);
        check_size(c, double(reps[i]) * double(dim), "the tiled axis");
        std::vector<int64_t> idx;
        for (int64_t k = 0; k < reps[i] * dim; ++k) idx.push_back(k % dim);
        x = take(x, int(i), idx);
    }
    return one(x);
}

SymbolVarArray depth_to_space(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    if (rank_of(c, x) != 4) c.invalid("the input must be 4-D");
    long b = c.attr_int("blocksize", 0);
    if (b <= 0) c.invalid("blocksize must be positive");
    auto s = x.shape();
    long n = long(s[0]), ch = long(s[1]), h = long(s[2]), w = long(s[3]);
    if (ch % (b * b)) c.invalid(fmt::format("{} channels do not divide by blocksize^2", ch));
    long oc = ch / (b * b);
    SymbolVar y;
    if (c.attr_string("mode", "DCR") == "DCR")
        y = transpose(x.reshape({n, b, b, oc, h, w}), {0, 3, 4, 1, 5, 2});
    else
        y = transpose(x.reshape({n, oc, b, b, h, w}), {0, 1, 4, 2, 5, 3});
    return one(y.reshape({n, oc, h * b, w * b}));
}

SymbolVarArray space_to_depth(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    if (rank_of(c, x) != 4) c.invalid("the input must be 4-D");
    long b = c.attr_int("blocksize", 0);
    if (b <= 0) c.invalid("blocksize must be positive");
    auto s = x.shape();
    long n = long(s[0]), ch = long(s[1]), h = long(s[2]), w = long(s[3]);
    if (h % b || w % b) c.invalid("spatial dims do not divide by blocksize");
    SymbolVar y = transpose(x.reshape({n, ch, h / b, b, w / b, b}), {0, 3, 5, 1, 2, 4});
    return one(y.reshape({n, ch * b * b, h / b, w / b}));
}

} // namespace

void add_shape_converters(ConverterTable& t) {
    t["Reshape"] = reshape;
    t["Flatten"] = flatten;
    t["Transpose"] = transpose_op;
    t["Squeeze"] = squeeze_op;
    t["Unsqueeze"] = unsqueeze_op;
    t["Concat"] = concat_op;
    t["Gather"] = gather_op;
    t["Expand"] = expand_op;
    t["Slice"] = slice_op;
    t["ConstantOfShape"] = constant_of_shape;
    t["Shape"] = shape_op;
    t["Size"] = size_op;
    t["Split"] = split_op;
    t["Pad"] = pad_op;
    t["GatherElements"] = gather_elements;
    t["Tile"] = tile;
    t["DepthToSpace"] = depth_to_space;
    t["SpaceToDepth"] = space_to_depth;
}

} // namespace braid::onnx_import
