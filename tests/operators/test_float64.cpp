// float64 through the operators: elemwise modes, reductions, cumsum, TypeCvt, matmul and data
// movement compute in double (checked against double references with tolerances float32
// cannot meet), the gradient of a float64 graph matches finite differences taken in double,
// and operators without a double kernel reject float64 with a DTypeError naming them.
#include "checker.h"
#include "graph/kernel_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

using namespace braid;
using namespace braid::test;
using ::testing::HasSubstr;

namespace {

const DType F64 = dtype::Float64();

//! A float64 tensor of `shape` holding `values`.
Tensor f64_tensor(const TensorShape& shape, const std::vector<double>& values) {
    Tensor t(shape, F64);
    EXPECT_EQ(values.size(), shape.total_nr_elems());
    for (size_t i = 0; i < values.size(); ++i) t.ptr<double>()[i] = values[i];
    return t;
}

//! A float64 tensor with values in [low, high) that differ from their float32 roundings.
Tensor f64_random(const TensorShape& shape, std::mt19937& rng, double low, double high) {
    Tensor t(shape, F64);
    std::uniform_real_distribution<double> dist(low, high);
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t.ptr<double>()[i] = dist(rng);
    return t;
}

//! Compiles `outputs`, feeds `inputs` and returns copies of the outputs.
std::vector<Tensor> run(const SymbolVarArray& inputs, const std::vector<Tensor>& values,
                        const SymbolVarArray& outputs) {
    std::vector<OutputSpec> specs(outputs.begin(), outputs.end());
    auto exec = outputs.at(0).graph().compile(specs);
    for (size_t i = 0; i < inputs.size(); ++i) exec->feed(inputs[i], values[i]);
    exec->run();
    std::vector<Tensor> res;
    for (size_t k = 0; k < outputs.size(); ++k) res.push_back(exec->output(k).copy());
    return res;
}

//! Expects every element of `got` (float64) within rtol of `want`, naming `what`.
void expect_close(const Tensor& got, const std::vector<double>& want, double rtol,
                  const std::string& what) {
    ASSERT_EQ(got.dtype(), F64) << what;
    ASSERT_EQ(got.shape().total_nr_elems(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
        double g = got.at(i), w = want[i];
        if (std::isnan(w)) {
            EXPECT_TRUE(std::isnan(g)) << what << " element " << i;
            continue;
        }
        EXPECT_NEAR(g, w, rtol * std::abs(w) + 1e-300) << what << " element " << i;
    }
}

// Relative tolerance of the double kernels: a few ulp of libm. float32 errs by ~1e-7.
constexpr double TIGHT = 1e-13;

struct UnaryCase {
    opr::ElemMode mode;
    double (*ref)(double);
    double low, high;
};

} // namespace

TEST(Float64Elemwise, UnaryFloatModesComputeInDouble) {
    using M = opr::ElemMode;
    const UnaryCase cases[] = {
        {M::NEG, [](double x) { return -x; }, -3, 3},
        {M::ABS, [](double x) { return std::fabs(x); }, -3, 3},
        {M::SIGN, [](double x) { return double((x > 0) - (x < 0)); }, -3, 3},
        {M::RELU, [](double x) { return x > 0 ? x : 0.0; }, -3, 3},
        {M::EXP, [](double x) { return std::exp(x); }, -5, 5},
        {M::EXPM1, [](double x) { return std::expm1(x); }, -1e-6, 1e-6},
        {M::LOG, [](double x) { return std::log(x); }, 0.5, 2},
        {M::LOG1P, [](double x) { return std::log1p(x); }, -1e-6, 1e-6},
        {M::SQRT, [](double x) { return std::sqrt(x); }, 0.1, 9},
        {M::RSQRT, [](double x) { return 1 / std::sqrt(x); }, 0.1, 9},
        {M::SQUARE, [](double x) { return x * x; }, -3, 3},
        {M::SIN, [](double x) { return std::sin(x); }, -3, 3},
        {M::COS, [](double x) { return std::cos(x); }, -3, 3},
        {M::TANH, [](double x) { return std::tanh(x); }, -3, 3},
        {M::SIGMOID, [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
        {M::GELU, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -2, 3},
        {M::GELU_TANH,
         [](double x) {
             return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
         },
         -3, 3},
        {M::SILU, [](double x) { return x / (1 + std::exp(-x)); }, -3, 3},
        {M::ERF, [](double x) { return std::erf(x); }, -2, 2},
        {M::FLOOR, [](double x) { return std::floor(x); }, -1e6, 1e6},
        {M::CEIL, [](double x) { return std::ceil(x); }, -1e6, 1e6},
        {M::ROUND, [](double x) { return std::nearbyint(x); }, -1e6, 1e6},
    };
    std::mt19937 rng(7);
    for (const auto& c : cases) {
        SCOPED_TRACE(opr::elem_mode_name(c.mode));
        auto g = ComputingGraph::make();
        auto x = opr::Input::make(*g, "x", F64, {3, 37});
        auto y = opr::Elemwise::make(c.mode, {x});
        ASSERT_EQ(y.dtype(), F64);
        Tensor xv = f64_random({3, 37}, rng, c.low, c.high);
        // FLOOR/CEIL/ROUND: fractions below float32's resolution at 1e6 decide the result.
        if (c.mode == M::FLOOR || c.mode == M::CEIL || c.mode == M::ROUND)
            for (size_t i = 0; i < 111; ++i)
                xv.ptr<double>()[i] = std::floor(xv.ptr<double>()[i]) + (i % 3 ? 1e-3 : 0.5);
        std::vector<double> want;
        for (size_t i = 0; i < 111; ++i) want.push_back(c.ref(xv.at(i)));
        expect_close(run({x}, {xv}, {y})[0], want, TIGHT, opr::elem_mode_name(c.mode));
    }
}

TEST(Float64Elemwise, SmallDifferencesSurviveWhereFloat32LosesThem) {
    // 1 + k 1e-10 rounds to 1 in float32; in double, (x - 1) recovers k 1e-10 to ~1e-6, and
    // exp(1e-10) - 1 and log1p / expm1 keep their tiny values.
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", F64, {4});
    auto d = x - 1.0;
    auto e = opr::exp(x - x + 1e-10) - 1.0;
    auto sum = x + 1e-10;
    Tensor xv = f64_tensor({4}, {1 + 1e-10, 1 + 2e-10, 1 + 3e-10, 1 + 4e-10});
    auto out = run({x}, {xv}, {d, e, sum});
    expect_close(out[0], {1e-10, 2e-10, 3e-10, 4e-10}, 1e-5, "x - 1");
    expect_close(out[1], {1e-10, 1e-10, 1e-10, 1e-10}, 1e-5, "exp(1e-10) - 1");
    expect_close(out[2], {1 + 2e-10, 1 + 3e-10, 1 + 4e-10, 1 + 5e-10}, 1e-15, "x + 1e-10");
}

TEST(Float64Elemwise, BinaryAndTernaryModesBroadcastInDouble) {
    using M = opr::ElemMode;
    std::mt19937 rng(3);
    Tensor av = f64_random({5, 1, 7}, rng, 0.5, 3), bv = f64_random({4, 1}, rng, 0.5, 3);
    Tensor cv = f64_random({7}, rng, -2, 2);
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", F64, {5, 1, 7});
    auto b = opr::Input::make(*g, "b", F64, {4, 1});
    auto c = opr::Input::make(*g, "c", F64, {7});
    struct Bin {
        M mode;
        std::function<double(double, double)> ref;
    };
    std::vector<Bin> bins = {
        {M::ADD, [](double p, double q) { return p + q; }},
        {M::SUB, [](double p, double q) { return p - q; }},
        {M::MUL, [](double p, double q) { return p * q; }},
        {M::TRUE_DIV, [](double p, double q) { return p / q; }},
        {M::FLOOR_DIV, [](double p, double q) { return std::floor(p / q); }},
        {M::MOD, [](double p, double q) { return p - std::floor(p / q) * q; }},
        {M::POW, [](double p, double q) { return std::pow(p, q); }},
        {M::MAX, [](double p, double q) { return std::max(p, q); }},
        {M::MIN, [](double p, double q) { return std::min(p, q); }},
    };
    SymbolVarArray outs;
    for (auto& bin : bins) outs.push_back(opr::Elemwise::make(bin.mode, {a, b}));
    outs.push_back(opr::less(a, b).astype(F64));
    outs.push_back(opr::equal(a, a + 1e-12).astype(F64)); // distinct in double
    outs.push_back(opr::clip(c, -0.5, 0.5));
    outs.push_back(opr::fma3(a, b, c));
    outs.push_back(opr::where(opr::less(a, b), a, b));
    auto res = run({a, b, c}, {av, bv, cv}, outs);
    // Element (i, j, k) of the {5, 4, 7} broadcast.
    auto at = [&](const Tensor& t, size_t i, size_t j, size_t k) {
        if (&t == &av) return t.at(i * 7 + k);
        if (&t == &bv) return t.at(j);
        return t.at(k);
    };
    for (size_t m = 0; m < bins.size(); ++m) {
        std::vector<double> want;
        for (size_t i = 0; i < 5; ++i)
            for (size_t j = 0; j < 4; ++j)
                for (size_t k = 0; k < 7; ++k)
                    want.push_back(bins[m].ref(at(av, i, j, k), at(bv, i, j, k)));
        // MOD subtracts nearly equal values: its error is relative to the operands.
        expect_close(res[m], want, bins[m].mode == M::MOD ? 1e-12 : TIGHT,
                     opr::elem_mode_name(bins[m].mode));
    }
    std::vector<double> lt, eq, fma, wh;
    for (size_t i = 0; i < 5; ++i)
        for (size_t j = 0; j < 4; ++j)
            for (size_t k = 0; k < 7; ++k) {
                double p = at(av, i, j, k), q = at(bv, i, j, k), r = at(cv, i, j, k);
                lt.push_back(p < q);
                fma.push_back(p * q + r);
                wh.push_back(p < q ? p : q);
            }
    size_t n = bins.size();
    expect_close(res[n], lt, 0, "LT");
    eq.assign(35, 0.0);
    expect_close(res[n + 1], eq, 0, "EQ with a 1e-12 difference");
    std::vector<double> clipped;
    for (size_t k = 0; k < 7; ++k) clipped.push_back(std::clamp(cv.at(k), -0.5, 0.5));
    expect_close(res[n + 2], clipped, 0, "CLIP");
    expect_close(res[n + 3], fma, TIGHT, "FMA3");
    expect_close(res[n + 4], wh, 0, "WHERE");
}

TEST(Float64Elemwise, LargeAndStridedInputsRunInDouble) {
    // Above the parallel threshold, with a transposed (strided) operand.
    std::mt19937 rng(11);
    Tensor av = f64_random({300, 200}, rng, -1, 1), bv = f64_random({200, 300}, rng, -1, 1);
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", F64, {300, 200});
    auto b = opr::Input::make(*g, "b", F64, {200, 300});
    auto y = opr::tanh(a) * opr::transpose(b, {1, 0}) + 1e-9;
    std::vector<double> want;
    for (size_t i = 0; i < 300; ++i)
        for (size_t j = 0; j < 200; ++j)
            want.push_back(std::tanh(av.at(i * 200 + j)) * bv.at(j * 300 + i) + 1e-9);
    expect_close(run({a, b}, {av, bv}, {y})[0], want, 1e-14, "tanh(a) * b^T + 1e-9");
}

TEST(Float64Elemwise, RejectionListsFloat64AmongAcceptedDtypes) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", F64, {2});
    try {
        opr::logical_not(x);
        FAIL() << "LOGICAL_NOT accepted float64";
    } catch (const DTypeError& e) {
        EXPECT_THAT(e.what(), HasSubstr("LOGICAL_NOT"));
        EXPECT_THAT(e.what(), HasSubstr("float64"));
    }
    auto i = opr::Input::make(*g, "i", dtype::Int32(), {2});
    try {
        opr::exp(i);
        FAIL() << "EXP accepted int32";
    } catch (const DTypeError& e) {
        EXPECT_THAT(e.what(), HasSubstr("float32, float16, bfloat16, float64"));
    }
    EXPECT_THROW(x + opr::Input::make(*g, "f", dtype::Float32(), {2}), DTypeError);
}

TEST(Float64Reduce, EveryModeAccumulatesInDouble) {
    using R = opr::ReduceMode;
    // 1 + i 1e-12: in float32 every element is 1 and the sums lose the 1e-12 parts.
    const size_t n = 1000;
    std::vector<double> v(3 * n);
    for (size_t r = 0; r < 3; ++r)
        for (size_t i = 0; i < n; ++i) v[r * n + i] = 1 + double(r * n + i) * 1e-12;
    Tensor xv = f64_tensor({3, n}, v);
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", F64, {3, n});
    SymbolVarArray outs;
    for (R m : {R::SUM, R::MEAN, R::MAX, R::MIN, R::PROD, R::SUM_SQR})
        outs.push_back(opr::Reduce::make(x, {m, {1}, false}));
    outs.push_back(opr::reduce_sum(x, {0}, true)); // a middle-axis (column) reduction
    outs.push_back(opr::reduce_sum(x));            // everything
    outs.push_back(opr::argmax(x, 1));
    outs.push_back(opr::argmin(x, 1));
    auto res = run({x}, {xv}, outs);
    std::vector<double> sum(3), mean(3), mx(3), mn(3), prod(3, 1), sq(3);
    double all = 0;
    for (size_t r = 0; r < 3; ++r) {
        long double s = 0, p = 1, q = 0;
        for (size_t i = 0; i < n; ++i) {
            long double e = v[r * n + i];
            s += e;
            p *= e;
            q += e * e;
        }
        sum[r] = double(s);
        mean[r] = double(s / n);
        mx[r] = v[r * n + n - 1];
        mn[r] = v[r * n];
        prod[r] = double(p);
        sq[r] = double(q);
        all += sum[r];
    }
    // A sum of 1000 terms in double errs by well under 1e-13 relative; float32 lanes would err
    // by ~5e-10 (they drop every 1e-12 part).
    expect_close(res[0], sum, 1e-14, "SUM");
    expect_close(res[1], mean, 1e-14, "MEAN");
    expect_close(res[2], mx, 0, "MAX");
    expect_close(res[3], mn, 0, "MIN");
    expect_close(res[4], prod, 1e-13, "PROD");
    expect_close(res[5], sq, 1e-14, "SUM_SQR");
    std::vector<double> cols;
    for (size_t i = 0; i < n; ++i) cols.push_back(v[i] + v[n + i] + v[2 * n + i]);
    expect_close(res[6], cols, 1e-15, "SUM over axis 0");
    expect_close(res[7], {all}, 1e-14, "SUM over everything");
    ASSERT_EQ(res[8].dtype(), dtype::Int32());
    for (size_t r = 0; r < 3; ++r) {
        EXPECT_EQ(res[8].ptr<int32_t>()[r], int32_t(n - 1)) << "ARGMAX row " << r;
        EXPECT_EQ(res[9].ptr<int32_t>()[r], 0) << "ARGMIN row " << r;
    }
}

TEST(Float64CumSum, RunningSumsKeepTinyIncrements) {
    // 1 followed by 1e-10 steps: float32 would stay at 1.
    std::vector<double> v = {1, 1e-10, 1e-10, 1e-10, 2, 1e-10, 1e-10, 1e-10};
    Tensor xv = f64_tensor({2, 4}, v);
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", F64, {2, 4});
    auto inc = opr::cumsum(x, 1);
    auto exc_rev = opr::CumSum::make(x, {1, true, true});
    auto col = opr::cumsum(x, 0);
    auto res = run({x}, {xv}, {inc, exc_rev, col});
    expect_close(res[0], {1, 1 + 1e-10, 1 + 2e-10, 1 + 3e-10, 2, 2 + 1e-10, 2 + 2e-10, 2 + 3e-10},
                 1e-15, "inclusive");
    expect_close(res[1], {3e-10, 2e-10, 1e-10, 0, 3e-10, 2e-10, 1e-10, 0}, 1e-6,
                 "exclusive reverse");
    expect_close(res[2], {1, 1e-10, 1e-10, 1e-10, 3, 2e-10, 2e-10, 2e-10}, 1e-15, "axis 0");
}

TEST(Float64TypeCvt, ConvertsToAndFromEveryDtypeRoundingOnce) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", F64, {4});
    auto i64 = opr::Input::make(*g, "i", dtype::Int64(), {2});
    Tensor xv = f64_tensor({4}, {1.0 + 0x1p-11 + 0x1p-40, -2.75, 1e10 + 0.5, 0.1});
    Tensor iv(TensorShape{2}, dtype::Int64());
    iv.ptr<int64_t>()[0] = 9007199254740993; // 2^53 + 1: a tie, rounds to 2^53
    iv.ptr<int64_t>()[1] = -5;
    SymbolVarArray outs = {x.astype(dtype::Float16()),
                           x.astype(dtype::Float32()),
                           x.astype(dtype::Int32()),
                           x.astype(dtype::Bool()),
                           i64.astype(F64),
                           x.astype(dtype::Float32()).astype(F64)};
    auto res = run({x, i64}, {xv, iv}, outs);
    EXPECT_EQ(res[0].ptr<uint16_t>()[0], 0x3c01); // once, not through float32 (0x3c00)
    EXPECT_EQ(res[1].ptr<float>()[3], 0.1f);
    EXPECT_EQ(res[1].ptr<float>()[2], 1e10f);
    EXPECT_EQ(res[2].ptr<int32_t>()[1], -2);
    EXPECT_EQ(res[2].ptr<int32_t>()[2], std::numeric_limits<int32_t>::max());
    EXPECT_EQ(res[3].ptr<uint8_t>()[1], 1);
    expect_close(res[4], {9007199254740992.0, -5}, 0, "int64 -> float64");
    expect_close(res[5], {double(float(xv.at(0))), -2.75, double(1e10f), double(0.1f)}, 0,
                 "float64 -> float32 -> float64");
}

TEST(Float64MatMul, MatMulAndBatchedMatMulUseDoubleGemm) {
    std::mt19937 rng(5);
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            SCOPED_TRACE(fmt::format("transpose_a {} transpose_b {}", ta, tb));
            size_t m = 7, k = 300, n = 5, batch = 3;
            TensorShape sa = ta ? TensorShape{batch, k, m} : TensorShape{batch, m, k};
            TensorShape sb = tb ? TensorShape{1, n, k} : TensorShape{1, k, n}; // broadcast
            Tensor av = f64_random(sa, rng, -1, 1), bv = f64_random(sb, rng, -1, 1);
            // Offsets below float32's resolution make float32 products visibly wrong.
            for (size_t i = 0; i < av.shape().total_nr_elems(); ++i) av.ptr<double>()[i] += 1e3;
            auto g = ComputingGraph::make();
            auto a = opr::Input::make(*g, "a", F64, sa);
            auto b = opr::Input::make(*g, "b", F64, sb);
            auto y = opr::batched_matmul(a, b, ta, tb);
            // The first batch item through 2-D MatMul too.
            auto a0 = opr::subtensor(a, {opr::AxisIndex::index(0, 0)});
            auto b0 = opr::subtensor(b, {opr::AxisIndex::index(0, 0)});
            auto y0 = opr::matmul(a0, b0, ta, tb);
            auto res = run({a, b}, {av, bv}, {y, y0});
            std::vector<double> want;
            for (size_t p = 0; p < batch; ++p)
                for (size_t i = 0; i < m; ++i)
                    for (size_t j = 0; j < n; ++j) {
                        long double s = 0;
                        for (size_t q = 0; q < k; ++q) {
                            double x = ta ? av.at((p * k + q) * m + i) : av.at((p * m + i) * k + q);
                            double w = tb ? bv.at(j * k + q) : bv.at(q * n + j);
                            s += (long double)x * w;
                        }
                        want.push_back(double(s));
                    }
            // |sum| ~ 1e3 * |sum of w| while the terms reach 1e3: allow cancellation.
            for (size_t i = 0; i < want.size(); ++i)
                EXPECT_NEAR(res[0].at(i), want[i], 1e-9) << "batched element " << i;
            for (size_t i = 0; i < m * n; ++i)
                EXPECT_NEAR(res[1].at(i), want[i], 1e-9) << "2-D element " << i;
        }
}

