// Automatic differentiation: numerical gradient checks per operator, accumulation, errors,
// second order, and an in-place training step.
#include "checker.h"

#include <gtest/gtest.h>

using namespace braid;
using namespace braid::test;

namespace {

OprCase grad_case(const std::string& name, std::vector<TensorShape> shapes,
                  std::function<SymbolVar(const SymbolVarArray&)> build) {
    OprCase c;
    c.name = name;
    c.shapes = std::move(shapes);
    c.build = [build](const SymbolVarArray& in) -> SymbolVarArray { return {build(in)}; };
    return c;
}

} // namespace

class GradCheck : public ::testing::Test {
protected:
    void SetUp() override { register_all_operators(); }
};

TEST_F(GradCheck, ElemwiseArithmeticWithBroadcasting) {
    using F = std::function<SymbolVar(const SymbolVarArray&)>;
    std::vector<std::pair<std::string, F>> fns = {
        {"add", [](auto& in) { return in[0] + in[1]; }},
        {"sub", [](auto& in) { return in[0] - in[1]; }},
        {"mul", [](auto& in) { return in[0] * in[1]; }},
        {"div", [](auto& in) { return in[0] / (opr::exp(in[1]) + 0.5); }},
        {"neg", [](auto& in) { return -in[0] * in[1]; }},
        {"exp", [](auto& in) { return opr::exp(in[0]) + in[1]; }},
        {"log", [](auto& in) { return opr::log(opr::exp(in[0]) + 1.0) * in[1]; }},
        {"tanh", [](auto& in) { return opr::tanh(in[0] * in[1]); }},
        {"sigmoid", [](auto& in) { return opr::sigmoid(in[0] - in[1]); }},
    };
    std::vector<std::vector<TensorShape>> shapes = {
        {{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 1, 3}, {4, 1}}, {{3}, {}}};
    for (auto& [name, fn] : fns)
        for (auto& s : shapes) {
            auto c = grad_case(name + " " + s[0].to_string() + " " + s[1].to_string(), s, fn);
            check_gradient(c);
        }
}

TEST_F(GradCheck, MatMulWithTransposeFlags) {
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            auto c = grad_case(fmt::format("matmul {} {}", ta, tb),
                               {ta ? TensorShape{4, 3} : TensorShape{3, 4},
                                tb ? TensorShape{5, 4} : TensorShape{4, 5}},
                               [=](auto& in) { return opr::matmul(in[0], in[1], ta, tb); });
            check_gradient(c);
        }
}

TEST_F(GradCheck, ReductionsReshapeBroadcastTypeCvt) {
    check_gradient(grad_case("sum axis 1", {{3, 4, 2}},
                             [](auto& in) { return opr::reduce_sum(in[0] * in[0], {1}); }));
    check_gradient(grad_case("mean all", {{3, 4}},
                             [](auto& in) { return opr::reduce_mean(opr::tanh(in[0])); }));
    check_gradient(grad_case("mean keepdims", {{3, 4}},
                             [](auto& in) { return opr::reduce_mean(in[0], {-1}, true) * in[0]; }));
    check_gradient(grad_case("reshape", {{3, 4}}, [](auto& in) {
        return opr::tanh(in[0].reshape({2, -1}));
    }));
    check_gradient(grad_case("broadcast", {{3, 1}}, [](auto& in) {
        return opr::tanh(in[0].broadcast({2, 3, 4}));
    }));
    auto c = grad_case("typecvt bf16 round trip", {{5}}, [](auto& in) {
        return in[0].astype(dtype::Float16()).astype(dtype::Float32()) * in[0];
    });
    c.grad_eps = 5e-2; // finite differences must step over float16 rounding
    c.grad_rtol = 1e-1;
    check_gradient(c);
}

