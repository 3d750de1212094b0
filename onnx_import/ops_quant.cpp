// ONNX quantization ops → braid: (de)quantization and the integer convolution and matrix
// products, composed in float32. Integer products are computed in float32, which is exact while
// every partial sum stays below 2^24 (258 products of 8-bit values). A longer reduction is
// split into chunks short enough to be exact (of K, or of a convolution's input channels),
// whose results are summed in int32; what cannot be split so is refused instead of rounded.
#include "op_util.h"

#include "operators/conv_integer.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/matmul.h"
#include "operators/quantize.h"
#include "operators/reduce.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace braid::onnx_import {

using namespace braid::opr;

namespace {

SymbolVar as_float(SymbolVar v) {
    return v.dtype() == dtype::Float32() ? v : TypeCvt::make(v, dtype::Float32());
}

//! A per-tensor (scalar) or per-axis (1-D) parameter lined up with `axis` of a rank-`rank` x.
SymbolVar per_axis(const NodeCtx& c, SymbolVar p, int64_t axis, size_t rank) {
    if (rank_of(c, p) == 0 || p.shape().total_nr_elems() == 1)
        return p.reshape(std::vector<long>{});
    std::vector<long> shape(rank, 1);
    shape[size_t(norm_axis(c, axis, rank))] = -1;
    return p.reshape(shape);
}

//! round(v) + zero point, saturated to `dt`'s range and cast.
SymbolVar saturate(SymbolVar v, DType dt) {
    double lo = dt == dtype::Int8() ? -128 : 0, hi = dt == dtype::Int8() ? 127 : 255;
    return TypeCvt::make(clip(v, lo, hi), dt);
}

DType quant_dtype(const NodeCtx& c, size_t zp_input) {
    DType dt = c.has_input(zp_input) ? c.in(zp_input).dtype() : dtype::Uint8();
    if (dt != dtype::Uint8() && dt != dtype::Int8())
        c.unsupported(fmt::format("quantized dtype {} (only uint8 and int8)", dt.name()));
    return dt;
}

SymbolVarArray quantize_linear(const NodeCtx& c) {
    SymbolVar x = as_float(c.in(0));
    size_t rank = rank_of(c, x);
    int64_t axis = c.attr_int("axis", 1);
    DType dt = quant_dtype(c, 2);
    SymbolVar q = round(x / per_axis(c, as_float(c.in(1)), axis, rank));
    if (c.has_input(2)) q = q + per_axis(c, as_float(c.in(2)), axis, rank);
    return one(saturate(q, dt));
}

SymbolVarArray dequantize_linear(const NodeCtx& c) {
    SymbolVar x = as_float(c.in(0));
    size_t rank = rank_of(c, x);
    int64_t axis = c.attr_int("axis", 1);
    if (c.has_input(2)) x = x - per_axis(c, as_float(c.in(2)), axis, rank);
    return one(x * per_axis(c, as_float(c.in(1)), axis, rank));
}

//! uint8 quantization with a scale and zero point chosen from x's range (which includes 0):
//! the DynamicQuantizeLinear operator on a CPU comp node, elsewhere the same arithmetic
//! composed (operators/quantize.h).
SymbolVarArray dynamic_quantize_linear(const NodeCtx& c) {
    SymbolVar x = as_float(c.in(0));
    if (x.comp_node().device().kind == Device::Kind::CPU) return DynamicQuantizeLinear::make(x);
    std::vector<int> all;
    for (size_t i = 0; i < rank_of(c, x); ++i) all.push_back(int(i));
    SymbolVar zero = scalar_like(x, 0).reshape(std::vector<long>{});
    SymbolVar lo = minimum(reduce_min(x, all, false), zero);
    SymbolVar hi = maximum(reduce_max(x, all, false), zero);
    // A range of zero width (x all zeros) has scale 1 / 255, as in ONNX's reference.
    SymbolVar scale = (hi - lo + TypeCvt::make(equal(hi, lo), dtype::Float32())) / 255.0;
    SymbolVar zp = clip(round(neg(lo) / scale), 0.0, 255.0);
    SymbolVar y = saturate(round(x / scale) + zp, dtype::Uint8());
    return {y, scale, TypeCvt::make(zp, dtype::Uint8())};
}

//! Refuses products whose int32 sums float32 might round.
void check_exact(const NodeCtx& c, size_t k, const char* why = "") {
    if (k > EXACT_INT8_TERMS)
        c.unsupported(fmt::format("an integer reduction over {} terms (braid computes integer "
                                  "products in float32, exact up to {} terms{})",
                                  k, EXACT_INT8_TERMS, why));
}

SymbolVar integer_operand(const NodeCtx& c, size_t input, size_t zp_input) {
    SymbolVar v = as_float(c.in(input));
    if (c.has_input(zp_input)) {
        SymbolVar zp = as_float(c.in(zp_input));
        if (zp.shape().total_nr_elems() != 1)
            c.unsupported("per-row or per-channel zero points of integer products");
        v = v - zp.reshape(std::vector<long>{});
    }
    return v;
}

//! The int32 sum of part(begin, end), a float32 result, over [0, n) in chunks of `step`.
template <typename Part> SymbolVar int32_sum_of_chunks(size_t n, size_t step, Part&& part) {
    SymbolVar acc;
    for (size_t begin = 0; begin < n; begin += step) {
        SymbolVar y =
            TypeCvt::make(part(long(begin), long(std::min(n, begin + step))), dtype::Int32());
        acc = acc.valid() ? acc + y : y;
    }
    return acc;
}

//! The exact int32 product of float-held integer matrices a and b: one float32 product when its
//! reductions are short enough to be exact, otherwise one per chunk of K, summed in int32.
SymbolVar integer_matmul(const NodeCtx& c, SymbolVar a, SymbolVar b) {
    size_t ra = rank_of(c, a), rb = rank_of(c, b);
    if (ra < 2 || rb < 2) c.unsupported("integer MatMul of a 1-D input");
    auto product = [&](SymbolVar x, SymbolVar y) {
        return ra == 2 && rb == 2 ? matmul(x, y) : batched_matmul(x, y);
    };
    size_t k = a.shape()[ra - 1];
    if (k <= EXACT_INT8_TERMS) return TypeCvt::make(product(a, b), dtype::Int32());
    return int32_sum_of_chunks(k, EXACT_INT8_TERMS, [&](long k0, long k1) {
        return product(subtensor(a, {AxisIndex::slice(int(ra) - 1, k0, k1)}),
                       subtensor(b, {AxisIndex::slice(int(rb) - 2, k0, k1)}));
    });
}

SymbolVarArray matmul_integer(const NodeCtx& c) {
    return one(integer_matmul(c, integer_operand(c, 0, 2), integer_operand(c, 1, 3)));
}

//! The exact int32 accumulator of an integer convolution of float-held integers x and w, by
//! Conv's converter (ops_nn.cpp): one float32 convolution when its reductions are short enough
//! to be exact, otherwise one per chunk of input channels, summed in int32.
SymbolVar integer_conv(const NodeCtx& c, SymbolVar x, SymbolVar w) {
    size_t window = 1;
    for (size_t i = 2; i < w.shape().ndim(); ++i) window *= w.shape()[i];
    size_t channels = w.shape()[1], k = channels * window;
    if (k <= EXACT_INT8_TERMS) return TypeCvt::make(conv_with(c, x, w, true), dtype::Int32());
    if (c.attr_int("group", 1) != 1) check_exact(c, k, ", and splits only ungrouped ones");
    check_exact(c, window, " per input channel");
    return int32_sum_of_chunks(channels, EXACT_INT8_TERMS / window, [&](long c0, long c1) {
        auto part = [&](SymbolVar v) { return subtensor(v, {AxisIndex::slice(1, c0, c1)}); };
        return conv_with(c, part(x), part(w), true);
    });
}

//! Input `zp_input`, or a zero of `dt` where it is absent.
SymbolVar zero_point_or_zero(const NodeCtx& c, size_t zp_input, DType dt) {
    if (c.has_input(zp_input)) return c.in(zp_input);
    Tensor zero(TensorShape{}, dt);
    zero.ptr<uint8_t>()[0] = 0;
    return ImmutableTensor::make(c.graph(), zero);
}

//! On a CPU comp node a 2-D ConvInteger padded alike at both ends is the ConvInteger operator
//! (oneDNN's int8 kernels where they are exact); elsewhere the float32 composition above.
SymbolVarArray conv_integer(const NodeCtx& c) {
    SymbolVar x = c.in(0), w = c.in(1);
    auto param = plain_conv2d_param(c, x, w);
    bool cpu = x.comp_node().device().kind == Device::Kind::CPU;
    auto eight_bit = [](DType dt) { return dt == dtype::Uint8() || dt == dtype::Int8(); };
    if (param && cpu && eight_bit(x.dtype()) && eight_bit(w.dtype()))
        return one(ConvInteger::make(x, w, zero_point_or_zero(c, 2, x.dtype()),
                                     zero_point_or_zero(c, 3, w.dtype()), *param));
    return one(integer_conv(c, integer_operand(c, 0, 2), integer_operand(c, 1, 3)));
}

//! Requantizes an exact integer accumulator: acc * (a_scale * b_scale / y_scale) + y_zp.
SymbolVar requantize(const NodeCtx& c, SymbolVar acc, size_t a_scale, size_t b_scale,
                     size_t y_scale, size_t y_zp, int axis) {
    size_t rank = acc.shape().ndim();
    SymbolVar s = as_float(c.in(a_scale)).reshape(std::vector<long>{}) *
                  per_axis(c, as_float(c.in(b_scale)), axis, rank) /
                  as_float(c.in(y_scale)).reshape(std::vector<long>{});
    SymbolVar q = round(acc * s);
    if (c.has_input(y_zp)) q = q + as_float(c.in(y_zp)).reshape(std::vector<long>{});
    return saturate(q, quant_dtype(c, y_zp));
}

SymbolVarArray qlinear_matmul(const NodeCtx& c) {
    SymbolVar acc = as_float(integer_matmul(c, integer_operand(c, 0, 2), integer_operand(c, 3, 5)));
    return one(requantize(c, acc, 1, 4, 6, 7, int(acc.shape().ndim()) - 1));
}

SymbolVarArray qlinear_conv(const NodeCtx& c) {
    SymbolVar acc = as_float(integer_conv(c, integer_operand(c, 0, 2), integer_operand(c, 3, 5)));
    if (c.has_input(8)) {
        std::vector<long> shape(acc.shape().ndim(), 1);
        shape[1] = -1;
        acc = acc + as_float(c.in(8)).reshape(shape);
    }
    return one(requantize(c, acc, 1, 4, 6, 7, 1));
}

} // namespace

void add_quant_converters(ConverterTable& t) {
    t["QuantizeLinear"] = quantize_linear;
    t["DequantizeLinear"] = dequantize_linear;
    t["DynamicQuantizeLinear"] = dynamic_quantize_linear;
    t["MatMulInteger"] = matmul_integer;
    t["ConvInteger"] = conv_integer;
    t["QLinearMatMul"] = qlinear_matmul;
    t["QLinearConv"] = qlinear_conv;
}

} // namespace braid::onnx_import
