// ONNX op → braid operators: the helpers every converter file shares, the elementwise,
// reduction, matrix and activation converters, and the table of all of them (the other families
// add theirs from ops_*.cpp). Ops that are compositions in ONNX's own definition (Gemm,
// Softplus, HardSigmoid, ...) are built from braid operators; inputs braid takes as params
// (shapes, axes, pads) must be known at import.
#include "op_util.h"

#include "operators/cumsum.h"
#include "operators/det.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/indexing.h"
#include "operators/io.h"
#include "operators/matmul.h"
#include "operators/normalization.h"
#include "operators/reduce.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace braid::onnx_import {

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

SymbolVar int32_constant(ComputingGraph& g, const std::vector<int64_t>& values,
                         const TensorShape& shape) {
    Tensor t(shape, dtype::Int32());
    for (size_t i = 0; i < values.size(); ++i) t.ptr<int32_t>()[i] = int32_t(values[i]);
    return ImmutableTensor::make(g, t);
}

SymbolVar take(SymbolVar x, int axis, SymbolVar ids) {
    // The axis moves to the front and the rest is flattened: rows are taken with Embedding,
    // and the dims are put back in order.
    // Ids whose count is known only at run time (NonZero's) are 1-D.
    const TensorShape xs = x.shape();
    bool counted = ids.node()->shape_known();
    size_t rank = xs.ndim(), k = counted ? ids.shape().ndim() : 1;
    if (k == 0) ids = ids.reshape({1});
    size_t kk = std::max<size_t>(k, 1);
    std::vector<int> perm{axis};
    std::vector<long> rest;
    for (size_t d = 0; d < rank; ++d)
        if (int(d) != axis) perm.push_back(int(d)), rest.push_back(long(xs[d]));
    SymbolVar table = transpose(x, perm).reshape({long(xs[size_t(axis)]), -1});
    SymbolVar rows = embedding(table, ids); // ids' shape + [product of rest]
    std::vector<long> shape;
    for (size_t d = 0; d < kk; ++d) shape.push_back(counted ? long(ids.shape()[d]) : -1);
    shape.insert(shape.end(), rest.begin(), rest.end());
    SymbolVar y = rows.reshape(shape); // [ids..., before..., after...]
    std::vector<int> back;
    for (int d = 0; d < axis; ++d) back.push_back(int(kk) + d);
    for (size_t d = 0; d < kk; ++d) back.push_back(int(d));
    for (size_t d = size_t(axis) + 1; d < rank; ++d) back.push_back(int(kk + d - 1));
    y = Dimshuffle::make(y, back); // (transpose() would ask for y's static rank)
    return k == 0 ? squeeze(y, {axis}) : y;
}

SymbolVar take(SymbolVar x, int axis, const std::vector<int64_t>& ids) {
    return take(x, axis, int32_constant(*x.node()->graph(), ids, TensorShape{ids.size()}));
}

SymbolVar flip(SymbolVar x, int axis) {
    return subtensor(x, {AxisIndex::slice(axis, std::nullopt, std::nullopt, -1)});
}

SymbolVar pad_axis(SymbolVar x, int axis, int64_t before, int64_t after, double value) {
    size_t dim = x.shape()[size_t(axis)];
    if (before < 0 || after < 0) {
        x = subtensor(x, {AxisIndex::slice(axis, long(std::max<int64_t>(-before, 0)),
                                           long(int64_t(dim) - std::max<int64_t>(-after, 0)))});
        return pad_axis(x, axis, std::max<int64_t>(before, 0), std::max<int64_t>(after, 0), value);
    }
    if (before == 0 && after == 0) return x;
    std::vector<size_t> shape = x.shape().dims();
    shape[size_t(axis)] += size_t(before + after);
    SymbolVar base = fill(*x.node()->graph(), TensorShape(shape), value, x.dtype());
    return set_subtensor(base, x,
                         {AxisIndex::slice(axis, long(before), long(before + int64_t(dim)))});
}

DType compute_dtype(DType dt) {
    if (dt == dtype::Int8() || dt == dtype::Uint8() || dt == dtype::Int16() ||
        dt == dtype::Uint16())
        return dtype::Int32();
    if (dt == dtype::Uint32()) return dtype::Int64();
    return dt;
}

