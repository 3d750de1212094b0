// If: the branch taken follows the condition's value at run time, outputs are static where the
// branches agree and dynamic where they do not, a statically known condition decides the shapes,
// several executables run one If concurrently, errors name the If and the branch, and the
// gradient through an If is the taken branch's.
#include "braid.h"

#include <gtest/gtest.h>

#include "base/run_control.h"
#include "tests/support/error_text.h"

#include <numeric>
#include <thread>

using namespace braid;
using braid::testing::error_of;

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

TEST(IfOpr, AConstantConditionMakesNoIfButTheTakenBranchsOperators) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto y = twice_or_less_one(opr::ImmutableTensor::make(*g, flag(true)), x)[0];
    for (auto& opr : g->operators()) EXPECT_STRNE(opr->type_name(), "If");
    auto exec = g->compile({y});
    exec->feed("x", iota({4, 6})).run();
    EXPECT_EQ(exec->output(0).ptr<float>()[5], 10.f);
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

TEST(LoopOpr, CarriesValuesAndStacksScanOutputsForAStaticTripCount) {
    // Running sums of x's rows over 4 iterations: the total is carried, each sum is scanned.
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto trips = opr::ImmutableTensor::make_scalar(*g, 4, dtype::Int64());
    auto zero = opr::reduce_sum(x, {0}) * 0.0;
    auto outs = opr::loop(trips, SymbolVar(), {zero}, {x},
                          [](ComputingGraph&, SymbolVar i, SymbolVar cond,
                             const SymbolVarArray& carried, const SymbolVarArray& captured) {
                              // row i of x, looked up by the iteration number
                              auto row = opr::embedding(captured[0], i.astype(dtype::Int32()));
                              auto sum = carried[0] + row;
                              return SymbolVarArray{cond, sum, sum};
                          });
    ASSERT_EQ(outs.size(), 2u);
    ASSERT_TRUE(outs[1].node()->shape_known());
    EXPECT_EQ(outs[0].shape(), (TensorShape{6}));
    EXPECT_EQ(outs[1].shape(), (TensorShape{4, 6}));
    auto exec = g->compile({outs[0], outs[1]});
    exec->feed("x", iota({4, 6}));
    exec->run();
    const Tensor& total = exec->output(0);
    const Tensor& sums = exec->output(1);
    ASSERT_EQ(sums.shape(), (TensorShape{4, 6}));
    for (size_t r = 0; r < 4; ++r)
        for (size_t c = 0; c < 6; ++c) {
            float expect = 0;
            for (size_t k = 0; k <= r; ++k) expect += float(k * 6 + c);
            ASSERT_EQ(sums.ptr<float>()[r * 6 + c], expect) << r << "," << c;
        }
    EXPECT_EQ(total.ptr<float>()[0], 0.f + 6 + 12 + 18);
}

TEST(LoopOpr, TheBodysConditionEndsTheLoopAndTheOutputsAreDynamic) {
    // Doubles v until it reaches `limit` (fed): the trip count depends on the data.
    auto g = ComputingGraph::make();
    auto v = opr::Input::make(*g, "v", dtype::Float32(), {1});
    auto limit = opr::Input::make(*g, "limit", dtype::Float32(), {1});
    auto outs = opr::loop(SymbolVar(), SymbolVar(), {v}, {limit},
                          [](ComputingGraph&, SymbolVar, SymbolVar, const SymbolVarArray& carried,
                             const SymbolVarArray& captured) {
                              auto next = carried[0] * 2.0;
                              auto go = opr::less(next, captured[0]);
                              return SymbolVarArray{go, next, next};
                          });
    EXPECT_FALSE(outs[1].node()->shape_known()); // the iteration count is not known
    auto exec = g->compile({outs[0], outs[1]});
    Tensor one(TensorShape{1}, dtype::Float32());
    Tensor lim(TensorShape{1}, dtype::Float32());
    *one.ptr<float>() = 1.f;
    for (float l : {100.f, 5.f}) {
        *lim.ptr<float>() = l;
        exec->feed("v", one).feed("limit", lim);
        exec->run();
        // 2, 4, 8, ... up to and including the first value >= l
        size_t n = l == 100.f ? 7 : 3;
        ASSERT_EQ(exec->output(1).shape(), (TensorShape{n, 1}));
        EXPECT_EQ(exec->output(0).ptr<float>()[0], float(1 << n));
        EXPECT_EQ(exec->output(1).ptr<float>()[n - 1], float(1 << n));
    }
}