TEST_F(GradCheck, VarUsedThreeTimesAccumulates) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    auto loss = opr::reduce_sum(x * 2.0 + x * x + opr::exp(x));
    auto dx = grad(loss, x);
    auto exec = g->compile({dx});
    Tensor v(TensorShape{4}, dtype::Float32());
    for (int i = 0; i < 4; ++i) v.ptr<float>()[i] = 0.5f * float(i);
    exec->feed("x", v).run();
    for (int i = 0; i < 4; ++i) {
        float xi = 0.5f * float(i);
        EXPECT_NEAR(exec->output(0).at(size_t(i)), 2 + 2 * xi + std::exp(xi), 1e-5);
    }
}

TEST_F(GradCheck, UnrelatedVarIsAnErrorOrAnExplicitZero) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto unrelated = opr::Input::make(*g, "u", dtype::Float32(), {2, 2});
    auto loss = opr::reduce_sum(x * x).rename("loss");
    try {
        grad(loss, unrelated);
        FAIL() << "expected GraphError";
    } catch (const GraphError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("\"loss\""), std::string::npos) << msg;
        EXPECT_NE(msg.find("\"u\""), std::string::npos) << msg;
    }
    auto zero = grad(loss, unrelated, GradOptions{.zero_for_unreachable = true});
    EXPECT_EQ(zero.shape(), TensorShape({2, 2}));
    auto exec = g->compile({zero}); // a constant: needs no input
    exec->run();
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(exec->output(0).at(i), 0.0);
}

TEST_F(GradCheck, NonScalarLossAndNonDifferentiableOperatorsAreErrors) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    try {
        grad(x * 2.0, x);
        FAIL() << "expected GraphError";
    } catch (const GraphError& e) {
        EXPECT_NE(std::string(e.what()).find("{3}"), std::string::npos) << e.what();
    }
    auto i = opr::Input::make(*g, "i", dtype::Int32(), {3});
    auto loss = opr::reduce_sum(opr::floor_div(i, i).astype(dtype::Float32()) * x);
    EXPECT_THROW(grad(loss, i), GraphError); // integer path: no gradient reaches it
}

TEST_F(GradCheck, SecondOrderGradient) {
    // f(x) = sum(x^3) -> f' = 3x^2 -> d/dx sum(f') = 6x
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto first = grad(opr::reduce_sum(x * x * x), x);
    auto second = grad(opr::reduce_sum(first), x);
    auto exec = g->compile({first, second});
    Tensor v(TensorShape{3}, dtype::Float32());
    for (int k = 0; k < 3; ++k) v.ptr<float>()[k] = float(k) - 1.f;
    exec->feed("x", v).run();
    for (size_t k = 0; k < 3; ++k) {
        double xk = double(k) - 1.0;
        EXPECT_NEAR(exec->output(0).at(k), 3 * xk * xk, 1e-5);
        EXPECT_NEAR(exec->output(1).at(k), 6 * xk, 1e-5);
    }
}

