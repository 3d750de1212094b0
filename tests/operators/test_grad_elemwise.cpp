// Gradient rules of Elemwise beyond the arithmetic in test_grad.cpp: every unary math mode,
// kinks, piecewise constant modes, pow, mod, max/min ties, clip, where, cond_leq_mov and fma3,
// each against central finite differences, with broadcasting.
#include "grad_helpers.h"

using namespace braid;
using namespace braid::test;

namespace {

using Fn = std::function<SymbolVar(const SymbolVarArray&)>;

//! Shape pairs that broadcast: equal, trailing vector, both sides stretched, scalar.
const std::vector<std::vector<TensorShape>> kPairs = {
    {{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 1, 3}, {4, 1}}, {{3}, {}}};

std::string shapes_name(const std::vector<TensorShape>& s) {
    std::string n;
    for (auto& t : s) n += " " + t.to_string();
    return n;
}

} // namespace

class GradElemwise : public ::testing::Test {
protected:
    void SetUp() override { register_all_operators(); }
};

TEST_F(GradElemwise, SmoothUnaryModesThroughABroadcastSum) {
    // f(in0 + in1): the unary's input is itself broadcast, so its gradient is summed back.
    struct Mode {
        const char* name;
        std::function<SymbolVar(SymbolVar)> f;
        double low, high; //!< input range, keeping in0 + in1 in the domain
    };
    std::vector<Mode> modes = {
        {"expm1", [](SymbolVar x) { return opr::expm1(x); }, -1.0, 1.0},
        {"log1p", [](SymbolVar x) { return opr::log1p(x); }, 0.0, 2.0},
        {"sqrt", [](SymbolVar x) { return opr::sqrt(x); }, 0.2, 2.0},
        {"rsqrt", [](SymbolVar x) { return opr::rsqrt(x); }, 0.2, 2.0},
        {"square", [](SymbolVar x) { return opr::square(x); }, -2.0, 2.0},
        {"sin", [](SymbolVar x) { return opr::sin(x); }, -2.0, 2.0},
        {"cos", [](SymbolVar x) { return opr::cos(x); }, -2.0, 2.0},
        {"gelu", [](SymbolVar x) { return opr::gelu(x); }, -2.0, 2.0},
        {"gelu_tanh", [](SymbolVar x) { return opr::gelu_tanh(x); }, -2.0, 2.0},
        {"silu", [](SymbolVar x) { return opr::silu(x); }, -2.0, 2.0},
        {"erf", [](SymbolVar x) { return opr::erf(x); }, -1.5, 1.5},
    };
    for (auto& m : modes)
        for (auto& s : kPairs) {
            auto f = m.f;
            auto c = grad_case(m.name + shapes_name(s), s,
                               [f](const SymbolVarArray& in) { return f(in[0] + in[1]); });
            c.low = m.low;
            c.high = m.high;
            check_gradient(c);
        }
}

TEST_F(GradElemwise, ReluAndAbsAwayFromTheKink) {
    for (auto& s : kPairs) {
        auto relu = grad_case("relu" + shapes_name(s), s,
                              [](const SymbolVarArray& in) { return opr::relu(in[0]) * in[1]; });
        relu.fill = away_from_zero();
        check_gradient(relu);
        auto abs = grad_case("abs" + shapes_name(s), s,
                             [](const SymbolVarArray& in) { return opr::abs(in[0] * in[1]); });
        abs.fill = away_from_zero();
        check_gradient(abs);
    }
    // The kink itself: relu'(0) = 0 and abs'(0) = 0.
    Tensor x = make_tensor({3}, {-1.f, 0.f, 2.f});
    Tensor dr = eval_grad(x, [](SymbolVar v) { return opr::relu(v); });
    Tensor da = eval_grad(x, [](SymbolVar v) { return opr::abs(v); });
    EXPECT_EQ(std::vector<double>({dr.at(0), dr.at(1), dr.at(2)}), std::vector<double>({0, 0, 1}));
    EXPECT_EQ(std::vector<double>({da.at(0), da.at(1), da.at(2)}), std::vector<double>({-1, 0, 1}));
}