TEST(LoopOpr, SwappedPassThroughValuesAreNotCorruptedByTheTurnTaking) {
    // (a, b) -> (b, reverse(a)), reverse as a product with the anti-diagonal matrix: b passes
    // through to the other slot, so a body output is what the body was fed, and the next
    // iteration's product must not write over its own input.
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", dtype::Float32(), {1, 3});
    auto b = opr::Input::make(*g, "b", dtype::Float32(), {1, 3});
    Tensor rev(TensorShape{3, 3}, dtype::Float32());
    for (size_t i = 0; i < 9; ++i) rev.ptr<float>()[i] = i % 3 == 2 - i / 3 ? 1.f : 0.f;
    auto r = opr::ImmutableTensor::make(*g, rev);
    auto trips = opr::ImmutableTensor::make_scalar(*g, 10, dtype::Int64());
    auto outs =
        opr::loop(trips, SymbolVar(), {a, b}, {r},
                  [](ComputingGraph&, SymbolVar, SymbolVar cond, const SymbolVarArray& carried,
                     const SymbolVarArray& captured) {
                      return SymbolVarArray{cond, carried[1], opr::matmul(carried[0], captured[0])};
                  });
    auto exec = g->compile({outs[0], outs[1]});
    std::vector<float> ra{1, 2, 3}, rb{10, 20, 30};
    Tensor av(TensorShape{1, 3}, dtype::Float32()), bv(TensorShape{1, 3}, dtype::Float32());
    std::copy(ra.begin(), ra.end(), av.ptr<float>());
    std::copy(rb.begin(), rb.end(), bv.ptr<float>());
    for (int i = 0; i < 10; ++i) {
        std::vector<float> nb{ra[2], ra[1], ra[0]};
        ra = rb;
        rb = nb;
    }
    exec->feed("a", av).feed("b", bv);
    exec->run();
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(exec->output(0).ptr<float>()[i], ra[i]) << i;
        EXPECT_EQ(exec->output(1).ptr<float>()[i], rb[i]) << i;
    }
    EXPECT_EQ(av.ptr<float>()[0], 1.f); // the fed values are untouched
    EXPECT_EQ(bv.ptr<float>()[0], 10.f);
}

TEST(LoopOpr, ZeroIterationsGiveTheInitialValuesAndEmptyScans) {
    auto g = ComputingGraph::make();
    auto v = opr::Input::make(*g, "v", dtype::Float32(), {2});
    auto n = opr::Input::make(*g, "n", dtype::Int64(), {});
    auto outs = opr::loop(n, SymbolVar(), {v}, {},
                          [](ComputingGraph&, SymbolVar, SymbolVar cond,
                             const SymbolVarArray& carried, const SymbolVarArray&) {
                              return SymbolVarArray{cond, carried[0] + 1.0, carried[0]};
                          });
    auto exec = g->compile({outs[0], outs[1]});
    Tensor nv(TensorShape{}, dtype::Int64());
    *nv.ptr<int64_t>() = 0;
    exec->feed("v", iota({2}, 5.f)).feed("n", nv);
    exec->run();
    EXPECT_EQ(exec->output(0).ptr<float>()[1], 6.f);
    EXPECT_EQ(exec->output(1).shape(), (TensorShape{0, 2}));
}

TEST(LoopOpr, ACancelledRunStopsAnEndlessLoop) {
    auto g = ComputingGraph::make();
    auto v = opr::Input::make(*g, "v", dtype::Float32(), {1});
    auto outs = opr::loop(SymbolVar(), SymbolVar(), {v}, {},
                          [](ComputingGraph&, SymbolVar, SymbolVar cond,
                             const SymbolVarArray& carried, const SymbolVarArray&) {
                              return SymbolVarArray{cond, carried[0] + 1.0};
                          });
    auto exec = g->compile({outs[0]});
    RunControl rc;
    rc.set_deadline(RunControl::Clock::now() + std::chrono::milliseconds(200));
    exec->set_run_control(&rc);
    exec->feed("v", iota({1}));
    std::string msg = error_of([&] { exec->run(); });
    EXPECT_NE(msg.find("Loop"), std::string::npos) << msg;
    EXPECT_NE(msg.find("deadline"), std::string::npos) << msg;
}

