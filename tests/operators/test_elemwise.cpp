// Elemwise: every mode against a double-precision plain loop, with numpy broadcasting, rank 0,
// empty tensors, the float16/bfloat16 staging, integer and bool modes, the multi-threaded
// path, and the dtype/shape error messages.
#include "reference.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace braid;
using namespace braid::test;
using opr::ElemMode;

namespace {

//! Python-style modulo (the sign follows the divisor), as the MOD mode defines it.
double py_mod(double a, double b) {
    double r = std::fmod(a, b);
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

struct ModeRef {
    ElemMode mode;
    std::function<double(const double*)> f;
    double low = -3, high = 3;
};

std::vector<ModeRef> float_unary_modes() {
    auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
    return {
        {ElemMode::NEG, [](const double* x) { return -x[0]; }},
        {ElemMode::ABS, [](const double* x) { return std::fabs(x[0]); }},
        {ElemMode::SIGN, [](const double* x) { return double((x[0] > 0) - (x[0] < 0)); }},
        {ElemMode::RELU, [](const double* x) { return x[0] > 0 ? x[0] : 0; }},
        {ElemMode::EXP, [](const double* x) { return std::exp(x[0]); }, -20, 20},
        {ElemMode::EXPM1, [](const double* x) { return std::expm1(x[0]); }},
        {ElemMode::LOG, [](const double* x) { return std::log(x[0]); }, 1e-3, 100},
        {ElemMode::LOG1P, [](const double* x) { return std::log1p(x[0]); }, -0.9, 3},
        {ElemMode::SQRT, [](const double* x) { return std::sqrt(x[0]); }, 0, 9},
        {ElemMode::RSQRT, [](const double* x) { return 1 / std::sqrt(x[0]); }, 0.01, 9},
        {ElemMode::SQUARE, [](const double* x) { return x[0] * x[0]; }},
        {ElemMode::SIN, [](const double* x) { return std::sin(x[0]); }},
        {ElemMode::COS, [](const double* x) { return std::cos(x[0]); }},
        {ElemMode::TANH, [](const double* x) { return std::tanh(x[0]); }, -6, 6},
        {ElemMode::SIGMOID, [=](const double* x) { return sig(x[0]); }, -20, 20},
        {ElemMode::GELU,
         [](const double* x) { return 0.5 * x[0] * (1 + std::erf(x[0] / std::sqrt(2.0))); }},
        {ElemMode::GELU_TANH,
         [](const double* x) {
             double v = x[0];
             return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
         }},
        {ElemMode::SILU, [=](const double* x) { return x[0] * sig(x[0]); }, -10, 10},
        {ElemMode::ERF, [](const double* x) { return std::erf(x[0]); }},
        {ElemMode::FLOOR, [](const double* x) { return std::floor(x[0]); }},
        {ElemMode::CEIL, [](const double* x) { return std::ceil(x[0]); }},
        {ElemMode::ROUND, [](const double* x) { return std::nearbyint(x[0]); }},
    };
}

std::vector<ModeRef> float_binary_modes() {
    return {
        {ElemMode::ADD, [](const double* v) { return v[0] + v[1]; }},
        {ElemMode::SUB, [](const double* v) { return v[0] - v[1]; }},
        {ElemMode::MUL, [](const double* v) { return v[0] * v[1]; }},
        {ElemMode::TRUE_DIV, [](const double* v) { return v[0] / v[1]; }, 0.5, 3},
        {ElemMode::FLOOR_DIV, [](const double* v) { return std::floor(v[0] / v[1]); }, 0.3, 7},
        {ElemMode::MOD, [](const double* v) { return py_mod(v[0], v[1]); }, -7, 7},
        {ElemMode::POW, [](const double* v) { return std::pow(v[0], v[1]); }, 0.2, 3},
        {ElemMode::MAX, [](const double* v) { return std::max(v[0], v[1]); }},
        {ElemMode::MIN, [](const double* v) { return std::min(v[0], v[1]); }},
    };
}

const std::vector<std::pair<TensorShape, TensorShape>>& broadcast_pairs() {
    static const std::vector<std::pair<TensorShape, TensorShape>> pairs = {
        {{3, 4}, {3, 4}},
        {{3, 4}, {4}},
        {{3, 1}, {1, 4}},
        {{2, 3, 4}, {3, 1}},
        {{5}, {}},
        {{}, {5}},
        {{}, {}},
        {{0, 3}, {3}},
        {{2, 1, 4}, {2, 3, 1}},
        {{1, 33}, {17, 1}},
        {{4, 1, 1, 6}, {5, 1}},
    };
    return pairs;
}

OprCase elem_case(ElemMode mode, std::vector<TensorShape> shapes, DType dt,
                  std::function<double(const double*)> f, double low, double high) {
    OprCase c;
    c.name = fmt::format("{} {}", opr::elem_mode_name(mode), dt.name());
    for (auto& s : shapes) c.name += " " + s.to_string();
    c.shapes = shapes;
    c.dtypes.assign(shapes.size(), dt);
    c.low = low;
    c.high = high;
    c.build = [mode](const SymbolVarArray& in) -> SymbolVarArray {
        return {opr::Elemwise::make(mode, in)};
    };
    c.reference = [f, dt](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {ref_nary(in, dt, f)};
    };
    if (dt == dtype::Float16()) {
        c.rtol = 2e-3;
        c.atol = 2e-3;
    } else if (dt == dtype::BFloat16()) {
        c.rtol = 1.6e-2;
        c.atol = 1.6e-2;
    } else {
        c.rtol = 2e-6;
        c.atol = 1e-6;
    }
    return c;
}

} // namespace

TEST(ElemwiseOpr, FloatUnaryModesMatchDoubleReference) {
    for (auto& m : float_unary_modes())
        for (TensorShape s : {TensorShape{7, 5}, TensorShape{}, TensorShape{0}, TensorShape{3, 37}})
            check_operator(elem_case(m.mode, {s}, dtype::Float32(), m.f, m.low, m.high));
}

TEST(ElemwiseOpr, FloatUnaryModesInHalfPrecisionRoundOnStore) {
    for (auto& m : float_unary_modes())
        for (DType dt : {dtype::Float16(), dtype::BFloat16()}) {
            double high = m.mode == ElemMode::EXP ? 8 : m.high; // stay below float16's max
            check_operator(elem_case(m.mode, {{4, 9}}, dt, m.f, m.low, high));
        }
}

TEST(ElemwiseOpr, FloatBinaryModesBroadcastLikeNumpy) {
    for (auto& m : float_binary_modes())
        for (auto& [a, b] : broadcast_pairs())
            check_operator(elem_case(m.mode, {a, b}, dtype::Float32(), m.f, m.low, m.high));
    for (auto& m : float_binary_modes())
        for (DType dt : {dtype::Float16(), dtype::BFloat16()})
            check_operator(elem_case(m.mode, {{3, 5}, {5}}, dt, m.f, m.low, m.high));
}

TEST(ElemwiseOpr, ModAndFloorDivFollowTheDivisorSign) {
    auto run = [](ElemMode mode, DType dt) {
        Tensor a = tensor_of({8}, dt, {7, -7, 7, -7, 0, 9, 6, -6});
        Tensor b = tensor_of({8}, dt, {2, 2, -2, -2, 3, -4, 3, 3});
        return values_of(run_graph({a, b}, [&](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{opr::Elemwise::make(mode, in)};
        })[0]);
    };
    for (DType dt : {dtype::Float32(), dtype::Int32(), dtype::Int64()}) {
        EXPECT_EQ(run(ElemMode::MOD, dt), (std::vector<double>{1, 1, -1, -1, 0, -3, 0, 0}))
            << dt.name();
        EXPECT_EQ(run(ElemMode::FLOOR_DIV, dt), (std::vector<double>{3, -4, -4, 3, 0, -3, 2, -2}))
            << dt.name();
    }
}

TEST(ElemwiseOpr, RoundIsHalfToEvenAndSignAndReluKeepNaN) {
    Tensor x = tensor_of({8}, dtype::Float32(), {0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6, NAN});
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::round(in[0]), opr::sign(in[0]), opr::relu(in[0])};
    });
    auto r = values_of(out[0]);
    std::vector<double> expect = {0, 2, 2, -0.0, -2, 2, -3};
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(r[i], expect[i]) << i;
    EXPECT_TRUE(std::isnan(r[7]));
    auto s = values_of(out[1]);
    EXPECT_EQ(s[0], 1);
    EXPECT_EQ(s[3], -1);
    EXPECT_TRUE(std::isnan(s[7]));
    EXPECT_TRUE(std::isnan(values_of(out[2])[7])); // relu passes NaN through, as ONNX's Relu
    EXPECT_EQ(values_of(out[2])[3], 0);
}

