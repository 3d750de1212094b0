// If: the branch taken follows the condition's value at run time, outputs are static where the
// branches agree and dynamic where they do not, a statically known condition decides the shapes,
// several executables run one If concurrently, and errors name the If and the branch.
#include "braid.h"

#include <gtest/gtest.h>

#include <numeric>
#include <thread>

using namespace braid;

namespace {

Tensor iota(const TensorShape& shape, float start = 0.f) {
    Tensor t(shape, dtype::Float32());
    std::iota(t.ptr<float>(), t.ptr<float>() + shape.total_nr_elems(), start);
    return t;
}

Tensor flag(bool v) {
    Tensor t(TensorShape{}, dtype::Bool());
    *t.ptr<bool>() = v;
    return t;
}

//! then: x * 2; else: x - 1.
SymbolVarArray twice_or_less_one(SymbolVar pred, SymbolVar x) {
    return opr::cond(
        pred, {x},
        [](ComputingGraph&, const SymbolVarArray& in) { return SymbolVarArray{in[0] * 2.0}; },
        [](ComputingGraph&, const SymbolVarArray& in) { return SymbolVarArray{in[0] - 1.0}; });
}

template <typename F> std::string error_of(F&& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST(IfOpr, RunsTheBranchTheConditionTakesAtRunTime) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto p = opr::Input::make(*g, "p", dtype::Bool(), {});
    auto y = twice_or_less_one(p, x)[0];
    ASSERT_TRUE(y.node()->shape_known()); // the branches agree
    EXPECT_EQ(y.shape(), (TensorShape{4, 6}));
    auto exec = g->compile({y});
    Tensor xv = iota({4, 6});
    for (bool taken : {true, false, false, true}) {
        exec->feed("x", xv).feed("p", flag(taken));
        exec->run();
        const Tensor& out = exec->output(0);
        for (size_t i = 0; i < 24; ++i)
            ASSERT_EQ(out.ptr<float>()[i], taken ? 2.f * float(i) : float(i) - 1.f)
                << "element " << i << ", condition " << taken;
    }
}

TEST(IfOpr, OutputsAreDynamicWhereTheBranchesDisagree) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto p = opr::Input::make(*g, "p", dtype::Int32(), {1});
    auto outs = opr::cond(
        p, {x},
        [](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{opr::reduce_sum(in[0], {1})};
        },
        [](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{in[0].reshape({-1})};
        });
    EXPECT_FALSE(outs[0].node()->shape_known());
    auto exec = g->compile({outs[0]});
    Tensor pv(TensorShape{1}, dtype::Int32());
    for (int taken : {7, 0, 1}) {
        *pv.ptr<int32_t>() = taken;
        exec->feed("x", iota({4, 6})).feed("p", pv);
        exec->run();
        const Tensor& out = exec->output(0);
        if (taken) {
            ASSERT_EQ(out.shape(), (TensorShape{4}));
            EXPECT_EQ(out.ptr<float>()[1], 6.f + 7 + 8 + 9 + 10 + 11);
        } else {
            ASSERT_EQ(out.shape(), (TensorShape{24}));
            EXPECT_EQ(out.ptr<float>()[23], 23.f);
        }
    }
}

TEST(IfOpr, AStaticConditionDecidesTheOutputShapes) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto p = opr::ImmutableTensor::make(*g, flag(false));
    auto y = opr::cond(
        p, {x},
        [](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{opr::reduce_sum(in[0], {1})};
        },
        [](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{in[0].reshape({-1})};
        })[0];
    ASSERT_TRUE(y.node()->shape_known());
    EXPECT_EQ(y.shape(), (TensorShape{24}));
}

TEST(IfOpr, SeveralExecutablesRunOneIfConcurrently) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {64, 64});
    auto p = opr::Input::make(*g, "p", dtype::Bool(), {});
    auto y = twice_or_less_one(p, x)[0];
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            auto exec = g->compile({y});
            Tensor xv = iota({64, 64}, float(t));
            for (int r = 0; r < 50; ++r) {
                bool taken = (r + t) % 3 == 0;
                exec->feed("x", xv).feed("p", flag(taken));
                exec->run();
                float v = exec->output(0).ptr<float>()[5];
                if (v != (taken ? 2.f * (5.f + float(t)) : 5.f + float(t) - 1.f)) ++wrong;
            }
        });
    for (auto& th : threads) th.join();
    EXPECT_EQ(wrong.load(), 0);
}

TEST(IfOpr, AnErrorInsideABranchNamesTheIfAndTheBranchOperator) {
    // The then branch multiplies by a {6,3} weight: fine for x {4,6}, not for x {4,5}, which
    // only the else branch accepts. The shape error comes when the then branch is taken.
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto p = opr::Input::make(*g, "p", dtype::Bool(), {});
    auto y = opr::cond(
        p, {x},
        [](ComputingGraph& bg, const SymbolVarArray& in) {
            auto w = opr::ImmutableTensor::make(bg, iota({6, 3}));
            return SymbolVarArray{opr::reduce_sum(opr::matmul(in[0], w))};
        },
        [](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{opr::reduce_sum(in[0])};
        },
        OperatorConfig("choose"))[0];
    auto exec = g->compile({y});
    exec->feed("x", iota({4, 5})).feed("p", flag(false));
    exec->run();
    EXPECT_EQ(exec->output(0).ptr<float>()[0], 190.f);
    exec->feed("p", flag(true));
    std::string msg = error_of([&] { exec->run(); });
    EXPECT_NE(msg.find("If \"choose\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("MatMul"), std::string::npos) << msg;
    EXPECT_NE(msg.find("{4,5}"), std::string::npos) << msg;
}

TEST(IfOpr, BranchesMustAgreeOnOutputCountAndDtypes) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto p = opr::Input::make(*g, "p", dtype::Bool(), {});
    std::string msg = error_of([&] {
        opr::cond(
            p, {x}, [](ComputingGraph&, const SymbolVarArray& in) { return SymbolVarArray{in[0]}; },
            [](ComputingGraph&, const SymbolVarArray& in) {
                return SymbolVarArray{in[0].astype(dtype::Int32())};
            });
    });
    EXPECT_NE(msg.find("float32 in the then branch and int32 in the else branch"),
              std::string::npos)
        << msg;
    msg = error_of([&] {
        opr::cond(
            p, {x}, [](ComputingGraph&, const SymbolVarArray& in) { return SymbolVarArray{in[0]}; },
            [](ComputingGraph&, const SymbolVarArray& in) {
                return SymbolVarArray{in[0], in[0]};
            });
    });
    EXPECT_NE(msg.find("the then branch has 1 outputs, the else branch 2"), std::string::npos)
        << msg;
    auto p2 = opr::Input::make(*g, "p2", dtype::Bool(), {2});
    msg = error_of([&] { twice_or_less_one(p2, x); });
    EXPECT_NE(msg.find("expected one element"), std::string::npos) << msg;
}

TEST(IfOpr, RoundTripsThroughAModelFileWithItsBranches) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto p = opr::Input::make(*g, "p", dtype::Bool(), {});
    auto y = twice_or_less_one(p, x)[0].rename("y");
    std::vector<uint8_t> bytes;
    dump({y}, bytes);
    auto loaded = load(bytes);
    auto exec = loaded.compile();
    for (bool taken : {false, true}) {
        exec->feed("x", iota({4, 6})).feed("p", flag(taken));
        exec->run();
        EXPECT_EQ(exec->output(0).ptr<float>()[3], taken ? 6.f : 2.f);
    }
}