TEST_F(GradElemwise, PiecewiseConstantModesGiveZero) {
    // Values k + [0.1, 0.4]: clear of integers (floor, ceil), halves (round) and zero (sign).
    auto fill = [](std::mt19937& rng, Tensor& t, size_t) {
        std::uniform_int_distribution<int> k(-2, 1);
        std::uniform_real_distribution<double> frac(0.1, 0.4);
        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
            t.ptr<float>()[i] = float(k(rng) + frac(rng));
    };
    std::vector<std::pair<std::string, std::function<SymbolVar(SymbolVar)>>> fns = {
        {"sign", [](SymbolVar x) { return opr::sign(x); }},
        {"floor", [](SymbolVar x) { return opr::floor(x); }},
        {"ceil", [](SymbolVar x) { return opr::ceil(x); }},
        {"round", [](SymbolVar x) { return opr::round(x); }},
    };
    for (auto& [name, f] : fns) {
        // f(x) alone would leave the loss without a gradient path; x·y keeps one.
        auto c = grad_case(name, {{3, 4}, {4}}, [f = f](const SymbolVarArray& in) {
            return f(in[0]) * in[1] + in[0] * in[1];
        });
        c.fill = fill;
        check_gradient(c);
        Tensor d = eval_grad(make_tensor({2}, {0.3f, -1.7f}), f);
        EXPECT_EQ(d.at(0), 0.0) << name;
        EXPECT_EQ(d.at(1), 0.0) << name;
    }
}

TEST_F(GradElemwise, PowModAndFloorDiv) {
    for (auto& s : kPairs) {
        auto p = grad_case("pow" + shapes_name(s), s,
                           [](const SymbolVarArray& in) { return opr::pow(in[0], in[1]); });
        p.fill = [](std::mt19937& rng, Tensor& t, size_t idx) {
            std::uniform_real_distribution<double> d(idx == 0 ? 0.5 : -2.0, 2.0);
            for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
                t.ptr<float>()[i] = float(d(rng));
        };
        check_gradient(p);
    }
    // a mod b and floor(a / b), with a / b kept clear of integers: a = b·(k + [0.2, 0.8]).
    auto fill = [](std::mt19937& rng, Tensor& t, size_t idx) {
        std::uniform_real_distribution<double> b(0.6, 1.6);
        std::uniform_int_distribution<int> k(-2, 1);
        std::uniform_real_distribution<double> frac(0.2, 0.8);
        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
            t.ptr<float>()[i] = float(idx == 1 ? b(rng) : k(rng) + frac(rng));
    };
    auto m = grad_case("mod", {{3, 4}, {3, 4}},
                       [](const SymbolVarArray& in) { return opr::mod(in[0] * in[1], in[1]); });
    m.fill = fill;
    check_gradient(m);
    auto fd = grad_case("floor_div", {{3, 4}, {3, 4}}, [](const SymbolVarArray& in) {
        return opr::floor_div(in[0] * in[1], in[1]) + in[0] * in[1];
    });
    fd.fill = fill;
    check_gradient(fd);
    // d/db a^b at a = 0 is taken as 0 (not 0 · log 0 = NaN).
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", dtype::Float32(), {2});
    auto b = opr::Input::make(*g, "b", dtype::Float32(), {2});
    auto db = grad(opr::reduce_sum(opr::pow(a, b)), b);
    auto exec = g->compile({db});
    exec->feed("a", make_tensor({2}, {0.f, 2.f})).feed("b", make_tensor({2}, {2.f, 3.f})).run();
    EXPECT_EQ(exec->output(0).at(0), 0.0);
    EXPECT_NEAR(exec->output(0).at(1), 8 * std::log(2.0), 1e-5);
}