TEST(ElemwiseOpr, MaxAndMinPropagateNaN) {
    Tensor a = tensor_of({3}, dtype::Float32(), {NAN, 1, 2});
    Tensor b = tensor_of({3}, dtype::Float32(), {1, NAN, 3});
    auto out = run_graph({a, b}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::maximum(in[0], in[1]), opr::minimum(in[0], in[1])};
    });
    for (auto& t : out) {
        auto v = values_of(t);
        EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1]));
    }
    EXPECT_EQ(values_of(out[0])[2], 3);
    EXPECT_EQ(values_of(out[1])[2], 2);
}

TEST(ElemwiseOpr, ExpAndLogHandleSpecialValues) {
    Tensor x = tensor_of({7}, dtype::Float32(), {INFINITY, -INFINITY, 100, -200, 0, -1, NAN});
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::exp(in[0]), opr::log(in[0]), opr::tanh(in[0]),
                              opr::sigmoid(in[0])};
    });
    auto e = values_of(out[0]), l = values_of(out[1]), t = values_of(out[2]), s = values_of(out[3]);
    EXPECT_EQ(e[0], INFINITY);
    EXPECT_EQ(e[1], 0);
    EXPECT_EQ(e[2], INFINITY);
    EXPECT_EQ(e[3], 0);
    EXPECT_EQ(e[4], 1);
    EXPECT_TRUE(std::isnan(e[6]));
    EXPECT_EQ(l[0], INFINITY);
    EXPECT_TRUE(std::isnan(l[1]));
    EXPECT_EQ(l[4], -INFINITY);
    EXPECT_TRUE(std::isnan(l[5]));
    EXPECT_EQ(t[0], 1);
    EXPECT_EQ(t[1], -1);
    EXPECT_TRUE(std::isnan(t[6]));
    EXPECT_EQ(s[0], 1);
    EXPECT_EQ(s[1], 0);
    EXPECT_TRUE(std::isnan(s[6]));
}