TEST_F(GradCheck, TrainingStepUpdatesParametersInPlaceAndLossDecreases) {
    std::mt19937 rng(3);
    auto w1 = std::make_shared<Tensor>(random_tensor({8, 16}, dtype::Float32(), rng, -.5, .5));
    auto w2 = std::make_shared<Tensor>(random_tensor({16, 1}, dtype::Float32(), rng, -.5, .5));
    const void* w1_addr = w1->raw_ptr();
    const void* w2_addr = w2->raw_ptr();
    for (auto kind : {opr::OptimizerConfig::Kind::SGD, opr::OptimizerConfig::Kind::ADAM}) {
        auto g = ComputingGraph::make();
        auto x = opr::Input::make(*g, "x", dtype::Float32(), {32, 8});
        auto t = opr::Input::make(*g, "t", dtype::Float32(), {32, 1});
        auto p1 = opr::SharedParam::make(*g, w1), p2 = opr::SharedParam::make(*g, w2);
        auto pred = opr::matmul(opr::tanh(opr::matmul(x, p1)), p2);
        auto diff = pred - t;
        auto loss = opr::reduce_mean(diff * diff);
        opr::OptimizerConfig cfg;
        cfg.kind = kind;
        cfg.lr = kind == opr::OptimizerConfig::Kind::SGD ? 0.1f : 0.01f;
        auto updates = opr::minimize(loss, {p1, p2}, cfg);
        std::vector<OutputSpec> outs{loss};
        for (auto& u : updates) outs.push_back(u);
        auto exec = g->compile(outs);
        Tensor xv = random_tensor({32, 8}, dtype::Float32(), rng, -1, 1);
        Tensor tv(TensorShape{32, 1}, dtype::Float32());
        for (size_t i = 0; i < 32; ++i) tv.ptr<float>()[i] = float(xv.at(i * 8)) > 0 ? 1.f : -1.f;
        exec->feed("x", xv).feed("t", tv);
        double prev = 1e30;
        for (int step = 0; step < 20; ++step) {
            exec->run();
            double l = exec->output(0).at(0);
            EXPECT_LT(l, prev) << "step " << step;
            prev = l;
            EXPECT_EQ(w1->raw_ptr(), w1_addr);
            EXPECT_EQ(w2->raw_ptr(), w2_addr);
            EXPECT_EQ(exec->output(1).raw_ptr(), w1_addr); // the update's output is the param
        }
    }
}

namespace {

//! Test operator: identity whose gradient must run on every rank (like a collective's).
class PeerSync final : public OperatorNode {
public:
    PeerSync(VarNode* x, const OperatorConfig& cfg) : OperatorNode(cfg) {
        add_input(x);
        add_output();
    }
    const char* type_name() const override { return "TestPeerSync"; }
    bool allow_dedup() const override { return false; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override {
        if (!ctx.shape(0)) return false;
        out[0] = *ctx.shape(0);
        return true;
    }
    void execute(ExecCtx& ctx) override { ctx.output(0).copy_from(ctx.input(0)); }
};

//! Counts executions; stands in for the gradient collective peers wait for.
class CountingIdentity final : public OperatorNode {
public:
    CountingIdentity(VarNode* x, int* counter)
        : OperatorNode(OperatorConfig{}), m_counter(counter) {
        add_input(x);
        add_output();
    }
    const char* type_name() const override { return "TestCountingIdentity"; }
    bool allow_dedup() const override { return false; }
    ValueInference value_inference() const override { return ValueInference::NONE; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override {
        if (!ctx.shape(0)) return false;
        out[0] = *ctx.shape(0);
        return true;
    }
    void execute(ExecCtx& ctx) override {
        ++*m_counter;
        ctx.output(0).copy_from(ctx.input(0));
    }

private:
    int* m_counter;
};

} // namespace

TEST_F(GradCheck, AlwaysRunGradientExecutesWhenNoInputNeedsIt) {
    int executed = 0;
    register_grad_rule(
        "TestPeerSync",
        [&](OperatorNode& opr, size_t wrt, const VarNodeArray& og) -> VarNode* {
            auto* counted =
                opr.graph()->insert_opr(std::make_unique<CountingIdentity>(og[0], &executed));
            EXPECT_EQ(wrt, GRAD_SIDE_EFFECT_ONLY);
            return counted->output(0);
        },
        /*always_run=*/true);
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto c = opr::Input::make(*g, "c", dtype::Float32(), {3}); // needs no gradient
    auto synced = g->insert_opr(std::make_unique<PeerSync>(c.node(), OperatorConfig{}))->output(0);
    auto loss = opr::reduce_sum(x * SymbolVar(synced));
    auto dx = grad(loss, x);
    auto exec = g->compile({dx});
    Tensor ones(TensorShape{3}, dtype::Float32());
    for (int i = 0; i < 3; ++i) ones.ptr<float>()[i] = 1.f + float(i);
    exec->feed("x", ones).feed("c", ones).run();
    EXPECT_EQ(executed, 1) << "the side-effect gradient did not execute with dx";
    EXPECT_FLOAT_EQ(float(exec->output(0).at(2)), 3.f);
}