TEST_F(GradElemwise, MaxMinRouteToTheWinnerAndSplitTies) {
    for (auto& s : kPairs) {
        for (bool is_max : {true, false}) {
            auto c = grad_case((is_max ? "maximum" : "minimum") + shapes_name(s), s,
                               [is_max](const SymbolVarArray& in) {
                                   return is_max ? opr::maximum(in[0], in[1])
                                                 : opr::minimum(in[0], in[1]);
                               });
            c.fill = grid_values({0.2, 0.0}); // never tie, never closer than 0.2
            check_gradient(c);
        }
    }
    // Ties: each side gets half, so maximum(x, x) has gradient 1.
    Tensor x = make_tensor({3}, {-1.f, 0.f, 2.f});
    Tensor same = eval_grad(x, [](SymbolVar v) { return opr::maximum(v, v); });
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(same.at(i), 1.0);
    Tensor half = eval_grad(x, [](SymbolVar v) { return opr::minimum(v, opr::zeros_like(v)); });
    EXPECT_EQ(half.at(0), 1.0);
    EXPECT_EQ(half.at(1), 0.5);
    EXPECT_EQ(half.at(2), 0.0);
}

TEST_F(GradElemwise, ClipWithTensorAndConstantBounds) {
    // x on the grid 0.25 + k/2, lo on k/2, hi on 0.1 + k/2: no ties. lo > hi on some elements.
    std::vector<std::vector<TensorShape>> shapes = {
        {{3, 4}, {3, 4}, {3, 4}}, {{3, 4}, {4}, {}}, {{2, 3}, {2, 1}, {3}}};
    for (auto& s : shapes) {
        auto c = grad_case("clip" + shapes_name(s), s,
                           [](const SymbolVarArray& in) { return opr::clip(in[0], in[1], in[2]); });
        c.fill = grid_values({0.25, 0.0, 0.1}); // lo and hi never tie either
        check_gradient(c);
    }
    auto k = grad_case("clip constants", {{4, 5}},
                       [](const SymbolVarArray& in) { return opr::clip(in[0], -0.6, 0.9); });
    k.fill = grid_values({0.25});
    check_gradient(k);
    // Inclusive range: at a bound, x still gets the gradient.
    Tensor at = eval_grad(make_tensor({3}, {-1.f, 0.f, 1.f}),
                          [](SymbolVar v) { return opr::clip(v, -1.0, 1.0); });
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(at.at(i), 1.0);
}

TEST_F(GradElemwise, WhereCondLeqMovAndFma3) {
    // where(in0 < 0, in1, in2): the condition gets no gradient, so only in1 and in2 are checked.
    std::vector<std::vector<TensorShape>> shapes = {
        {{3, 4}, {3, 4}, {3, 4}}, {{3, 4}, {4}, {3, 1}}, {{4}, {2, 4}, {}}};
    for (auto& s : shapes) {
        auto w = grad_case("where" + shapes_name(s), s, [](const SymbolVarArray& in) {
            return opr::where(opr::less(in[0], opr::scalar_like(in[0], 0.0)), in[1], in[2]);
        });
        w.grad_inputs = {1, 2};
        w.fill = away_from_zero();
        check_gradient(w);
        auto m = grad_case("cond_leq_mov" + shapes_name(s), s, [](const SymbolVarArray& in) {
            return opr::cond_leq_mov(in[0], in[1], in[2] * in[1]);
        });
        m.fill = grid_values({0.25, 0.0, 0.0});
        check_gradient(m);
        auto f = grad_case("fma3" + shapes_name(s), s,
                           [](const SymbolVarArray& in) { return opr::fma3(in[0], in[1], in[2]); });
        check_gradient(f);
    }
}

TEST_F(GradElemwise, SecondOrderThroughNewRules) {
    // d/dx sum(d/dx sum(sin(x) + x^2)) = -sin(x) + 2
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    auto first = grad(opr::reduce_sum(opr::sin(x) + opr::square(x)), x);
    auto second = grad(opr::reduce_sum(first), x);
    auto exec = g->compile({second});
    Tensor v = make_tensor({4}, {-1.f, 0.f, 0.5f, 2.f});
    exec->feed("x", v).run();
    for (size_t i = 0; i < 4; ++i)
        EXPECT_NEAR(exec->output(0).at(i), 2.0 - std::sin(v.at(i)), 1e-5);
}