TEST(Float64DataMovement, ShapeIndexingAndConstantOpsKeepEveryBit) {
    // Values that are not float32 values: any narrowing on the way shows.
    std::vector<double> v;
    for (int i = 0; i < 12; ++i) v.push_back(0.1 * i + 1e-12 * i);
    Tensor xv = f64_tensor({3, 4}, v);
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", F64, {3, 4});
    Tensor idx(TensorShape{2}, dtype::Int32());
    idx.ptr<int32_t>()[0] = 2;
    idx.ptr<int32_t>()[1] = 0;
    auto ids = opr::ImmutableTensor::make(*g, idx);
    Tensor gidx(TensorShape{2, 4}, dtype::Int32());
    for (int i = 0; i < 8; ++i) gidx.ptr<int32_t>()[i] = i < 4 ? 2 : 0;
    auto gather_ids = opr::ImmutableTensor::make(*g, gidx);
    Tensor sidx(TensorShape{1, 4}, dtype::Int32());
    for (int i = 0; i < 4; ++i) sidx.ptr<int32_t>()[i] = i % 3;
    auto scatter_ids = opr::ImmutableTensor::make(*g, sidx);
    auto c = opr::ImmutableTensor::make(*g, f64_tensor({4}, {1e-13, 2e-13, 3e-13, 4e-13}));
    SymbolVarArray outs = {
        x.reshape({4, 3}),
        opr::transpose(x, {1, 0}),
        opr::concat({x, x}, 0),
        opr::subtensor(x, {opr::AxisIndex::slice(1, 1, 3)}),
        opr::set_subtensor(x, c, {opr::AxisIndex::index(0, 1)}),
        opr::incr_subtensor(x, c, {opr::AxisIndex::index(0, 1)}),
        c.broadcast({3, 4}),
        opr::fill(*g, {2}, 0.1, F64),
        opr::arange(*g, 0, 1, 0.1, F64),
        opr::gather(x, gather_ids, 0),
        opr::embedding(x, ids),
        opr::index_add(x, ids, opr::subtensor(x, {opr::AxisIndex::slice(0, 0, 2)}), 0),
        opr::scatter_add(x, scatter_ids, c.reshape({1, 4}), 0),
    };
    auto r = run({x}, {xv}, outs);
    auto X = [&](size_t i, size_t j) { return v[i * 4 + j]; };
    std::vector<double> reshaped = v, tr, cat = v, sub, set = v, incr = v, bc, emb, ia = v, sa = v;
    cat.insert(cat.end(), v.begin(), v.end());
    for (size_t j = 0; j < 4; ++j)
        for (size_t i = 0; i < 3; ++i) tr.push_back(X(i, j));
    for (size_t i = 0; i < 3; ++i)
        for (size_t j = 1; j < 3; ++j) sub.push_back(X(i, j));
    double cv[4] = {1e-13, 2e-13, 3e-13, 4e-13};
    for (size_t j = 0; j < 4; ++j) {
        set[4 + j] = cv[j];
        incr[4 + j] += cv[j];
        ia[2 * 4 + j] += X(0, j); // index 2 gets row 0 of the value (x[0:2])
        ia[0 * 4 + j] += X(1, j); // index 0 gets row 1
        sa[(j % 3) * 4 + j] += cv[j];
    }
    for (size_t i = 0; i < 3; ++i)
        for (size_t j = 0; j < 4; ++j) bc.push_back(cv[j]);
    for (size_t row : {2, 0})
        for (size_t j = 0; j < 4; ++j) emb.push_back(X(row, j));
    std::vector<double> ar;
    for (int i = 0; i < 10; ++i) ar.push_back(0.1 * i);
    expect_close(r[0], reshaped, 0, "reshape");
    expect_close(r[1], tr, 0, "transpose");
    expect_close(r[2], cat, 0, "concat");
    expect_close(r[3], sub, 0, "subtensor");
    expect_close(r[4], set, 0, "set_subtensor");
    expect_close(r[5], incr, 0, "incr_subtensor");
    expect_close(r[6], bc, 0, "broadcast of an ImmutableTensor");
    expect_close(r[7], {0.1, 0.1}, 0, "fill");
    expect_close(r[8], ar, 0, "arange");
    expect_close(r[9], emb, 0, "gather");
    expect_close(r[10], emb, 0, "embedding");
    expect_close(r[11], ia, 0, "index_add");
    expect_close(r[12], sa, 0, "scatter_add");
}