TEST(ElemwiseOpr, IntegerModesMatchReference) {
    auto wrap32 = [](double v) { return double(int32_t(uint32_t(int64_t(v)))); };
    std::vector<ModeRef> modes = {
        {ElemMode::NEG, [](const double* v) { return -v[0]; }},
        {ElemMode::ABS, [](const double* v) { return std::fabs(v[0]); }},
        {ElemMode::SIGN, [](const double* v) { return double((v[0] > 0) - (v[0] < 0)); }},
        {ElemMode::RELU, [](const double* v) { return std::max(v[0], 0.0); }},
        {ElemMode::SQUARE, [](const double* v) { return v[0] * v[0]; }},
        {ElemMode::ADD, [](const double* v) { return v[0] + v[1]; }},
        {ElemMode::SUB, [](const double* v) { return v[0] - v[1]; }},
        {ElemMode::MUL, [](const double* v) { return v[0] * v[1]; }},
        {ElemMode::MAX, [](const double* v) { return std::max(v[0], v[1]); }},
        {ElemMode::MIN, [](const double* v) { return std::min(v[0], v[1]); }},
        {ElemMode::POW, [](const double* v) { return std::pow(v[0], v[1]); }, 0, 6},
        {ElemMode::CLIP, [](const double* v) { return std::min(std::max(v[0], v[1]), v[2]); }},
        {ElemMode::COND_LEQ_MOV, [](const double* v) { return v[0] <= v[1] ? v[2] : 0; }},
        {ElemMode::FMA3, [](const double* v) { return v[0] * v[1] + v[2]; }},
    };
    for (auto& m : modes)
        for (DType dt : {dtype::Int32(), dtype::Int64()}) {
            size_t arity = opr::elem_mode_arity(m.mode);
            std::vector<TensorShape> shapes = {{4, 6}, {6}, {4, 1}};
            shapes.resize(arity);
            if (arity == 1) shapes = {{4, 6}};
            auto f = m.f;
            auto c = elem_case(m.mode, shapes, dt, f, m.low == -3 ? -50 : m.low,
                               m.high == 3 ? 50 : m.high);
            c.rtol = c.atol = 0;
            check_operator(c);
        }
    // int32 arithmetic wraps instead of overflowing.
    Tensor a = tensor_of({2}, dtype::Int32(), {2147483647, -2147483648.0});
    auto out = run_graph({a}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{in[0] + 1.0, -in[0], opr::square(in[0])};
    });
    EXPECT_EQ(values_of(out[0]), (std::vector<double>{wrap32(2147483648.0), -2147483647}));
    EXPECT_EQ(values_of(out[1])[1], -2147483648.0);
}