void check_size(const NodeCtx& c, double elements, const std::string& what) {
    if (elements > double(1 << 24))
        c.invalid(fmt::format("{} would have {} elements (at most 2^24 are built at import)", what,
                              elements));
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

SymbolVar widen(SymbolVar v) {
    DType wide = compute_dtype(v.dtype());
    return wide == v.dtype() ? v : TypeCvt::make(v, wide);
}

SymbolVar narrow(SymbolVar v, DType dt) {
    if (v.dtype() == dt) return v;
    double span = std::ldexp(1.0, int(8 * dt.size()));
    double lo = dt == dtype::Int8() || dt == dtype::Int16() ? -span / 2 : 0;
    return TypeCvt::make(mod(v - lo, scalar_like(v, span)) + lo, dt);
}

namespace {

//! a (op) b, computed in compute_dtype() and cast back (wrapping as ONNX does).
SymbolVar arith(SymbolVar (*fn)(SymbolVar, SymbolVar), SymbolVar a, SymbolVar b) {
    return narrow(fn(widen(a), widen(b)), a.dtype());
}

//! Integer division truncates toward zero (C, and ONNX's reference); braid's floor_div rounds
//! down, so negative quotients with a remainder move up by one.
SymbolVar int_div(SymbolVar a, SymbolVar b) {
    if (a.dtype().is_float()) return true_div(a, b);
    SymbolVar q = floor_div(a, b), zero = scalar_like(a, 0);
    SymbolVar inexact = not_equal(mod(a, b), zero);
    SymbolVar negative = logical_xor(less(a, zero), less(b, zero));
    return where(logical_and(inexact, negative), q + 1.0, q);
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
        for (size_t i = 1; i < c.nr_inputs(); ++i) acc = arith(fn, acc, c.in(i));
        if (mean) acc = acc / double(c.nr_inputs());
        return one(acc);
    };
}

//! A reduction over the axes (an attribute or input 1; none: all of them, or none at all with
//! noop_with_empty_axes), of pre(x), followed by post: ReduceL2 is sqrt(sum of squares).
Converter reduce(SymbolVar (*fn)(SymbolVar, std::vector<int>, bool),
                 SymbolVar (*pre)(SymbolVar) = nullptr, SymbolVar (*post)(SymbolVar) = nullptr) {
    return [fn, pre, post](const NodeCtx& c) {
        SymbolVar x = c.in(0);
        size_t rank = rank_of(c, x);
        auto axes = axes_of(c, rank, 1);
        bool keep = c.attr_int("keepdims", 1) != 0;
        if (axes.empty()) {
            if (c.attr_int("noop_with_empty_axes", 0)) return one(x);
            for (size_t i = 0; i < rank; ++i) axes.push_back(int(i));
        }
        SymbolVar y = fn(pre ? pre(x) : x, axes, keep);
        return one(post ? post(y) : y);
    };
}

//! GlobalAveragePool and GlobalMaxPool: `fn` over the spatial dims, kept.
Converter global_pool(SymbolVar (*fn)(SymbolVar, std::vector<int>, bool)) {
    return [fn](const NodeCtx& c) {
        SymbolVar x = c.in(0);
        size_t rank = rank_of(c, x);
        std::vector<int> axes;
        for (size_t i = 2; i < rank; ++i) axes.push_back(int(i));
        return one(fn(x, axes, true));
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
            auto dims = shape.dims();
            std::vector<long> back(dims.begin(), dims.end());
            return one(y.reshape(back));
        }
        return one(log ? log_softmax(x, axis) : softmax(x, axis));
    };
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
    if (c.has_input(1)) y = arith(maximum, y, c.in(1));
    if (c.has_input(2)) y = arith(minimum, y, c.in(2));
    return one(y);
}