TEST(Float64Grad, GraphGradientMatchesFiniteDifferencesInDouble) {
    // Elemwise, reduce, broadcast and matmul gradients in float64. Central differences with
    // h = 1e-5 err by ~1e-10 in double, so the tolerance is far below what float32 meets.
    OprCase c;
    c.name = "float64 mlp-like graph";
    c.shapes = {{4, 3}, {3, 5}, {5}};
    c.dtypes = {F64, F64, F64};
    c.build = [](const SymbolVarArray& in) -> SymbolVarArray {
        auto h = opr::matmul(in[0], in[1]) + in[2];
        auto y = opr::tanh(h) * opr::exp(in[2] * 0.3) + opr::sigmoid(h) / (opr::square(h) + 1.0);
        return {opr::reduce_mean(y, {1}), opr::reduce_max(h, {0}) + opr::cumsum(in[2], 0)};
    };
    c.reference = [](const std::vector<Tensor>& v) {
        Tensor mean(TensorShape{4}, F64), mx(TensorShape{5}, F64);
        double cum = 0;
        std::vector<double> h(20);
        for (size_t i = 0; i < 4; ++i)
            for (size_t j = 0; j < 5; ++j) {
                double s = v[2].at(j);
                for (size_t q = 0; q < 3; ++q) s += v[0].at(i * 3 + q) * v[1].at(q * 5 + j);
                h[i * 5 + j] = s;
            }
        for (size_t i = 0; i < 4; ++i) {
            double s = 0;
            for (size_t j = 0; j < 5; ++j) {
                double x = h[i * 5 + j];
                s += std::tanh(x) * std::exp(v[2].at(j) * 0.3) +
                     1 / (1 + std::exp(-x)) / (x * x + 1);
            }
            mean.ptr<double>()[i] = s / 5;
        }
        for (size_t j = 0; j < 5; ++j) {
            double m = -INFINITY;
            for (size_t i = 0; i < 4; ++i) m = std::max(m, h[i * 5 + j]);
            cum += v[2].at(j);
            mx.ptr<double>()[j] = m + cum;
        }
        return std::vector<Tensor>{mean, mx};
    };
    c.rtol = 1e-13;
    c.atol = 1e-14;
    c.check_grad = true;
    c.grad_eps = 1e-5;
    c.grad_rtol = 1e-7;
    c.grad_atol = 1e-9;
    check_operator(c, 21);
}

