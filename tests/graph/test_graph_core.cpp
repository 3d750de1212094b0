// Core graph behaviour: deduplication, static inference, execution, errors.
#include "braid.h"

#include <gtest/gtest.h>

#include <random>

using namespace braid;

namespace {

Tensor filled(const TensorShape& shape, float start, float step = 1.f) {
    Tensor t(shape, dtype::Float32());
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t.ptr<float>()[i] = start + step * i;
    return t;
}

template <typename E, typename Fn> std::string error_message(Fn&& fn) {
    try {
        fn();
    } catch (const E& e) {
        return e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong exception type: " << e.what();
        return {};
    }
    ADD_FAILURE() << "no exception thrown";
    return {};
}

} // namespace

TEST(Dedup, SameExpressionBuiltTwiceIsTheSameVar) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    auto y1 = opr::relu(x * 2.0 + 1.0);
    size_t n = g->operators().size();
    auto y2 = opr::relu(x * 2.0 + 1.0);
    EXPECT_EQ(y1.node(), y2.node());
    EXPECT_EQ(g->operators().size(), n);
    auto y3 = opr::relu(x * 3.0 + 1.0);
    EXPECT_NE(y1.node(), y3.node());
}

TEST(Dedup, OptedOutOperatorsAreNeverMerged) {
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", dtype::Float32(), {4});
    auto b = opr::Input::make(*g, "b", dtype::Float32(), {4});
    EXPECT_NE(a.node(), b.node());
    // Inputs opt out of dedup: same dtype and shape, different operators.
    EXPECT_FALSE(a.node()->owner()->allow_dedup());
    EXPECT_THROW(opr::Input::make(*g, "a", dtype::Float32(), {4}), GraphError);
}

TEST(StaticInference, ShapesAreKnownBeforeExecution) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {8, 3});
    auto w = opr::SharedParam::make(*g, std::make_shared<Tensor>(filled({3, 5}, 0.f)));
    auto y = opr::reduce_sum(opr::matmul(x, w), {1}, true);
    EXPECT_EQ(y.shape(), TensorShape({8, 1}));
    EXPECT_EQ(opr::matmul(x, w).shape(), TensorShape({8, 5}));
}

TEST(StaticInference, GetVarShapeIntoReshapeIsInferredByValue) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto y = opr::Input::make(*g, "y", dtype::Float32(), {24});
    auto shape = x.symshape();
    ASSERT_NE(shape.node()->static_value(), nullptr);
    auto z = y.reshape(shape);
    EXPECT_EQ(z.shape(), TensorShape({4, 6}));
    // Arithmetic on shape values folds too: reshape to {2, 12}.
    auto half = opr::ImmutableTensor::make(*g, [] {
        Tensor t(TensorShape{2}, dtype::Int32());
        t.ptr<int32_t>()[0] = 2;
        t.ptr<int32_t>()[1] = 1;
        return t;
    }());
    auto y12 = opr::Input::make(*g, "y12", dtype::Float32(), {12});
    auto z2 = y12.reshape(shape / half);
    EXPECT_EQ(z2.shape(), TensorShape({2, 6}));
    EXPECT_THROW(y.reshape(shape / half), ShapeError); // 24 elements do not fit {2,6}
}

TEST(StaticInference, IncompatibleShapesThrowNamingOperatorVarAndShapes) {
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", dtype::Float32(), {128, 8192});
    auto b = opr::Input::make(*g, "b", dtype::Float32(), {2048});
    auto msg = error_message<ShapeError>([&] {
        opr::Elemwise::make(opr::ElemMode::ADD, {a, b}, "h1");
    });
    EXPECT_NE(msg.find("Elemwise(ADD) \"h1\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("{128,8192}"), std::string::npos) << msg;
    EXPECT_NE(msg.find("{2048}"), std::string::npos) << msg;
}

TEST(Execution, NewInputShapeBetweenRunsGivesCorrectResults) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3});
    auto y = opr::reduce_sum(x * 2.0, {1}).rename("y");
    auto exec = g->compile({y});
    exec->feed("x", filled({2, 3}, 1.f)).run();
    ASSERT_EQ(exec->output(0).shape(), TensorShape({2}));
    EXPECT_FLOAT_EQ(float(exec->output(0).at(0)), 12.f); // 2*(1+2+3)
    EXPECT_FLOAT_EQ(float(exec->output(0).at(1)), 30.f); // 2*(4+5+6)
    exec->feed("x", filled({3, 2}, 1.f)).run();
    ASSERT_EQ(exec->output(0).shape(), TensorShape({3}));
    EXPECT_FLOAT_EQ(float(exec->output(0).at(2)), 22.f); // 2*(5+6)
    exec->feed("x", filled({2, 3}, 0.f, 0.f)).run();
    EXPECT_FLOAT_EQ(float(exec->output(0).at(0)), 0.f);
}

TEST(Execution, HundredRunsGiveIdenticalResults) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {16, 16});
    auto w = opr::SharedParam::make(*g, std::make_shared<Tensor>(filled({16, 16}, -1.f, 0.01f)));
    auto y = opr::tanh(opr::matmul(x, w)) + opr::sigmoid(x);
    auto exec = g->compile({y});
    exec->feed("x", filled({16, 16}, -2.f, 0.015f)).run();
    Tensor first = exec->output(0).copy();
    for (int i = 0; i < 100; ++i) {
        exec->run();
        ASSERT_EQ(std::memcmp(first.raw_ptr(), exec->output(0).raw_ptr(), first.nr_bytes()), 0)
            << "run " << i << " differs";
    }
}