TEST(ElemwiseOpr, Uint64ModesAreUnsignedAcrossTheWholeRange) {
    // Values above 2^63 would be negative as int64: order, division and modulo must not be.
    const uint64_t big = (uint64_t(1) << 63) + 10, small = 7;
    auto g = ComputingGraph::make();
    Tensor a(TensorShape{2}, dtype::Uint64()), b(TensorShape{2}, dtype::Uint64());
    a.ptr<uint64_t>()[0] = big, a.ptr<uint64_t>()[1] = small;
    b.ptr<uint64_t>()[0] = small, b.ptr<uint64_t>()[1] = big;
    auto x = opr::Input::make(*g, "a", dtype::Uint64(), {2}),
         y = opr::Input::make(*g, "b", dtype::Uint64(), {2});
    SymbolVarArray outs{opr::maximum(x, y),   opr::minimum(x, y),      opr::floor_div(x, y),
                        opr::mod(x, y),       opr::less(x, y),         opr::abs(x),
                        opr::sub(y, x) + 1.0, opr::pow(y, x - x + 2.0)};
    auto exec = g->compile(std::vector<OutputSpec>(outs.begin(), outs.end()));
    exec->feed("a", a).feed("b", b).run();
    auto u = [&](size_t k, size_t i) { return exec->output(k).ptr<uint64_t>()[i]; };
    EXPECT_EQ(u(0, 0), big);
    EXPECT_EQ(u(0, 1), big);
    EXPECT_EQ(u(1, 0), small);
    EXPECT_EQ(u(2, 0), big / small);
    EXPECT_EQ(u(2, 1), 0u);
    EXPECT_EQ(u(3, 0), big % small);
    EXPECT_EQ(u(3, 1), small);
    EXPECT_EQ(exec->output(4).ptr<uint8_t>()[0], 0);
    EXPECT_EQ(exec->output(4).ptr<uint8_t>()[1], 1);
    EXPECT_EQ(u(5, 0), big);
    EXPECT_EQ(u(6, 0), small - big + 1); // wraps modulo 2^64
    EXPECT_EQ(u(7, 1), big * big);       // likewise
}

TEST(ElemwiseOpr, ComparisonsProduceBool) {
    std::vector<ModeRef> modes = {
        {ElemMode::LT, [](const double* v) { return double(v[0] < v[1]); }},
        {ElemMode::LEQ, [](const double* v) { return double(v[0] <= v[1]); }},
        {ElemMode::EQ, [](const double* v) { return double(v[0] == v[1]); }},
        {ElemMode::NEQ, [](const double* v) { return double(v[0] != v[1]); }},
    };
    for (auto& m : modes)
        for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::Int32(), dtype::Int64()})
            for (auto& [a, b] :
                 {std::pair<TensorShape, TensorShape>{{5, 4}, {4}}, {{}, {3}}, {{2, 1}, {1, 3}}}) {
                OprCase c = elem_case(m.mode, {a, b}, dt, nullptr, -2, 2);
                auto f = m.f;
                c.reference = [f](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                    return {ref_nary(in, dtype::Bool(), f)};
                };
                c.rtol = c.atol = 0;
                check_operator(c);
            }
}

TEST(ElemwiseOpr, LogicalModesOnBool) {
    std::vector<ModeRef> modes = {
        {ElemMode::LOGICAL_AND, [](const double* v) { return double(v[0] && v[1]); }},
        {ElemMode::LOGICAL_OR, [](const double* v) { return double(v[0] || v[1]); }},
        {ElemMode::LOGICAL_XOR, [](const double* v) { return double(bool(v[0]) != bool(v[1])); }},
        {ElemMode::EQ, [](const double* v) { return double(v[0] == v[1]); }},
        {ElemMode::NEQ, [](const double* v) { return double(v[0] != v[1]); }},
        {ElemMode::LOGICAL_NOT, [](const double* v) { return double(!v[0]); }},
    };
    for (auto& m : modes) {
        std::vector<TensorShape> shapes = {{6, 5}, {5}};
        if (opr::elem_mode_arity(m.mode) == 1) shapes = {{6, 5}};
        OprCase c = elem_case(m.mode, shapes, dtype::Bool(), m.f, 0, 1);
        c.rtol = c.atol = 0;
        check_operator(c);
    }
}

