// Reduce and ArgReduce against plain loops: every mode over axis sets (negative, several,
// all, none), keepdims, rank 0, empty and unit dims, each dtype, the multi-threaded paths
// (long rows, tall columns, many tiles), float32 accuracy on long sums, and error messages.
#include "reference.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace braid;
using namespace braid::test;
using opr::ReduceMode;

namespace {

//! The reduction of `x` over `axes` in double, stored in x's dtype.
Tensor ref_reduce(const Tensor& x, std::vector<int> axes, bool keep, ReduceMode mode) {
    const TensorShape& s = x.shape();
    size_t nd = s.ndim();
    std::vector<bool> red(nd, axes.empty());
    for (int a : axes) red[size_t(a < 0 ? a + int(nd) : a)] = true;
    std::vector<size_t> dims;
    size_t count = 1;
    for (size_t d = 0; d < nd; ++d) {
        if (red[d]) count *= s[d];
        if (!red[d])
            dims.push_back(s[d]);
        else if (keep)
            dims.push_back(1);
    }
    TensorShape os(dims);
    double init = mode == ReduceMode::MAX    ? -INFINITY
                  : mode == ReduceMode::MIN  ? INFINITY
                  : mode == ReduceMode::PROD ? 1
                                             : 0;
    std::vector<double> acc(os.total_nr_elems(), init);
    for (size_t i = 0; i < s.total_nr_elems(); ++i) {
        size_t rest = i, o = 0, mul = 1;
        for (size_t d = nd; d-- > 0;) {
            size_t idx = rest % s[d];
            rest /= s[d];
            if (!red[d]) {
                o += idx * mul;
                mul *= s[d];
            }
        }
        double v = x.at(i);
        double& a = acc[o];
        switch (mode) {
        case ReduceMode::MAX:
            a = std::isnan(v) || v > a ? v : a;
            break;
        case ReduceMode::MIN:
            a = std::isnan(v) || v < a ? v : a;
            break;
        case ReduceMode::PROD:
            a *= v;
            break;
        case ReduceMode::SUM_SQR:
            a += v * v;
            break;
        default:
            a += v;
        }
    }
    Tensor r(os, x.dtype());
    for (size_t o = 0; o < acc.size(); ++o) {
        double v = acc[o];
        if (mode == ReduceMode::MEAN)
            v = x.dtype().is_float() ? v / double(count)
                                     : (count ? std::trunc(v / double(count)) : 0);
        store_from_double(x.dtype(), r.raw_ptr(), o, v);
    }
    return r;
}

OprCase reduce_case(ReduceMode mode, TensorShape shape, std::vector<int> axes, bool keep,
                    DType dt) {
    OprCase c;
    c.name = fmt::format("reduce {} {} {} axes {} keep {}", opr::reduce_mode_name(mode), dt.name(),
                         shape.to_string(), fmt::join(axes, ","), keep);
    c.shapes = {shape};
    c.dtypes = {dt};
    c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
        return {opr::Reduce::make(in[0], {mode, axes, keep})};
    };
    c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {ref_reduce(in[0], axes, keep, mode)};
    };
    if (mode == ReduceMode::PROD) {
        c.low = 0.5; // products of many elements stay in range
        c.high = 1.5;
    }
    bool is_int = !dt.is_float();
    if (is_int) {
        c.low = mode == ReduceMode::PROD ? -2 : -50;
        c.high = mode == ReduceMode::PROD ? 2 : 50;
        c.rtol = c.atol = 0;
    } else if (dt == dtype::Float32()) {
        // Sums of random signs cancel: allow float32 rounding of the partial sums.
        size_t count = 1;
        for (size_t d = 0; d < shape.ndim(); ++d)
            if (axes.empty() || std::find(axes.begin(), axes.end(), int(d)) != axes.end() ||
                std::find(axes.begin(), axes.end(), int(d) - int(shape.ndim())) != axes.end())
                count *= shape[d];
        c.rtol = 1e-5;
        c.atol = std::max(1e-5, 2e-8 * double(count) * (mode == ReduceMode::SUM_SQR ? 4 : 2));
    } else {
        c.rtol = c.atol = dt == dtype::Float16() ? 2e-3 : 1.6e-2;
    }
    return c;
}

const ReduceMode ALL_MODES[] = {ReduceMode::SUM, ReduceMode::MEAN, ReduceMode::MAX,
                                ReduceMode::MIN, ReduceMode::PROD, ReduceMode::SUM_SQR};

} // namespace

