// Memory planning on small handmade graphs: forwarding where it is allowed and nowhere
// else, report numbers computed by hand, reads across comp nodes, dynamic vars, re-planning
// on new shapes and the on/off switch.
#include "base/log.h"
#include "braid.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <cstring>
#include <random>
#include <sstream>

using namespace braid;

namespace {

Tensor random_tensor(const TensorShape& shape, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    Tensor t(shape, dtype::Float32());
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t.ptr<float>()[i] = dist(rng);
    return t;
}

std::shared_ptr<Tensor> random_param(const TensorShape& shape, uint32_t seed) {
    return std::make_shared<Tensor>(random_tensor(shape, seed));
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
    Tensor ca = a.contiguous(), cb = b.contiguous();
    return std::memcmp(ca.raw_ptr(), cb.raw_ptr(), ca.nr_bytes()) == 0;
}

const MemoryReport::VarPlacement* find_placement(const MemoryReport::Node& node,
                                                 const std::string& name) {
    for (auto& p : node.placements)
        if (p.name == name) return &p;
    return nullptr;
}

using Feeds = std::vector<std::pair<std::string, Tensor>>;

//! Compiles `outputs` with planning on and off, feeds both, runs both `runs` times and
//! expects every output bitwise equal; returns the planned executable.
std::unique_ptr<Executable> expect_same_as_unplanned(ComputingGraph& g,
                                                     const std::vector<SymbolVar>& outputs,
                                                     const Feeds& feeds, int runs = 1) {
    std::vector<OutputSpec> specs(outputs.begin(), outputs.end());
    g.options().enable_memory_plan = false;
    auto ref = g.compile(specs);
    g.options().enable_memory_plan = true;
    auto exec = g.compile(specs);
    for (auto& [name, value] : feeds) {
        ref->feed(name, value);
        exec->feed(name, value);
    }
    for (int r = 0; r < runs; ++r) {
        ref->run();
        exec->run();
        for (size_t i = 0; i < outputs.size(); ++i)
            EXPECT_TRUE(bitwise_equal(exec->output(i), ref->output(i)))
                << "output " << outputs[i].name() << ", run " << r;
    }
    return exec;
}

class ForwardingTest : public ::testing::TestWithParam<std::string> {
protected:
    std::shared_ptr<ComputingGraph> make_graph() {
        register_all_operators();
        GraphOptions options;
        options.memory_planner = GetParam();
        // The hand-computed plans count the operators as built.
        options.enable_fusion = false;
        return ComputingGraph::make(options);
    }
};

TEST_P(ForwardingTest, ReportMatchesHandComputedNumbers) {
    auto g = make_graph();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {16, 16});      // step 0
    auto w = opr::SharedParam::make(*g, random_param({16, 16}, 1), "w"); // step 1
    auto a = opr::matmul(x, w).rename("a");                              // 2: [2, 4)
    auto b = opr::relu(a).rename("b");                                   // 3: over a
    auto c = opr::matmul(b, w).rename("c");                              // 4: [4, 8)
    auto h = (b + c).rename("h");                                        // 5: over b
    auto v = c.reshape({256}).rename("v");                               // 6: view of c
    auto e = opr::neg(v).rename("e");                                    // 7: over c
    auto e2 = e.reshape({16, 16}).rename("e2");                          // 8: view of e
    auto y = (h * e2).rename("y");                                       // 9: fetched
    auto exec = g->compile({y});
    const auto& report = exec->memory_report();
    ASSERT_TRUE(report.enabled);
    ASSERT_EQ(report.nodes.size(), 1u);
    const auto& n = report.nodes[0];
    EXPECT_EQ(n.comp_node, "cpu0");
    EXPECT_EQ(n.planner, GetParam());
    EXPECT_EQ(n.alignment, 64u);
    EXPECT_EQ(n.nr_steps, 10u);
    // Two chains of 1 KiB: a -> b -> h alive over [2, 10), c -> e over [4, 10).
    EXPECT_EQ(n.lower_bound_bytes, 2048u);
    EXPECT_EQ(n.arena_bytes, 2048u);
    EXPECT_EQ(n.no_reuse_bytes, 5u * 1024u); // a, b, c, h, e
    EXPECT_EQ(n.nr_planned_vars, 5u);
    EXPECT_EQ(n.nr_readonly_forwarded, 2u); // v, e2
    EXPECT_EQ(n.nr_inplace_forwarded, 3u);  // b, h, e
    EXPECT_EQ(n.nr_forwarded(), 5u);
    EXPECT_EQ(n.nr_own_allocation_vars, 1u); // y
    EXPECT_EQ(n.own_allocation_bytes, 1024u);
    EXPECT_EQ(n.nr_dynamic_vars, 0u);
    EXPECT_EQ(n.nr_cross_node_reads, 0u);