TEST(ElemwiseOpr, WhereSelectsAnyDtypeWithBroadcastCondition) {
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int32(),
                     dtype::Int64(), dtype::Bool(), dtype::Int8()})
        for (auto& shapes : std::vector<std::vector<TensorShape>>{{{4, 5}, {4, 5}, {4, 5}},
                                                                  {{4, 1}, {5}, {4, 5}},
                                                                  {{5}, {4, 5}, {}},
                                                                  {{}, {3}, {3}}}) {
            OprCase c;
            c.name = fmt::format("where {}", dt.name());
            c.shapes = shapes;
            c.dtypes = {dtype::Bool(), dt, dt};
            c.fill = [](std::mt19937& rng, Tensor& t, size_t idx) {
                t = random_tensor(t.shape(), t.dtype(), rng, idx == 0 ? 0 : -5, idx == 0 ? 1 : 5);
            };
            c.build = [](const SymbolVarArray& in) -> SymbolVarArray {
                return {opr::where(in[0], in[1], in[2])};
            };
            c.reference = [dt](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                return {ref_nary(in, dt, [](const double* v) { return v[0] ? v[1] : v[2]; })};
            };
            c.rtol = c.atol = 0;
            check_operator(c);
        }
}

TEST(ElemwiseOpr, FloatTernaryModesWithScalarAndBroadcastOperands) {
    std::vector<ModeRef> modes = {
        {ElemMode::CLIP, [](const double* v) { return std::min(std::max(v[0], v[1]), v[2]); }},
        {ElemMode::COND_LEQ_MOV, [](const double* v) { return v[0] <= v[1] ? v[2] : 0; }},
        {ElemMode::FMA3, [](const double* v) { return v[0] * v[1] + v[2]; }},
    };
    for (auto& m : modes)
        for (auto& shapes : std::vector<std::vector<TensorShape>>{{{6, 7}, {6, 7}, {6, 7}},
                                                                  {{6, 7}, {}, {}},
                                                                  {{6, 1}, {7}, {6, 7}},
                                                                  {{}, {}, {}},
                                                                  {{0, 2}, {2}, {}}})
            for (DType dt : {dtype::Float32(), dtype::BFloat16()})
                check_operator(elem_case(m.mode, shapes, dt, m.f, -3, 3));
    // clip with constant bounds
    Tensor x = tensor_of({4}, dtype::Float32(), {-5, -0.5, 0.5, 5});
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::clip(in[0], -1.0, 1.0)};
    });
    EXPECT_EQ(values_of(out[0]), (std::vector<double>{-1, -0.5, 0.5, 1}));
}

TEST(ElemwiseOpr, LargeTensorsTakeTheParallelPathCorrectly) {
    // Above the single-thread threshold, with broadcasting across chunk boundaries.
    check_operator(elem_case(
        ElemMode::ADD, {{301, 257}, {257}}, dtype::Float32(),
        [](const double* v) { return v[0] + v[1]; }, -3, 3));
    check_operator(elem_case(
        ElemMode::MUL, {{129, 1, 300}, {1, 3, 1}}, dtype::Float32(),
        [](const double* v) { return v[0] * v[1]; }, -3, 3));
    check_operator(elem_case(
        ElemMode::GELU, {{70000}}, dtype::Float32(),
        [](const double* x) { return 0.5 * x[0] * (1 + std::erf(x[0] / std::sqrt(2.0))); }, -4, 4));
    check_operator(elem_case(
        ElemMode::SUB, {{40000}, {40000}}, dtype::Float16(),
        [](const double* v) { return v[0] - v[1]; }, -3, 3));
}

TEST(ElemwiseOpr, ConstantInputsFoldAtBuildTime) {
    auto g = ComputingGraph::make();
    auto a = opr::ImmutableTensor::make(*g, tensor_of({3}, dtype::Float32(), {1, 4, 9}));
    auto y = opr::sqrt(a) * 2.0 + opr::scalar_like(a, 1);
    ASSERT_NE(y.node()->static_value(), nullptr);
    EXPECT_EQ(values_of(*y.node()->static_value()), (std::vector<double>{3, 5, 7}));
}

TEST(ElemwiseOpr, RunsOnTheInlineCompNode) {
    auto c = elem_case(
        ElemMode::TANH, {{5, 40}}, dtype::Float32(),
        [](const double* x) { return std::tanh(x[0]); }, -4, 4);
    c.comp_node = "cpu:default";
    check_operator(c);
}