TEST(LoopOpr, RoundTripsThroughAModelFileWithItsBody) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3});
    auto n = opr::Input::make(*g, "n", dtype::Int64(), {});
    auto outs = opr::loop(n, SymbolVar(), {x}, {x},
                          [](ComputingGraph&, SymbolVar, SymbolVar cond,
                             const SymbolVarArray& carried, const SymbolVarArray& captured) {
                              return SymbolVarArray{cond, carried[0] + captured[0]};
                          });
    std::vector<uint8_t> bytes;
    dump({outs[0].rename("y")}, bytes);
    auto loaded = load(bytes);
    auto exec = loaded.compile();
    Tensor nv(TensorShape{}, dtype::Int64());
    *nv.ptr<int64_t>() = 3;
    exec->feed("x", iota({2, 3})).feed("n", nv);
    exec->run();
    EXPECT_EQ(exec->output(0).ptr<float>()[5], 20.f);
}

//! d loss / d inputs by central differences, in float64.
std::vector<std::vector<double>> numeric_grads(Executable& loss, std::vector<Tensor> inputs,
                                               const std::vector<std::string>& names,
                                               const Tensor* pred = nullptr) {
    auto eval = [&] {
        if (pred) loss.feed("p", *pred);
        for (size_t i = 0; i < inputs.size(); ++i) loss.feed(names[i], inputs[i]);
        loss.run();
        return *loss.output(0).ptr<double>();
    };
    std::vector<std::vector<double>> res;
    for (auto& t : inputs) {
        res.emplace_back();
        for (size_t k = 0; k < t.shape().total_nr_elems(); ++k) {
            double v = t.ptr<double>()[k], h = 1e-6;
            t.ptr<double>()[k] = v + h;
            double up = eval();
            t.ptr<double>()[k] = v - h;
            double down = eval();
            t.ptr<double>()[k] = v;
            res.back().push_back((up - down) / (2 * h));
        }
    }
    return res;
}

TEST(IfOpr, TheGradientIsTheTakenBranchsAndMatchesFiniteDifferences) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float64(), {2, 3});
    auto w = opr::Input::make(*g, "w", dtype::Float64(), {3});
    auto p = opr::Input::make(*g, "p", dtype::Bool(), {});
    // then: x * w and sin(w); else: x - w * w and x, which does not read w in its second output.
    auto ys = opr::cond(
        p, {x, w},
        [](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{in[0] * in[1], opr::sin(in[1]) + in[0] * 0.0};
        },
        [](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{in[0] - in[1] * in[1], in[0]};
        });
    auto loss = opr::reduce_sum(opr::square(ys[0])) + opr::reduce_sum(ys[1] * 3.0);
    auto grads = grad(loss, {x, w});
    Tensor xv(TensorShape{2, 3}, dtype::Float64()), wv(TensorShape{3}, dtype::Float64());
    for (size_t i = 0; i < 6; ++i) xv.ptr<double>()[i] = 0.3 * double(i) - 0.7;
    for (size_t i = 0; i < 3; ++i) wv.ptr<double>()[i] = 0.5 + 0.25 * double(i);
    auto exec = g->compile({grads[0], grads[1]});
    auto fwd = g->compile({loss});
    for (bool taken : {true, false}) {
        exec->feed("x", xv).feed("w", wv).feed("p", flag(taken)).run();
        Tensor pred = flag(taken);
        auto want = numeric_grads(*fwd, {xv, wv}, {"x", "w"}, &pred);
        for (size_t i = 0; i < 2; ++i)
            for (size_t k = 0; k < want[i].size(); ++k)
                EXPECT_NEAR(exec->output(i).ptr<double>()[k], want[i][k], 1e-5)
                    << (taken ? "then" : "else") << " input " << i << " element " << k;
    }
}