    struct Want {
        const char* name;
        size_t begin, end;
        bool in_place;
    };
    for (auto want : {Want{"a", 2, 4, false}, Want{"b", 3, 6, true}, Want{"c", 4, 8, false},
                      Want{"h", 5, 10, true}, Want{"e", 7, 10, true}}) {
        auto* p = find_placement(n, want.name);
        ASSERT_NE(p, nullptr) << want.name;
        EXPECT_EQ(p->bytes, 1024u) << want.name;
        EXPECT_EQ(p->lifetime_begin, want.begin) << want.name;
        EXPECT_EQ(p->lifetime_end, want.end) << want.name;
        EXPECT_EQ(p->in_place, want.in_place) << want.name;
    }
    EXPECT_EQ(find_placement(n, "b")->offset, find_placement(n, "a")->offset);
    EXPECT_EQ(find_placement(n, "h")->offset, find_placement(n, "a")->offset);
    EXPECT_EQ(find_placement(n, "e")->offset, find_placement(n, "c")->offset);
    EXPECT_NE(find_placement(n, "c")->offset, find_placement(n, "a")->offset);
    EXPECT_EQ(find_placement(n, "y"), nullptr); // fetched: outside the arena
    auto largest = n.largest_vars(2);
    ASSERT_EQ(largest.size(), 2u);
    EXPECT_EQ(largest[0].bytes, 1024u);

    auto text = report.to_string();
    EXPECT_NE(text.find("cpu0"), std::string::npos) << text;
    EXPECT_NE(text.find("lower bound 2.0 KiB"), std::string::npos) << text;
    EXPECT_NE(text.find("3 in place"), std::string::npos) << text;

    expect_same_as_unplanned(*g, {y}, {{"x", random_tensor({16, 16}, 2)}}, 2);
}

TEST_P(ForwardingTest, KeepsAnInputThatIsReadAfterTheInPlaceCandidate) {
    auto g = make_graph();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {8, 8});
    auto pt = random_param({8, 8}, 3);
    Tensor p_before = pt->copy();
    auto p = opr::SharedParam::make(*g, pt, "p");
    auto a = (x * p).rename("a");
    auto b = opr::relu(a).rename("b"); // a is read again below: b must not take a's memory
    auto c = (a + b).rename("c");      // the last reader of a: c takes it
    auto f = opr::abs(c).rename("f");  // fetched: own memory, never overwritten
    auto gg = opr::neg(f).rename("g");
    auto r = opr::relu(p).rename("r"); // a parameter is never overwritten
    auto s = opr::relu(x).rename("s"); // nor a fed input
    auto t = (r + s).rename("t");
    Tensor xv = random_tensor({8, 8}, 4);
    Tensor x_before = xv.copy();
    auto exec = expect_same_as_unplanned(*g, {f, gg, t}, {{"x", xv}});

    auto& n = exec->memory_report().nodes.at(0);
    ASSERT_NE(find_placement(n, "b"), nullptr);
    EXPECT_FALSE(find_placement(n, "b")->in_place);
    ASSERT_NE(find_placement(n, "c"), nullptr);
    EXPECT_TRUE(find_placement(n, "c")->in_place);
    EXPECT_EQ(find_placement(n, "c")->offset, find_placement(n, "a")->offset);
    for (auto* name : {"r", "s"}) {
        ASSERT_NE(find_placement(n, name), nullptr) << name;
        EXPECT_FALSE(find_placement(n, name)->in_place) << name;
    }
    // Fetched outputs live outside the arena, so g cannot write over f either.
    EXPECT_EQ(find_placement(n, "f"), nullptr);
    EXPECT_EQ(find_placement(n, "g"), nullptr);
    EXPECT_EQ(n.nr_inplace_forwarded, 1u);

    // The values a plain loop gives: a intact when c reads it, f not overwritten by g.
    const float *xp = x_before.ptr<float>(), *pp = p_before.ptr<float>();
    for (size_t i = 0; i < 64; ++i) {
        float av = xp[i] * pp[i];
        float cv = av + (av > 0 ? av : 0.f);
        EXPECT_EQ(exec->output(0).ptr<float>()[i], std::fabs(cv)) << i;
        EXPECT_EQ(exec->output(1).ptr<float>()[i], -std::fabs(cv)) << i;
        EXPECT_EQ(exec->output(2).ptr<float>()[i],
                  (pp[i] > 0 ? pp[i] : 0.f) + (xp[i] > 0 ? xp[i] : 0.f))
            << i;
    }
    EXPECT_TRUE(bitwise_equal(*pt, p_before)) << "the parameter was overwritten";
    EXPECT_TRUE(bitwise_equal(xv, x_before)) << "the fed input was overwritten";
}