TEST(ElemwiseOpr, DtypeErrorsNameTheModeTheDtypeAndWhatIsExpected) {
    auto g = ComputingGraph::make();
    auto f = opr::Input::make(*g, "f", dtype::Float32(), {2});
    auto i = opr::Input::make(*g, "i", dtype::Int32(), {2});
    auto b = opr::Input::make(*g, "b", dtype::Bool(), {2});
    expect_error<DTypeError>([&] { opr::true_div(i, i); },
                             {"Elemwise(TRUE_DIV)", "int32", "float32, float16, bfloat16"});
    expect_error<DTypeError>([&] { opr::exp(i); }, {"Elemwise(EXP)", "int32", "float32"});
    expect_error<DTypeError>([&] { opr::logical_and(f, f); },
                             {"Elemwise(LOGICAL_AND)", "float32", "bool"});
    expect_error<DTypeError>([&] { opr::add(b, b); }, {"Elemwise(ADD)", "bool", "int32"});
    auto h = opr::Input::make(*g, "h", dtype::Int16(), {2});
    expect_error<DTypeError>([&] { opr::add(h, h); },
                             {"Elemwise(ADD)", "int16", "int32, int64, uint64"});
    expect_error<DTypeError>([&] { opr::where(f, f, f); },
                             {"Elemwise(WHERE)", "condition", "must be bool", "float32"});
    expect_error<DTypeError>([&] { opr::where(b, f, i); },
                             {"Elemwise(WHERE)", "\"f\" is float32", "\"i\" is int32"});
    expect_error<DTypeError>([&] { f + i; }, {"Elemwise(ADD)", "float32", "int32"});
    expect_error<GraphError>(
        [&] {
            opr::Elemwise::make(ElemMode::CLIP, {f, f});
        },
        {"CLIP", "takes 3 inputs, got 2"});
}

TEST(ElemwiseOpr, IncompatibleShapesNameEveryShape) {
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", dtype::Float32(), {2, 3});
    auto b = opr::Input::make(*g, "b", dtype::Float32(), {4});
    auto c = opr::Input::make(*g, "c", dtype::Float32(), {3});
    expect_error<ShapeError>([&] { a + b; }, {"Elemwise(ADD)", "cannot broadcast {2,3} with {4}"});
    expect_error<ShapeError>([&] { opr::clip(a, c, b); }, {"{2,3} with {3} with {4}"});
}

TEST(ElemwiseOpr, IntegerDivisionByZeroFailsTheRunWithTheOperatorName) {
    for (ElemMode mode : {ElemMode::FLOOR_DIV, ElemMode::MOD}) {
        Tensor a = tensor_of({2}, dtype::Int32(), {1, 2});
        Tensor b = tensor_of({2}, dtype::Int32(), {1, 0});
        expect_error<ValueError>(
            [&] {
                run_graph({a, b}, [&](ComputingGraph&, const SymbolVarArray& in) {
                    return SymbolVarArray{opr::Elemwise::make(mode, in)};
                });
            },
            {opr::elem_mode_name(mode), "integer division by zero"});
    }
    Tensor a = tensor_of({1}, dtype::Int64(), {2});
    Tensor b = tensor_of({1}, dtype::Int64(), {-1});
    expect_error<ValueError>(
        [&] {
            run_graph({a, b}, [](ComputingGraph&, const SymbolVarArray& in) {
                return SymbolVarArray{opr::pow(in[0], in[1])};
            });
        },
        {"Elemwise(POW)", "negative integer exponent"});
}

TEST(ElemwiseOpr, EveryModeHasANameAndArity) {
    for (int m = 0; m <= int(ElemMode::FMA3); ++m) {
        auto mode = ElemMode(m);
        EXPECT_STRNE(opr::elem_mode_name(mode), "?") << m;
        EXPECT_GE(opr::elem_mode_arity(mode), 1u);
        EXPECT_LE(opr::elem_mode_arity(mode), 3u);
    }
    EXPECT_EQ(opr::elem_mode_arity(ElemMode::LOGICAL_NOT), 1u);
    EXPECT_EQ(opr::elem_mode_arity(ElemMode::LOGICAL_XOR), 2u);
    EXPECT_EQ(opr::elem_mode_arity(ElemMode::CLIP), 3u);
}