TEST(Float64Grad, LossMayBeFloat64AndTypeCvtPassesGradients) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", F64, {3});
    auto f = opr::Input::make(*g, "f", dtype::Float32(), {3});
    // d/dx sum(x^3 + float64(f) x) = 3 x^2 + f; d/df = x (as float32).
    auto loss = opr::reduce_sum(x * x * x + f.astype(F64) * x);
    auto grads = grad(loss, {x, f});
    ASSERT_EQ(grads[0].dtype(), F64);
    ASSERT_EQ(grads[1].dtype(), dtype::Float32());
    Tensor xv = f64_tensor({3}, {1 + 1e-9, -2.0, 0.5});
    Tensor fv(TensorShape{3}, dtype::Float32());
    for (int i = 0; i < 3; ++i) fv.ptr<float>()[i] = 0.25f * float(i);
    auto r = run({x, f}, {xv, fv}, {grads[0], grads[1]});
    std::vector<double> want;
    for (size_t i = 0; i < 3; ++i) want.push_back(3 * xv.at(i) * xv.at(i) + fv.at(i));
    expect_close(r[0], want, 1e-15, "d loss / d x");
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(r[1].at(i), double(float(xv.at(i))));
}

TEST(Float64Rejected, OperatorsWithoutDoubleKernelsNameThemselves) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", F64, {1, 2, 5, 5});
    auto w = opr::Input::make(*g, "w", F64, {3, 2, 3, 3});
    auto expect_rejected = [](const std::function<void()>& build, const std::string& op) {
        try {
            build();
            ADD_FAILURE() << op << " accepted float64";
        } catch (const DTypeError& e) {
            EXPECT_THAT(e.what(), HasSubstr(op));
            EXPECT_THAT(e.what(), HasSubstr("float64"));
            EXPECT_THAT(e.what(), HasSubstr("float32"));
        }
    };
    expect_rejected([&] { opr::conv2d(x, w); }, "Conv2d");
    expect_rejected([&] { opr::max_pool2d(x, 2); }, "Pooling");
    expect_rejected([&] { opr::softmax(x); }, "Softmax");
    expect_rejected([&] { opr::layer_norm(x); }, "LayerNorm");
    auto q = opr::Input::make(*g, "q", F64, {2, 4, 8});
    expect_rejected([&] { opr::scaled_dot_product_attention(q, q, q); }, "Attention");
}

TEST(Float64Rejected, NoDeviceKernelTakesFloat64) {
    // Compiling for a CUDA comp node resolves kernels first: a float64 var refuses every
    // device kernel with a DTypeError (checked here without a GPU through resolve_kernel).
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", F64, {4});
    auto y = opr::exp(x).rename("y");
    try {
        resolve_kernel(*y.node()->owner(), Device::Kind::CUDA, "cuda0");
        FAIL() << "a CUDA kernel was resolved for float64";
    } catch (const DTypeError& e) {
        EXPECT_THAT(e.what(), HasSubstr("Elemwise(EXP)"));
        EXPECT_THAT(e.what(), HasSubstr("var \"x\""));
        EXPECT_THAT(e.what(), HasSubstr("no CUDA kernel for float64"));
        EXPECT_THAT(e.what(), HasSubstr("cuda0"));
    }
    // The CPU kernel resolves as always.
    EXPECT_NE(resolve_kernel(*y.node()->owner(), Device::Kind::CPU, "cpu0"), nullptr);
}