TEST_P(ForwardingTest, NeverWritesInPlaceOverASmallerBroadcastInput) {
    auto g = make_graph();
    auto x1 = opr::Input::make(*g, "x1", dtype::Float32(), {1, 8});
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {8, 8});
    auto p = opr::SharedParam::make(*g, random_param({8, 8}, 5), "p");
    auto m = opr::matmul(x1, p).rename("m"); // {1, 8}
    auto k = opr::matmul(x, p).rename("k");  // {8, 8}
    auto z = (m + k).rename("z");            // input 0 is smaller than the output
    auto out = opr::relu(z).rename("out");
    auto exec = expect_same_as_unplanned(
        *g, {out}, {{"x1", random_tensor({1, 8}, 6)}, {"x", random_tensor({8, 8}, 7)}});
    auto& n = exec->memory_report().nodes.at(0);
    ASSERT_NE(find_placement(n, "z"), nullptr);
    EXPECT_FALSE(find_placement(n, "z")->in_place);
}

TEST_P(ForwardingTest, ReadsAcrossCompNodesStaySafe) {
    // v on cpu0 is read on cpu1 after a slow matmul there; cpu0 meanwhile goes on with w. If
    // the plan put w into v's bytes, cpu1 could read w's values: v must stay alive to the end
    // of cpu0's sequence.
    auto g = make_graph();
    auto cpu0 = CompNode::load("cpu0"), cpu1 = CompNode::load("cpu1");
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {64, 64}, cpu0);
    auto p = opr::SharedParam::make(*g, random_param({64, 64}, 8), {"p", cpu0});
    auto v = opr::Elemwise::make(opr::ElemMode::MUL, {x, p}, {"v", cpu0});
    auto bx = opr::Input::make(*g, "bx", dtype::Float32(), {384, 384}, cpu1);
    auto big = opr::MatMul::make(bx, bx, {}, {"big", cpu1});
    auto big2 = opr::MatMul::make(big, bx, {}, {"big2", cpu1});
    auto r = opr::Elemwise::make(opr::ElemMode::NEG, {v}, {"r", cpu1});
    auto q = opr::SharedParam::make(*g, random_param({64, 64}, 9), {"q", cpu0});
    auto w = opr::Elemwise::make(opr::ElemMode::ADD, {x, q}, {"w", cpu0});
    auto o = opr::Elemwise::make(opr::ElemMode::RELU, {w}, {"o", cpu0});
    g->options().enable_memory_plan = true;
    auto exec = g->compile({r, o, big2});
    auto& rep = exec->memory_report();
    ASSERT_EQ(rep.nodes.size(), 2u);
    auto& n0 = rep.nodes[0].comp_node == "cpu0" ? rep.nodes[0] : rep.nodes[1];
    ASSERT_NE(find_placement(n0, "v"), nullptr);
    ASSERT_NE(find_placement(n0, "w"), nullptr);
    // v's bytes are not reused for w while cpu1 may still read them.
    EXPECT_NE(find_placement(n0, "w")->offset, find_placement(n0, "v")->offset);
    EXPECT_EQ(n0.nr_cross_node_reads, 1u);
    EXPECT_EQ(n0.arena_bytes, 2u * 64u * 64u * 4u);

    g->options().enable_memory_plan = false;
    auto ref = g->compile({r, o, big2});
    for (int run = 0; run < 20; ++run) {
        for (auto* e : {exec.get(), ref.get()}) // each executable holds its own inputs
            e->feed("x", random_tensor({64, 64}, 100 + run))
                .feed("bx", random_tensor({384, 384}, 7));
        ref->run();
        exec->run();
        ASSERT_TRUE(bitwise_equal(exec->output(0), ref->output(0))) << "run " << run;
        ASSERT_TRUE(bitwise_equal(exec->output(1), ref->output(1))) << "run " << run;
    }
}