SymbolVarArray arg_op(const NodeCtx& c, bool max) {
    SymbolVar x = c.in(0);
    int axis = norm_axis(c, c.attr_int("axis", 0), rank_of(c, x));
    bool keep = c.attr_int("keepdims", 1) != 0, last = c.attr_int("select_last_index", 0) != 0;
    // The last of equal extremes is the first one of the reversed input.
    SymbolVar v = last ? flip(x, axis) : x;
    SymbolVar y = max ? argmax(v, axis, keep) : argmin(v, axis, keep);
    if (y.dtype() != dtype::Int64()) y = TypeCvt::make(y, dtype::Int64());
    if (last) y = scalar_like(y, double(x.shape()[size_t(axis)] - 1)) - y;
    return one(y);
}

SymbolVarArray leaky_relu(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    double alpha = c.attr_float("alpha", 0.01f);
    // For 0 <= alpha <= 1 the larger of x and alpha x is the same value (NaN and -0 too) in
    // two elementwise passes instead of three, with no mask tensor.
    if (alpha >= 0 && alpha <= 1) return one(maximum(x, x * alpha));
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

//! log(1 + e^x), computed as max(x, 0) + log(1 + e^-|x|) so that a large x gives x, not inf.
SymbolVar stable_softplus(SymbolVar x) {
    return relu(x) + log1p(exp(-abs(x)));
}

SymbolVarArray softplus(const NodeCtx& c) {
    return one(stable_softplus(c.in(0)));
}

//! Mish-18: x tanh(softplus(x)).
SymbolVarArray mish(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    return one(x * tanh(stable_softplus(x)));
}

//! Gelu-20, exact (erf) or with the tanh approximation.
SymbolVarArray gelu_op(const NodeCtx& c) {
    std::string approximate = c.attr_string("approximate", "none");
    if (approximate != "none" && approximate != "tanh")
        c.invalid("approximate \"" + approximate + "\"");
    return one(approximate == "tanh" ? gelu_tanh(c.in(0)) : gelu(c.in(0)));
}

SymbolVarArray softsign(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    return one(x / (abs(x) + 1.0));
}

SymbolVarArray reciprocal(const NodeCtx& c) {
    return one(1.0 / c.in(0));
}

SymbolVarArray identity(const NodeCtx& c) {
    if (c.is_sequence(0) || c.is_none(0)) { // a sequence or an optional passes as it is
        c.forward(0, 0);
        return {};
    }
    return one(c.in(0));
}

SymbolVarArray greater(const NodeCtx& c) {
    return one(less(c.in(1), c.in(0)));
}

SymbolVarArray greater_equal(const NodeCtx& c) {
    return one(less_equal(c.in(1), c.in(0)));
}

//! Dropout is the identity in inference, and in training with a ratio of 0; random dropping
//! in training is not supported.
SymbolVarArray dropout_op(const NodeCtx& c) {
    bool training = c.attr_int("training_mode", 0) != 0; // opset < 12 had no training input
    if (c.has_input(2)) {
        const Tensor& t = c.constant_input(2);
        training = t.shape().total_nr_elems() == 1 && t.raw_ptr()[0] != 0;
    }
    if (training) {
        float ratio = c.attr_float("ratio", 0.5f);
        if (c.has_input(1)) ratio = c.floats_input(1).at(0);
        if (ratio != 0) c.unsupported(fmt::format("training mode with ratio {} (random)", ratio));
    }
    SymbolVar x = c.in(0);
    SymbolVarArray outs{x};
    if (c.node().output_size() > 1) outs.push_back(TypeCvt::make(full_like(x, 1.0), dtype::Bool()));
    return outs;
}

SymbolVarArray prelu(const NodeCtx& c) {
    SymbolVar x = c.in(0), slope = c.in(1);
    size_t rank = rank_of(c, x);
    // A 1-D slope of one value per channel (as old exporters wrote it) lines up with dim 1.
    if (rank > 2 && rank_of(c, slope) == 1 && slope.shape()[0] == x.shape()[1] &&
        x.shape()[rank - 1] != slope.shape()[0]) {
        std::vector<long> s(rank - 1, 1);
        s[0] = long(slope.shape()[0]);
        slope = slope.reshape(s);
    }
    return one(where(less(x, scalar_like(x, 0)), x * slope, x));
}

SymbolVarArray mod_op(const NodeCtx& c) {
    SymbolVar a = c.in(0), b = c.in(1);
    if (!c.attr_int("fmod", 0)) return one(arith(mod, a, b));
    // fmod: the remainder takes the dividend's sign (C's fmod); braid's mod takes the divisor's.
    auto fmod = [](SymbolVar a, SymbolVar b) {
        SymbolVar r = mod(a, b), zero = scalar_like(a, 0);
        SymbolVar fix = logical_and(not_equal(r, zero), logical_xor(less(r, zero), less(a, zero)));
        return where(fix, r - b, r);
    };
    return one(narrow(fmod(widen(a), widen(b)), a.dtype()));
}

SymbolVarArray cast_like(const NodeCtx& c) {
    return one(TypeCvt::make(c.in(0), c.in(1).dtype()));
}

SymbolVarArray where_op(const NodeCtx& c) {
    return one(where(c.in(0), c.in(1), c.in(2)));
}

SymbolVarArray pow_op(const NodeCtx& c) {
    SymbolVar a = c.in(0), b = c.in(1);
    if (b.dtype() != a.dtype()) b = TypeCvt::make(b, a.dtype());
    return one(pow(a, b));
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

template <SymbolVar (*Fn)(SymbolVar, SymbolVar)> Converter arith_binary() {
    return [](const NodeCtx& c) { return one(arith(Fn, c.in(0), c.in(1))); };
}

SymbolVarArray thresholded_relu(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    double alpha = c.attr_float("alpha", 1.f);
    return one(where(less(scalar_like(x, alpha), x), x, zeros_like(x)));
}

SymbolVarArray shrink(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    double lambd = c.attr_float("lambd", 0.5f), bias = c.attr_float("bias", 0.f);
    SymbolVar y = where(less(x, scalar_like(x, -lambd)), x + bias,
                        where(less(scalar_like(x, lambd), x), x - bias, zeros_like(x)));
    return one(y);
}

SymbolVarArray hard_swish(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    return one(x * clip(x * (1.0 / 6.0) + 0.5, 0.0, 1.0));
}

SymbolVarArray celu(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    double alpha = c.attr_float("alpha", 1.f);
    return one(relu(x) + minimum(zeros_like(x), expm1(x * (1.0 / alpha)) * alpha));
}

SymbolVar tan_of(SymbolVar x) {
    return sin(x) / cos(x);
}
SymbolVar sinh_of(SymbolVar x) {
    return (exp(x) - exp(neg(x))) * 0.5;
}
SymbolVar cosh_of(SymbolVar x) {
    return (exp(x) + exp(neg(x))) * 0.5;
}
//! sign(x) log(|x| + sqrt(x^2 + 1)): odd, and exact in sign for large negative x.
SymbolVar asinh_of(SymbolVar x) {
    SymbolVar a = abs(x);
    return sign(x) * log(a + sqrt(square(a) + 1.0));
}
SymbolVar acosh_of(SymbolVar x) {
    return log(x + sqrt(square(x) - 1.0));
}
SymbolVar atanh_of(SymbolVar x) {
    return (log1p(x) - log1p(neg(x))) * 0.5;
}

//! arctan, which braid has no mode for: the argument is reduced to [0, tan(pi/12)] (through
//! atan(x) = pi/2 - atan(1/x) and atan(t) = pi/6 + atan((t - k) / (1 + t k)), k = 1/sqrt(3)),
//! where the odd Taylor series to u^11 is within 3e-9.
SymbolVar atan_of(SymbolVar x) {
    SymbolVar a = abs(x);
    SymbolVar inv = less(scalar_like(a, 1), a);
    SymbolVar t = where(inv, 1.0 / a, a);
    const double k = 0.57735026918962576, pi = 3.14159265358979324;
    SymbolVar big = less(scalar_like(t, 0.26794919243112270), t);
    SymbolVar u = where(big, (t - k) / (t * k + 1.0), t);
    SymbolVar u2 = square(u);
    SymbolVar p = u2 * (-1.0 / 11) + 1.0 / 9;
    for (double coef : {-1.0 / 7, 1.0 / 5, -1.0 / 3, 1.0}) p = p * u2 + coef;
    SymbolVar r = where(big, u * p + pi / 6, u * p);
    return sign(x) * where(inv, (pi / 2) - r, r);
}
//! asin(x) = atan(x / sqrt(1 - x^2)); |x| = 1 gives +-pi/2 through an infinite ratio.
SymbolVar asin_of(SymbolVar x) {
    return atan_of(x / sqrt(1.0 - square(x)));
}
//! acos(x) = 2 atan(sqrt((1 - x) / (1 + x))), accurate near x = 1 (no cancellation).
SymbolVar acos_of(SymbolVar x) {
    return atan_of(sqrt((1.0 - x) / (x + 1.0))) * 2.0;
}

SymbolVarArray is_nan(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    return one(not_equal(x, x));
}

SymbolVarArray is_inf(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    bool pos = c.attr_int("detect_positive", 1) != 0, neg_ = c.attr_int("detect_negative", 1) != 0;
    SymbolVar inf = scalar_like(x, INFINITY);
    if (pos && neg_) return one(equal(abs(x), inf));
    if (pos) return one(equal(x, inf));
    if (neg_) return one(equal(x, neg(inf)));
    return one(TypeCvt::make(zeros_like(x), dtype::Bool()));
}

SymbolVarArray eye_like(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    if (rank_of(c, x) != 2) c.invalid("the input must be 2-D");
    DType dt =
        c.has_attr("dtype") ? dtype_of(int32_t(c.attr_int("dtype", 1)), c.where()) : x.dtype();
    int64_t k = c.attr_int("k", 0);
    size_t n = x.shape()[0], m = x.shape()[1];
    check_size(c, double(n) * double(m), "the identity matrix");
    std::vector<float> v(n * m, 0.f);
    for (size_t i = 0; i < n; ++i)
        if (int64_t(i) + k >= 0 && int64_t(i) + k < int64_t(m))
            v[i * m + size_t(int64_t(i) + k)] = 1;
    Tensor t(TensorShape{n, m}, dt);
    convert_elements(dtype::Float32(), v.data(), dt, t.raw_ptr(), v.size());
    return one(c.known_output(0, t));
}

SymbolVarArray range_op(const NodeCtx& c) {
    const Tensor *s = c.constant(0), *l = c.constant(1), *d = c.constant(2);
    if (!s || !l || !d) c.ints_input(s ? (l ? 2 : 1) : 0); // throws naming the runtime input
    auto value = [](const Tensor* t) {
        if (t->dtype() == dtype::Int64()) return double(t->ptr<int64_t>()[0]);
        if (t->dtype() == dtype::Int32()) return double(t->ptr<int32_t>()[0]);
        float f;
        convert_elements(t->dtype(), t->raw_ptr(), dtype::Float32(), &f, 1);
        return double(f);
    };
    double start = value(s), limit = value(l), delta = value(d);
    if (delta == 0) c.invalid("delta is 0");
    int64_t n = std::max<int64_t>(int64_t(std::ceil((limit - start) / delta)), 0);
    check_size(c, double(n), "the range");
    std::vector<float> v(static_cast<size_t>(n));
    Tensor t(TensorShape{size_t(n)}, s->dtype());
    if (s->dtype().is_float()) {
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(start + double(i) * delta);
        convert_elements(dtype::Float32(), v.data(), s->dtype(), t.raw_ptr(), v.size());
    } else {
        for (int64_t i = 0; i < n; ++i) {
            int64_t e = int64_t(start) + i * int64_t(delta);
            if (s->dtype() == dtype::Int64())
                t.ptr<int64_t>()[i] = e;
            else
                t.ptr<int32_t>()[i] = int32_t(e);
        }
    }
    return one(c.known_output(0, t));
}

SymbolVarArray one_hot(const NodeCtx& c) {
    SymbolVar idx = c.in(0), values = c.in(2);
    auto depth_v = c.ints_input(1);
    int64_t depth = depth_v.at(0);
    if (depth <= 0) c.invalid(fmt::format("depth {} is not positive", depth));
    size_t rank = rank_of(c, idx) + 1;
    int axis = norm_axis(c, c.attr_int("axis", -1), rank);
    SymbolVar i32 = idx.dtype().is_float() ? TypeCvt::make(floor(idx), dtype::Int32())
                                           : TypeCvt::make(idx, dtype::Int32());
    i32 = where(less(i32, scalar_like(i32, 0)), i32 + double(depth), i32);
    std::vector<long> shape(rank, 1);
    shape[size_t(axis)] = long(depth);
    SymbolVar pos = arange(c.graph(), 0, double(depth), 1, dtype::Int32()).reshape(shape);
    SymbolVar hot = equal(expand_dims(i32, {axis}), pos);
    SymbolVar off = subtensor(values, {AxisIndex::index(0, 0)});
    SymbolVar on = subtensor(values, {AxisIndex::index(0, 1)});
    return one(where(hot, Broadcast::make(on, hot.shape()), Broadcast::make(off, hot.shape())));
}

SymbolVarArray det_op(const NodeCtx& c) {
    return one(Det::make(c.in(0)));
}

SymbolVarArray cumsum_op(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    CumSumParam p;
    p.axis = norm_axis(c, c.ints_input(1).at(0), rank_of(c, x));
    // CumSum's own exclusive sum leaves each element out rather than subtracting it back,
    // which would round floats.
    p.exclusive = c.attr_int("exclusive", 0) != 0;
    p.reverse = c.attr_int("reverse", 0) != 0;
    return one(CumSum::make(x, p));
}

const std::map<std::string, Converter>& table() {
    static const ConverterTable t = [] {
        ConverterTable t = {
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
            {"Mish", mish},
            {"Gelu", gelu_op},
            {"Softsign", softsign},
            {"LeakyRelu", leaky_relu},
            {"Elu", elu},
            {"Selu", selu},
            {"HardSigmoid", hard_sigmoid},
            {"Add", arith_binary<add>()},
            {"Sub", arith_binary<sub>()},
            {"Mul", arith_binary<mul>()},
            {"Div", arith_binary<int_div>()},
            {"ThresholdedRelu", thresholded_relu},
            {"Shrink", shrink},
            {"HardSwish", hard_swish},
            {"Celu", celu},
            {"Tan", unary<tan_of>()},
            {"Sinh", unary<sinh_of>()},
            {"Cosh", unary<cosh_of>()},
            {"Asinh", unary<asinh_of>()},
            {"Acosh", unary<acosh_of>()},
            {"Atanh", unary<atanh_of>()},
            {"Atan", unary<atan_of>()},
            {"Asin", unary<asin_of>()},
            {"Acos", unary<acos_of>()},
            {"IsNaN", is_nan},
            {"IsInf", is_inf},
            {"EyeLike", eye_like},
            {"Range", range_op},
            {"OneHot", one_hot},
            {"CumSum", cumsum_op},
            {"Det", det_op},
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
            {"GlobalAveragePool", global_pool(reduce_mean)},
            {"GlobalMaxPool", global_pool(reduce_max)},
            {"LayerNormalization", layer_norm_op},
            {"Softmax", softmax_op(false)},
            {"LogSoftmax", softmax_op(true)},
            {"Cast", cast_op},
            {"ReduceSum", reduce(reduce_sum)},
            {"ReduceMean", reduce(reduce_mean)},
            {"ReduceMax", reduce(reduce_max)},
            {"ReduceMin", reduce(reduce_min)},
            {"ReduceProd", reduce(reduce_prod)},
            {"ReduceSumSquare", reduce(reduce_sum_sqr)},
            {"ArgMax", [](const NodeCtx& c) { return arg_op(c, true); }},
            {"ArgMin", [](const NodeCtx& c) { return arg_op(c, false); }},
            {"Trilu", trilu},
            {"Hardmax", hardmax},
            {"PRelu", prelu},
            {"Mod", mod_op},
            {"CastLike", cast_like},
            {"ReduceL1", reduce(reduce_sum, abs)},
            {"ReduceL2", reduce(reduce_sum_sqr, nullptr, sqrt)},
            {"ReduceLogSum", reduce(reduce_sum, nullptr, log)},
            {"ReduceLogSumExp", reduce(reduce_sum, exp, log)},
        };
        add_nn_converters(t);
        add_shape_converters(t);
        add_quant_converters(t);
        add_rnn_converters(t);
        add_index_converters(t);
        add_sequence_converters(t);
        add_control_converters(t);
        add_einsum_converter(t);
        add_training_and_signal_converters(t);
        return t;
    }();
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
