// BatchNorm (inference) against a plain loop: statistics as [C] or [1, C, 1, ...], ranks 2 to 5,
// half-precision inputs with float32 statistics, and each error message.
#include "dense_helpers.h"

#include <cmath>

using namespace braid;
using namespace braid::test;

namespace {

Tensor ref_batch_norm(const std::vector<Tensor>& in, float eps, DType out_dtype) {
    const auto& xs = in[0].shape();
    size_t c = xs[1], inner = 1;
    for (size_t d = 2; d < xs.ndim(); ++d) inner *= xs[d];
    auto x = values_of(in[0]), scale = values_of(in[1]), bias = values_of(in[2]),
         mean = values_of(in[3]), var = values_of(in[4]);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        size_t ch = (i / inner) % c;
        y[i] = (x[i] - mean[ch]) / std::sqrt(var[ch] + eps) * scale[ch] + bias[ch];
    }
    return tensor_of(xs, out_dtype, y);
}

void check_bn(const TensorShape& x, const TensorShape& stat, DType x_dtype, DType stat_dtype,
              double rtol, double atol, float eps = 1e-5f) {
    OprCase c;
    c.name = fmt::format("batch_norm x{} {} stats{} {} eps={}", x.to_string(), x_dtype.name(),
                         stat.to_string(), stat_dtype.name(), eps);
    c.shapes = {x, stat, stat, stat, stat};
    c.dtypes = {x_dtype, stat_dtype, stat_dtype, stat_dtype, stat_dtype};
    c.rtol = rtol;
    c.atol = atol;
    c.fill = [](std::mt19937& rng, Tensor& t, size_t idx) {
        // Variances must be positive.
        t = idx == 4 ? random_tensor(t.shape(), t.dtype(), rng, 0.1, 3.0)
                     : random_tensor(t.shape(), t.dtype(), rng);
    };
    c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
        return {opr::batch_norm(in[0], in[1], in[2], in[3], in[4], eps)};
    };
    c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {ref_batch_norm(in, eps, x_dtype)};
    };
    check_operator(c);
}

} // namespace

TEST(BatchNormOpr, PerChannelAffineMatchesReference) {
    DType f32 = dtype::Float32();
    check_bn({2, 3, 4, 5}, {3}, f32, f32, 1e-5, 1e-5);
    check_bn({2, 3, 4, 5}, {1, 3, 1, 1}, f32, f32, 1e-5, 1e-5);
    check_bn({7, 4}, {4}, f32, f32, 1e-5, 1e-5);
    check_bn({2, 5, 9}, {1, 5, 1}, f32, f32, 1e-5, 1e-5);
    check_bn({1, 2, 3, 4, 5}, {2}, f32, f32, 1e-5, 1e-5);
    check_bn({0, 3, 4, 4}, {3}, f32, f32, 1e-5, 1e-5);
    check_bn({2, 1, 3, 3}, {1}, f32, f32, 1e-5, 1e-5, 0.5f);
    check_bn({2, 64, 17, 19}, {64}, f32, f32, 1e-5, 1e-5); // spans several pool chunks
}

TEST(BatchNormOpr, HalfPrecisionInputsWithEitherStatisticDtype) {
    for (auto& dt : dense_dtypes()) {
        check_bn({2, 3, 4, 5}, {3}, dt.dtype, dtype::Float32(), dt.rtol, dt.atol);
        check_bn({2, 3, 4, 5}, {1, 3, 1, 1}, dt.dtype, dt.dtype, dt.rtol * 2, dt.atol * 2);
    }
}

TEST(BatchNormOpr, ErrorsNameTheOperatorAndValues) {
    auto g = ComputingGraph::make();
    auto in = [&](const char* name, TensorShape s, DType dt = dtype::Float32()) {
        return opr::Input::make(*g, name, dt, s);
    };
    auto x = in("x", {2, 3, 4, 4});
    auto s = in("s", {3});
    expect_error<ShapeError>([&] { opr::batch_norm(x, in("s4", {4}), s, s, s); },
                             {"BatchNorm", "scale has shape {4}", "{3}", "{2,3,4,4}"});
    expect_error<ShapeError>(
        [&] {
            opr::batch_norm(x, s, s, s, in("v", {1, 3, 2, 1}));
        },
        {"var has shape {1,3,2,1}"});
    expect_error<ShapeError>([&] { opr::batch_norm(in("x1", {3}), s, s, s, s); },
                             {"rank >= 2", "{3}"});
    expect_error<DTypeError>(
        [&] {
            opr::batch_norm(in("xi", {2, 3}, dtype::Int32()), s, s, s, s);
        },
        {"BatchNorm", "int32"});
    expect_error<DTypeError>(
        [&] {
            opr::batch_norm(in("xb", {2, 3}, dtype::BFloat16()), s, in("bh", {3}, dtype::Float16()),
                            s, s);
        },
        {"bias has dtype float16", "bfloat16 or float32"});
    expect_error<ValueError>([&] { opr::batch_norm(x, s, s, s, s, -1e-3f); },
                             {"eps must be finite and >= 0"});
}