TEST_P(ForwardingTest, ReleasesDynamicVarsAfterTheirLastRead) {
    auto g = make_graph();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto shape = opr::Input::make(*g, "shape", dtype::Int32(), {2});
    auto a = (x * 2.0).rename("a");
    auto r = a.reshape(shape).rename("r"); // a view with a shape known only at execution
    auto d = opr::neg(r).rename("d");      // dynamic, read once below: released after it
    auto e = opr::abs(d).rename("e");      // dynamic and fetched: kept
    Tensor sv(TensorShape{2}, dtype::Int32());
    sv.ptr<int32_t>()[0] = 6;
    sv.ptr<int32_t>()[1] = 4;
    auto exec =
        expect_same_as_unplanned(*g, {e}, {{"x", random_tensor({4, 6}, 10)}, {"shape", sv}}, 3);
    auto& n = exec->memory_report().nodes.at(0);
    EXPECT_EQ(n.nr_dynamic_vars, 2u);
    EXPECT_EQ(n.nr_dynamic_released, 1u);
    ASSERT_NE(find_placement(n, "a"), nullptr);
    // a stays alive while its view r is read by d's step.
    size_t d_step = 0;
    auto seqs = exec->sequences();
    for (auto* opr : seqs[0].second) {
        if (opr->output(0) == d.node()) break;
        ++d_step;
    }
    EXPECT_EQ(find_placement(n, "a")->lifetime_end, d_step + 1);
    EXPECT_EQ(exec->output(0).shape(), (TensorShape{6, 4}));
}

TEST_P(ForwardingTest, ReplansOnNewInputShapesAndReusesALargeEnoughArena) {
    auto g = make_graph();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {8, 32});
    auto w1 = opr::SharedParam::make(*g, random_param({32, 64}, 11), "w1");
    auto b1 = opr::SharedParam::make(*g, random_param({64}, 12), "b1");
    auto w2 = opr::SharedParam::make(*g, random_param({64, 16}, 13), "w2");
    auto h = opr::relu(opr::matmul(x, w1) + b1);
    auto y = opr::matmul(h, w2) + 1.0;
    g->options().enable_memory_plan = false;
    auto ref = g->compile({y});
    g->options().enable_memory_plan = true;
    auto exec = g->compile({y});
    auto check = [&](size_t batch) {
        Tensor xv = random_tensor({batch, 32}, uint32_t(batch));
        exec->feed("x", xv);
        ref->feed("x", xv);
        exec->run();
        ref->run();
        EXPECT_TRUE(bitwise_equal(exec->output(0), ref->output(0))) << "batch " << batch;
        EXPECT_EQ(exec->output(0).shape(), (TensorShape{batch, 16}));
        return exec->memory_report().nodes.at(0);
    };
    auto n8 = check(8);
    EXPECT_EQ(n8.arena_bytes, 8u * 64u * 4u + 8u * 16u * 4u);
    auto n4 = check(4);
    EXPECT_LT(n4.arena_bytes, n8.arena_bytes);
    EXPECT_EQ(n4.arena_capacity_bytes, n8.arena_capacity_bytes); // reused
    auto n32 = check(32);
    EXPECT_GT(n32.arena_bytes, n8.arena_capacity_bytes);
    EXPECT_GE(n32.arena_capacity_bytes, n32.arena_bytes);
    check(8);
}

TEST_P(ForwardingTest, PlanningOffGivesEveryVarItsOwnAllocation) {
    auto g = make_graph();
    g->options().enable_memory_plan = false;
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 4});
    auto y = opr::relu(opr::neg(x) * 3.0);
    auto exec = g->compile({y});
    exec->feed("x", random_tensor({4, 4}, 14));
    exec->run();
    const auto& report = exec->memory_report();
    EXPECT_FALSE(report.enabled);
    EXPECT_EQ(report.nodes.at(0).nr_own_allocation_vars, 3u); // neg, mul, relu
    EXPECT_EQ(report.nodes.at(0).nr_inplace_forwarded, 0u);
    EXPECT_NE(report.to_string().find("memory planning off"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(AllPlanners, ForwardingTest, ::testing::ValuesIn(MemPlanner::algorithms()),
                         [](const auto& info) { return info.param; });

TEST(MemoryPlan, PrintsTheReportAtCompileTimeWhenLoggingAtDebug) {
    register_all_operators();
    std::ostringstream out;
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    auto* lg = logger();
    auto old_level = lg->level();
    lg->sinks().push_back(sink);
    lg->set_level(spdlog::level::debug);
    {
        auto g = ComputingGraph::make();
        auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 4});
        g->compile({opr::relu(x * 2.0)});
    }
    lg->set_level(old_level);
    lg->sinks().pop_back();
    EXPECT_NE(out.str().find("memory plan"), std::string::npos) << out.str();
    EXPECT_NE(out.str().find("lower bound"), std::string::npos) << out.str();
}

TEST(MemoryPlan, RejectsAnUnknownPlannerAtCompileTime) {
    register_all_operators();
    GraphOptions options;
    options.memory_planner = "no_such_planner";
    auto g = ComputingGraph::make(options);
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    EXPECT_THROW(g->compile({opr::relu(x)}), ValueError);
}

} // namespace