TEST(ReduceOpr, EveryModeOverAxisSetsWithKeepdims) {
    std::vector<std::vector<int>> axis_sets = {{}, {0}, {1}, {-1}, {0, 2}, {1, 2}, {-3, -2}};
    for (auto mode : ALL_MODES)
        for (auto& axes : axis_sets)
            for (bool keep : {false, true})
                check_operator(reduce_case(mode, {3, 4, 5}, axes, keep, dtype::Float32()));
}

TEST(ReduceOpr, EveryDtype) {
    for (auto mode : ALL_MODES)
        for (DType dt : {dtype::Float16(), dtype::BFloat16(), dtype::Int32(), dtype::Int64()})
            for (auto& axes : std::vector<std::vector<int>>{{}, {1}, {0, 2}})
                check_operator(reduce_case(mode, {4, 3, 6}, axes, false, dt));
}

TEST(ReduceOpr, RankZeroUnitAndEmptyDims) {
    for (auto mode : ALL_MODES) {
        check_operator(reduce_case(mode, {}, {}, false, dtype::Float32()));
        check_operator(reduce_case(mode, {1, 5, 1}, {0, 2}, false, dtype::Float32()));
        check_operator(reduce_case(mode, {1, 5, 1}, {0, 2}, true, dtype::Int32()));
        check_operator(reduce_case(mode, {0, 4}, {1}, true, dtype::Float32())); // empty output
        check_operator(reduce_case(mode, {7, 1}, {1}, false, dtype::Float32()));
    }
    // An empty reduced axis gives the identity (NaN for a float mean, 0 for an integer one).
    for (auto mode : {ReduceMode::SUM, ReduceMode::PROD, ReduceMode::MEAN, ReduceMode::SUM_SQR})
        for (DType dt : {dtype::Float32(), dtype::Int32()})
            check_operator(reduce_case(mode, {3, 0}, {1}, false, dt));
}

TEST(ReduceOpr, LargeInputsTakeEveryParallelPath) {
    for (auto mode : {ReduceMode::SUM, ReduceMode::MAX, ReduceMode::MEAN, ReduceMode::SUM_SQR}) {
        check_operator(reduce_case(mode, {3, 70001}, {1}, false, dtype::Float32()));   // long rows
        check_operator(reduce_case(mode, {50001, 3}, {0}, false, dtype::Float32()));   // tall
        check_operator(reduce_case(mode, {2000, 50}, {1}, true, dtype::Float32()));    // many rows
        check_operator(reduce_case(mode, {9, 300, 33}, {1}, false, dtype::Float32())); // tiles
        check_operator(reduce_case(mode, {70, 3, 600}, {0, 2}, false, dtype::Float32()));
        check_operator(reduce_case(mode, {40001, 2}, {}, false, dtype::Int32()));
    }
}

TEST(ReduceOpr, LongFloat32SumsStayAccurate) {
    // 4M values in [0, 1): naive float accumulation errs by ~1e-3 relative; blocked sums with
    // double combination stay near float32 rounding of the exact result.
    const size_t n = size_t(1) << 22;
    std::mt19937 rng(3);
    Tensor x = random_tensor({n}, dtype::Float32(), rng, 0, 1);
    double exact = 0;
    for (size_t i = 0; i < n; ++i) exact += x.ptr<float>()[i];
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::reduce_sum(in[0]),
                              opr::reduce_mean(in[0].reshape({1024, -1}), {0})};
    });
    EXPECT_NEAR(out[0].at(0), exact, exact * 1e-6);
    double col0 = 0;
    for (size_t r = 0; r < 1024; ++r) col0 += x.ptr<float>()[r * (n / 1024)];
    EXPECT_NEAR(out[1].at(0), col0 / 1024, 1e-6);
}

TEST(ReduceOpr, MaxAndMinPropagateNaN) {
    Tensor x = tensor_of({2, 3}, dtype::Float32(), {1, NAN, 3, 4, 5, 6});
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::reduce_max(in[0], {1}), opr::reduce_min(in[0], {1})};
    });
    for (auto& t : out) EXPECT_TRUE(std::isnan(t.at(0)));
    EXPECT_EQ(out[0].at(1), 6);
    EXPECT_EQ(out[1].at(1), 4);
}