TEST(IfOpr, ACapturedValueTheTakenBranchDoesNotReadGetsAZeroGradient) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    auto w = opr::Input::make(*g, "w", dtype::Float32(), {4});
    auto p = opr::Input::make(*g, "p", dtype::Bool(), {});
    auto y = opr::cond(
        p, {x, w},
        [](ComputingGraph&, const SymbolVarArray& in) { return SymbolVarArray{in[0] * 2.0}; },
        [](ComputingGraph&, const SymbolVarArray& in) { return SymbolVarArray{in[1] * 5.0}; })[0];
    auto grads = grad(opr::reduce_sum(y), {x, w});
    auto exec = g->compile({grads[0], grads[1]});
    exec->feed("x", iota({4})).feed("w", iota({4})).feed("p", flag(true)).run();
    EXPECT_EQ(exec->output(0).ptr<float>()[3], 2.f);
    EXPECT_EQ(exec->output(1).ptr<float>()[3], 0.f);
    exec->feed("p", flag(false)).run();
    EXPECT_EQ(exec->output(0).ptr<float>()[3], 0.f);
    EXPECT_EQ(exec->output(1).ptr<float>()[3], 5.f);
}

TEST(LoopOpr, TheGradientOfAStaticTripCountMatchesFiniteDifferences) {
    // h' = sin(h * w + x[i]) for 4 iterations, each h' also scanned (times 2); the loss reads
    // the last h and the scans. Gradients w.r.t. the initial h, w and x (read by row).
    register_all_operators();
    auto g = ComputingGraph::make();
    auto h = opr::Input::make(*g, "h", dtype::Float64(), {3});
    auto w = opr::Input::make(*g, "w", dtype::Float64(), {3});
    auto x = opr::Input::make(*g, "x", dtype::Float64(), {4, 3});
    auto trips = opr::ImmutableTensor::make_scalar(*g, 4, dtype::Int64());
    auto outs = opr::loop(trips, SymbolVar(), {h}, {w, x},
                          [](ComputingGraph&, SymbolVar i, SymbolVar cond,
                             const SymbolVarArray& carried, const SymbolVarArray& captured) {
                              auto row = opr::embedding(captured[1], i.astype(dtype::Int32()));
                              auto next = opr::sin(carried[0] * captured[0] + row);
                              return SymbolVarArray{cond, next, next * 2.0};
                          });
    Tensor weights(TensorShape{4, 3}, dtype::Float64());
    for (size_t k = 0; k < 12; ++k) weights.ptr<double>()[k] = 0.1 * double(k) - 0.4;
    auto loss = opr::reduce_sum(opr::square(outs[0])) +
                opr::reduce_sum(outs[1] * opr::ImmutableTensor::make(*g, weights));
    auto grads = grad(loss, {h, w, x});
    Tensor hv(TensorShape{3}, dtype::Float64()), wv(TensorShape{3}, dtype::Float64()),
        xv(TensorShape{4, 3}, dtype::Float64());
    for (size_t k = 0; k < 3; ++k) hv.ptr<double>()[k] = 0.2 * double(k) - 0.3;
    for (size_t k = 0; k < 3; ++k) wv.ptr<double>()[k] = 0.9 - 0.3 * double(k);
    for (size_t k = 0; k < 12; ++k) xv.ptr<double>()[k] = 0.05 * double(k) - 0.2;
    auto exec = g->compile({grads[0], grads[1], grads[2]});
    exec->feed("h", hv).feed("w", wv).feed("x", xv).run();
    auto fwd = g->compile({loss});
    auto want = numeric_grads(*fwd, {hv, wv, xv}, {"h", "w", "x"});
    for (size_t i = 0; i < 3; ++i)
        for (size_t k = 0; k < want[i].size(); ++k)
            EXPECT_NEAR(exec->output(i).ptr<double>()[k], want[i][k], 1e-6)
                << "input " << i << " element " << k;
}

TEST(LoopOpr, AGradientThroughALoopThatCanEndEarlyIsAnErrorNamingIt) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto trips = opr::ImmutableTensor::make_scalar(*g, 2, dtype::Int64());
    // The body's condition depends on the data: the trip count is not static.
    auto y = opr::loop(trips, SymbolVar(), {x}, {},
                       [](ComputingGraph&, SymbolVar, SymbolVar, const SymbolVarArray& carried,
                          const SymbolVarArray&) {
                           auto keep_going = opr::less(opr::reduce_sum(carried[0]),
                                                       opr::scalar_like(carried[0], 100));
                           return SymbolVarArray{keep_going, carried[0] * 2.0};
                       })[0];
    std::string msg = error_of([&] { grad(opr::reduce_sum(y), x); });
    EXPECT_NE(msg.find("Loop"), std::string::npos) << msg;
    EXPECT_NE(msg.find("static trip count and no condition that can end the loop early"),
              std::string::npos)
        << msg;
}
