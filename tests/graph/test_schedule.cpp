// The order of a comp node's operators (graph/schedule.h): insertion order, except where an
// extra dependency names an operator inserted later, which then runs first.
#include "graph/schedule.h"

#include "braid.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace braid;

namespace {

size_t position(const Executable& exec, const OperatorNode* opr) {
    auto seqs = exec.sequences();
    EXPECT_EQ(seqs.size(), 1u);
    auto& seq = seqs.at(0).second;
    return size_t(std::find(seq.begin(), seq.end(), opr) - seq.begin());
}

} // namespace

TEST(Schedule, KeepsInsertionOrderWithoutExtraDependencies) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    auto a = x + 1.0, b = x * 2.0;
    auto exec = g->compile({a, b});
    EXPECT_LT(position(*exec, a.node()->owner()), position(*exec, b.node()->owner()));
}

TEST(Schedule, AnExtraDependencyOnALaterOperatorRunsItFirst) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    auto a = x + 1.0, b = x * 2.0, c = a - 3.0;
    g->add_extra_dep(a.node(), b.node()); // a waits for b, inserted after it
    auto exec = g->compile({c, b});
    size_t pa = position(*exec, a.node()->owner()), pb = position(*exec, b.node()->owner()),
           pc = position(*exec, c.node()->owner());
    EXPECT_LT(pb, pa);
    EXPECT_LT(pa, pc);
    Tensor xv({4}, dtype::Float32());
    for (size_t i = 0; i < 4; ++i) xv.ptr<float>()[i] = float(i);
    exec->feed("x", xv).run();
    EXPECT_FLOAT_EQ(exec->output(0).at(3), 1.f);
    EXPECT_FLOAT_EQ(exec->output(1).at(3), 6.f);
}