TEST(Execution, DynamicShapeFromRuntimeValueIsComputedAtExecution) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {12});
    auto shp = opr::Input::make(*g, "shape", dtype::Int32(), {2});
    auto y = x.reshape(shp) * 1.0;
    EXPECT_FALSE(y.node()->shape_known());
    auto exec = g->compile({y});
    Tensor s(TensorShape{2}, dtype::Int32());
    s.ptr<int32_t>()[0] = 3;
    s.ptr<int32_t>()[1] = 4;
    exec->feed("x", filled({12}, 0.f)).feed("shape", s).run();
    EXPECT_EQ(exec->output(0).shape(), TensorShape({3, 4}));
    EXPECT_FLOAT_EQ(float(exec->output(0).at(11)), 11.f);
}

TEST(Execution, OutputCallbackReceivesTheValue) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto y = x + 1.0;
    float seen = 0;
    auto exec = g->compile({OutputSpec(y, [&](const Tensor& t) { seen = t.ptr<float>()[2]; })});
    exec->feed("x", filled({3}, 1.f)).run();
    EXPECT_FLOAT_EQ(seen, 4.f);
    EXPECT_THROW(exec->output(0), GraphError);
}

TEST(Execution, SharedParamUpdatesAreSeenByTheNextRun) {
    auto g = ComputingGraph::make();
    auto p = std::make_shared<Tensor>(filled({2}, 1.f));
    auto y = opr::SharedParam::make(*g, p) * 10.0;
    auto exec = g->compile({y});
    exec->run();
    EXPECT_FLOAT_EQ(float(exec->output(0).at(1)), 20.f);
    p->ptr<float>()[1] = 5.f;
    exec->run();
    EXPECT_FLOAT_EQ(float(exec->output(0).at(1)), 50.f);
}

TEST(Errors, DocumentedErrorPathsThrowTheirTypes) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2});
    auto y = x + 1.0;
    EXPECT_NE(error_message<GraphError>([&] { g->compile({}); }).find("at least one output"),
              std::string::npos);
    auto exec = g->compile({y});
    // Executing before feeding names the input.
    EXPECT_NE(error_message<GraphError>([&] { exec->execute(); }).find("\"x\""), std::string::npos);
    // Wrong dtype names the input and both dtypes.
    auto msg =
        error_message<DTypeError>([&] { exec->feed("x", Tensor(TensorShape{2}, dtype::Int32())); });
    EXPECT_NE(msg.find("\"x\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("int32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
    EXPECT_THROW(exec->feed("nope", filled({2}, 0.f)), GraphError);
    // Reading an output before wait().
    exec->feed("x", filled({2}, 0.f));
    EXPECT_THROW(exec->output(0), GraphError); // never executed
    exec->execute();
    EXPECT_NE(error_message<GraphError>([&] { exec->output(0); }).find("before wait()"),
              std::string::npos);
    exec->wait();
    EXPECT_FLOAT_EQ(float(exec->output(0).at(0)), 1.f);
    // A var of another graph.
    auto g2 = ComputingGraph::make();
    auto other = opr::Input::make(*g2, "o", dtype::Float32(), {2});
    EXPECT_THROW(x + other, GraphError);
    EXPECT_THROW(g->compile({other}), GraphError);
    EXPECT_THROW(CompNode::load("gpu7"), ValueError);
}

TEST(Errors, KernelErrorIsRethrownByWait) {
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", dtype::Int32(), {2});
    auto b = opr::Input::make(*g, "b", dtype::Int32(), {2});
    auto exec = g->compile({a / b});
    Tensor ta(TensorShape{2}, dtype::Int32()), tb(TensorShape{2}, dtype::Int32());
    ta.ptr<int32_t>()[0] = ta.ptr<int32_t>()[1] = 1;
    tb.ptr<int32_t>()[0] = 1;
    tb.ptr<int32_t>()[1] = 0;
    exec->feed("a", ta).feed("b", tb);
    exec->execute();
    EXPECT_THROW(exec->wait(), ValueError);
    EXPECT_THROW(exec->output(0), GraphError); // a failed run's outputs are not readable
    tb.ptr<int32_t>()[1] = 1;
    exec->feed("b", tb).run(); // the executable recovers
    EXPECT_EQ(exec->output(0).at(1), 1.0);
}

TEST(MemoryBudget, CompileRefusesAPlanOverTheBudgetBeforeAllocating) {
    GraphOptions options;
    options.memory_budget = size_t(6) << 20; // 6 MiB
    auto graph = ComputingGraph::make(options);
    // A 4 MiB intermediate and a 4 MiB fetched output: 8 MiB, over the budget.
    auto big = opr::fill(*graph, {1024, 1024}, 1.0).rename("big");
    auto out = (big * 2.0).rename("doubled");
    try {
        graph->compile({out});
        FAIL() << "compiled over the budget";
    } catch (const MemoryBudgetError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("over the memory budget of 6.00 MiB (6291456 bytes, "
                           "GraphOptions::memory_budget)"),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find("{1024,1024} float32, 4194304 bytes"), std::string::npos) << msg;
    }
    // Within the budget it compiles and runs.
    options.memory_budget = size_t(9) << 20;
    auto roomy = ComputingGraph::make(options);
    auto ok = opr::fill(*roomy, {1024, 1024}, 1.0) * 2.0;
    auto exec = roomy->compile({ok});
    exec->run();
    EXPECT_EQ(exec->output(0).ptr<float>()[1048575], 2.0f);
}
