// Softmax / log-softmax, LayerNorm and RMSNorm against double-precision plain loops: every
// axis position, numerical stability on large inputs, optional weight and bias, several
// normalized dims, half precision, the parallel paths, and error messages.
#include "reference.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace braid;
using namespace braid::test;

namespace {

Tensor ref_softmax(const Tensor& x, int axis, bool log) {
    const TensorShape& s = x.shape();
    size_t a = size_t(axis < 0 ? axis + int(s.ndim()) : axis);
    size_t outer = 1, n = s[a], inner = 1;
    for (size_t d = 0; d < s.ndim(); ++d) {
        if (d < a) outer *= s[d];
        if (d > a) inner *= s[d];
    }
    Tensor r(s, x.dtype());
    for (size_t o = 0; o < outer; ++o)
        for (size_t i = 0; i < inner; ++i) {
            auto at = [&](size_t k) { return (o * n + k) * inner + i; };
            double m = -INFINITY, sum = 0;
            for (size_t k = 0; k < n; ++k) m = std::max(m, x.at(at(k)));
            for (size_t k = 0; k < n; ++k) sum += std::exp(x.at(at(k)) - m);
            for (size_t k = 0; k < n; ++k) {
                double v = x.at(at(k)) - m;
                store_from_double(x.dtype(), r.raw_ptr(), at(k),
                                  log ? v - std::log(sum) : std::exp(v) / sum);
            }
        }
    return r;
}

Tensor ref_norm(bool layer, const Tensor& x, const Tensor* w, const Tensor* b, size_t k,
                double eps) {
    const TensorShape& s = x.shape();
    size_t n = 1;
    for (size_t d = s.ndim() - k; d < s.ndim(); ++d) n *= s[d];
    size_t rows = n ? s.total_nr_elems() / n : 0;
    Tensor r(s, x.dtype());
    for (size_t row = 0; row < rows; ++row) {
        double mean = 0, sq = 0;
        for (size_t i = 0; i < n; ++i) mean += x.at(row * n + i);
        mean /= double(n);
        double shift = layer ? mean : 0;
        for (size_t i = 0; i < n; ++i) sq += std::pow(x.at(row * n + i) - shift, 2);
        double rstd = 1 / std::sqrt(sq / double(n) + eps);
        for (size_t i = 0; i < n; ++i) {
            double v = (x.at(row * n + i) - shift) * rstd;
            if (w) v *= w->at(i);
            if (b) v += b->at(i);
            store_from_double(x.dtype(), r.raw_ptr(), row * n + i, v);
        }
    }
    return r;
}

double tol_for(DType dt) {
    return dt == dtype::Float32() ? 2e-6 : dt == dtype::Float16() ? 2e-3 : 1.6e-2;
}

} // namespace

TEST(SoftmaxOpr, EveryAxisPositionAndShape) {
    std::vector<std::pair<TensorShape, int>> cases = {
        {{4, 7}, -1},   {{4, 7}, 0}, {{3, 5, 6}, 1}, {{3, 5, 6}, -3},  {{9}, 0},
        {{2, 1, 3}, 1}, {{0, 5}, 1}, {{5, 0}, 1},    {{2, 3, 300}, 1}, {{6, 1000}, -1},
    };
    for (bool log : {false, true})
        for (auto& [shape, axis] : cases)
            for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()}) {
                OprCase c;
                c.name = fmt::format("{}softmax {} {} axis {}", log ? "log_" : "", dt.name(),
                                     shape.to_string(), axis);
                c.shapes = {shape};
                c.dtypes = {dt};
                c.low = -5;
                c.high = 5;
                int ax = axis;
                c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                    return {log ? opr::log_softmax(in[0], ax) : opr::softmax(in[0], ax)};
                };
                c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                    return {ref_softmax(in[0], ax, log)};
                };
                c.rtol = c.atol = tol_for(dt);
                check_operator(c);
            }
}

TEST(SoftmaxOpr, LargeInputsStayFinite) {
    Tensor x = tensor_of({2, 3}, dtype::Float32(), {1000, 1001, 1002, -1000, -1001, -1e30});
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::softmax(in[0]), opr::log_softmax(in[0])};
    });
    auto sm = values_of(out[0]), ls = values_of(out[1]);
    double e1 = std::exp(-1.0), e2 = std::exp(-2.0), z = 1 + e1 + e2;
    EXPECT_NEAR(sm[2], 1 / z, 1e-6);
    EXPECT_NEAR(sm[0], e2 / z, 1e-6);
    EXPECT_NEAR(sm[3], 1 / (1 + e1), 1e-6);
    EXPECT_EQ(sm[5], 0);
    EXPECT_NEAR(ls[2], -std::log(z), 1e-5);
    EXPECT_NEAR(ls[0], -2 - std::log(z), 1e-5);
}

TEST(SoftmaxOpr, LargeTensorsRunInParallel) {
    for (auto& [shape, axis] :
         std::vector<std::pair<TensorShape, int>>{{{300, 257}, -1}, {{40, 90, 30}, 1}}) {
        OprCase c;
        c.name = "softmax large " + shape.to_string();
        c.shapes = {shape};
        int ax = axis;
        c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
            return {opr::softmax(in[0], ax), opr::log_softmax(in[0], ax)};
        };
        c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
            return {ref_softmax(in[0], ax, false), ref_softmax(in[0], ax, true)};
        };
        check_operator(c);
    }
}