TEST(ReduceOpr, AxisErrorsNameTheAxisAndTheRank) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3});
    expect_error<ShapeError>([&] { opr::reduce_sum(x, {2}); },
                             {"Reduce(SUM axes=2)", "axis 2 out of range for a rank-2 input"});
    expect_error<ShapeError>([&] { opr::reduce_sum(x, {-3}); }, {"axis -3", "rank-2"});
    expect_error<ShapeError>([&] { opr::reduce_sum(x, {0, -2}); }, {"axis -2 given twice"});
    auto e = opr::Input::make(*g, "e", dtype::Float32(), {0, 3});
    expect_error<ShapeError>([&] { opr::reduce_max(e, {0}); }, {"MAX", "empty axis 0", "{0,3}"});
    auto b = opr::Input::make(*g, "b", dtype::Bool(), {2});
    expect_error<DTypeError>([&] { opr::reduce_sum(b); }, {"Reduce(SUM)", "bool", "int32"});
}

// ---------------------------------------------------------------- ArgReduce
namespace {

Tensor ref_arg(const Tensor& x, int axis, bool keep, bool is_max) {
    size_t nd = x.shape().ndim();
    size_t a = size_t(axis < 0 ? axis + int(nd) : axis);
    size_t outer = 1, n = x.shape()[a], inner = 1;
    std::vector<size_t> dims;
    for (size_t d = 0; d < nd; ++d) {
        if (d < a) outer *= x.shape()[d];
        if (d > a) inner *= x.shape()[d];
        if (d != a)
            dims.push_back(x.shape()[d]);
        else if (keep)
            dims.push_back(1);
    }
    Tensor r(TensorShape(dims), dtype::Int32());
    for (size_t o = 0; o < outer; ++o)
        for (size_t i = 0; i < inner; ++i) {
            size_t best = 0;
            for (size_t k = 0; k < n; ++k) {
                double v = x.at((o * n + k) * inner + i), b = x.at((o * n + best) * inner + i);
                if (std::isnan(b)) break;
                if (std::isnan(v) || (is_max ? v > b : v < b)) best = k;
            }
            r.ptr<int32_t>()[o * inner + i] = int32_t(best);
        }
    return r;
}

} // namespace

TEST(ArgReduceOpr, ArgmaxAndArgminAlongEachAxis) {
    for (bool is_max : {true, false})
        for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::Int32(), dtype::Int64()})
            for (int axis : {0, 1, -1, 2})
                for (bool keep : {false, true}) {
                    OprCase c;
                    c.name =
                        fmt::format("arg{} {} axis {}", is_max ? "max" : "min", dt.name(), axis);
                    c.shapes = {{4, 6, 5}};
                    c.dtypes = {dt};
                    c.low = -4; // integers repeat: ties must pick the first
                    c.high = 4;
                    c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                        return {is_max ? opr::argmax(in[0], axis, keep)
                                       : opr::argmin(in[0], axis, keep)};
                    };
                    c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                        return {ref_arg(in[0], axis, keep, is_max)};
                    };
                    c.rtol = c.atol = 0;
                    check_operator(c);
                }
}

TEST(ArgReduceOpr, FirstNaNWinsAndLargeInputs) {
    Tensor x = tensor_of({2, 4}, dtype::Float32(), {1, NAN, 5, NAN, 2, 9, 9, 1});
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::argmax(in[0]), opr::argmin(in[0])};
    });
    EXPECT_EQ(values_of(out[0]), (std::vector<double>{1, 1}));
    EXPECT_EQ(values_of(out[1]), (std::vector<double>{1, 3}));
    for (int axis : {0, 1}) {
        OprCase c;
        c.name = "argmax large";
        c.shapes = {{300, 301}};
        c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
            return {opr::argmax(in[0], axis)};
        };
        c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
            return {ref_arg(in[0], axis, false, true)};
        };
        check_operator(c);
    }
}

TEST(ArgReduceOpr, ErrorsNameTheAxisRankAndDtype) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3});
    expect_error<ShapeError>([&] { opr::argmax(x, 2); },
                             {"ArgReduce(ARGMAX axis=2)", "out of range for a rank-2 input"});
    auto s = opr::Input::make(*g, "s", dtype::Float32(), {});
    expect_error<ShapeError>([&] { opr::argmin(s, 0); }, {"rank-0"});
    auto e = opr::Input::make(*g, "e", dtype::Float32(), {2, 0});
    expect_error<ShapeError>([&] { opr::argmax(e, 1); }, {"axis 1 of {2,0} is empty"});
    auto b = opr::Input::make(*g, "b", dtype::Bool(), {3});
    expect_error<DTypeError>([&] { opr::argmax(b); }, {"ArgReduce", "bool"});
}