TEST(SoftmaxOpr, ErrorsNameAxisRankAndDtype) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3});
    expect_error<ShapeError>([&] { opr::softmax(x, 2); },
                             {"Softmax(axis=2)", "axis 2 out of range for a rank-2 input"});
    expect_error<ShapeError>([&] { opr::log_softmax(x, -3); }, {"Softmax(axis=-3 log)", "rank-2"});
    auto i = opr::Input::make(*g, "i", dtype::Int32(), {2, 3});
    expect_error<DTypeError>([&] { opr::softmax(i); },
                             {"Softmax", "\"i\" has dtype int32", "float32, float16 or bfloat16"});
}

TEST(NormalizationOpr, LayerAndRmsNormWithOptionalWeightAndBias) {
    for (bool layer : {true, false})
        for (int wb = 0; wb < 4; ++wb)
            for (auto& [shape, k] : std::vector<std::pair<TensorShape, size_t>>{{{4, 16}, 1},
                                                                                {{2, 3, 5}, 2},
                                                                                {{7}, 1},
                                                                                {{3, 1}, 1},
                                                                                {{0, 4}, 1},
                                                                                {{2, 2, 33}, 3}})
                for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()}) {
                    bool has_w = wb & 1, has_b = wb & 2;
                    auto dims = shape.dims();
                    std::vector<size_t> tail(dims.end() - long(k), dims.end());
                    OprCase c;
                    c.name = fmt::format("{} {} {} k={} w={} b={}", layer ? "layer" : "rms",
                                         dt.name(), shape.to_string(), k, has_w, has_b);
                    c.shapes = {shape};
                    if (has_w) c.shapes.push_back(TensorShape(tail));
                    if (has_b) c.shapes.push_back(TensorShape(tail));
                    c.dtypes.assign(c.shapes.size(), dt);
                    c.low = -3;
                    c.high = 5; // a nonzero mean exercises the centring
                    size_t kk = k;
                    c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                        SymbolVar w = has_w ? in[1] : SymbolVar{};
                        SymbolVar b = has_b ? in[has_w ? 2 : 1] : SymbolVar{};
                        return {layer ? opr::layer_norm(in[0], w, b, kk, 1e-5f)
                                      : opr::rms_norm(in[0], w, b, kk, 1e-5f)};
                    };
                    c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                        const Tensor* w = has_w ? &in[1] : nullptr;
                        const Tensor* b = has_b ? &in[has_w ? 2 : 1] : nullptr;
                        return {ref_norm(layer, in[0], w, b, kk, 1e-5)};
                    };
                    c.rtol = c.atol = dt == dtype::Float32() ? 1e-5 : tol_for(dt) * 2;
                    check_operator(c);
                }
}

TEST(NormalizationOpr, LayerNormIsAccurateWhenTheMeanDominates) {
    // Values 1000 + small noise: a one-pass E[x^2] - E[x]^2 would lose every digit.
    std::mt19937 rng(5);
    Tensor x = random_tensor({4, 512}, dtype::Float32(), rng, -1, 1);
    for (size_t i = 0; i < 4 * 512; ++i) x.ptr<float>()[i] += 1000.f;
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::layer_norm(in[0])};
    });
    expect_tensor_near(out[0], ref_norm(true, x, nullptr, nullptr, 1, 1e-5), 1e-3, 1e-3,
                       "layer norm of 1000 + noise");
}

TEST(NormalizationOpr, LargeTensorsRunInParallel) {
    OprCase c;
    c.name = "layer norm large";
    c.shapes = {{600, 300}, {300}, {300}};
    c.build = [](const SymbolVarArray& in) -> SymbolVarArray {
        return {opr::layer_norm(in[0], in[1], in[2]), opr::rms_norm(in[0], in[1])};
    };
    c.reference = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {ref_norm(true, in[0], &in[1], &in[2], 1, 1e-5),
                ref_norm(false, in[0], &in[1], nullptr, 1, 1e-6)};
    };
    c.rtol = c.atol = 1e-5;
    check_operator(c);
}

TEST(NormalizationOpr, ErrorsNameShapesAndDtypes) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 8});
    auto w = opr::Input::make(*g, "w", dtype::Float32(), {4});
    auto wh = opr::Input::make(*g, "wh", dtype::Float16(), {8});
    expect_error<ShapeError>([&] { opr::layer_norm(x, w); },
                             {"LayerNorm", "weight has shape {4}", "expected {8}", "{4,8}"});
    expect_error<ShapeError>([&] { opr::rms_norm(x, {}, {}, 3); },
                             {"RMSNorm", "normalized_ndim 3", "rank-2"});
    expect_error<ShapeError>([&] { opr::layer_norm(x, {}, {}, 0); }, {"normalized_ndim 0"});
    expect_error<DTypeError>([&] { opr::layer_norm(x, wh); },
                             {"LayerNorm", "weight \"wh\" has dtype float16", "expected float32"});
    expect_error<DTypeError>([&] { opr::layer_norm(x, {}, wh); }, {"bias \"wh\""});
    auto i = opr::Input::make(*g, "i", dtype::Int32(), {4, 8});
    expect_error<DTypeError>([&] { opr::rms_norm(i); }, {"RMSNorm", "int32"});
}
