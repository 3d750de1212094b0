// Automatic sharding: the ILP against brute force, resharding between placements on 2-d meshes,
// and whole plans for the Megatron MLP and a transformer block on meshes 1x2, 2x1, 2x2 and
// 1x3: each lowered plan gives the single-device results, and its predicted step time is at
// most that of the hand-written Megatron plan and of pure data parallelism, priced by the same
// model. A memory limit below data parallelism's need gives a plan that fits.
#include "parallel/auto_shard.h"

#include "auto_shard_models.h"
#include "checker.h"

#include "braid.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

using namespace braid;
using namespace braid::parallel;
using braid::test::expect_tensor_near;
using braid::test::random_tensor;

namespace {

class AutoShardTest : public ::testing::Test {
protected:
    void SetUp() override {
        register_all_operators();
        setenv("BRAID_COMM_TIMEOUT", "60", /*overwrite=*/0);
    }
};

//! Costs in [0, 10) times `unit` (1e-7: step times of microseconds, as plans have).
ShardProblem random_problem(std::mt19937& rng, size_t nodes, double unit) {
    std::uniform_int_distribution<size_t> nstrat(1, 4);
    std::uniform_real_distribution<double> cost(0.0, 10.0 * unit), mem(1.0, 5.0);
    ShardProblem p;
    for (size_t v = 0; v < nodes; ++v) {
        ShardProblem::Node n;
        n.name = fmt::format("n{}", v);
        size_t s = nstrat(rng);
        for (size_t i = 0; i < s; ++i) {
            n.cost.push_back(cost(rng));
            n.memory.push_back(mem(rng));
        }
        p.nodes.push_back(std::move(n));
    }
    // A chain plus random extra edges (some parallel or reversed).
    std::uniform_int_distribution<size_t> pick(0, nodes - 1);
    auto add_edge = [&](size_t u, size_t v) {
        ShardProblem::Edge e;
        e.from = u;
        e.to = v;
        for (size_t i = 0; i < p.nodes[u].cost.size() * p.nodes[v].cost.size(); ++i) {
            e.cost.push_back(cost(rng) * (i % 3 == 0 ? 0.0 : 1.0));
            e.memory.push_back(mem(rng) * 0.5);
        }
        p.edges.push_back(std::move(e));
    };
    for (size_t v = 1; v < nodes; ++v) add_edge(v - 1, v);
    for (size_t k = 0; k < nodes / 2; ++k) {
        size_t u = pick(rng), v = pick(rng);
        if (u != v) add_edge(u, v);
    }
    return p;
}

} // namespace

TEST_F(AutoShardTest, IlpOptimumEqualsBruteForceOnRandomProblemsOfUpToTwelveNodes) {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 40; ++trial) {
        size_t nodes = 2 + trial % 11;
        ShardProblem p = random_problem(rng, nodes, trial % 3 == 0 ? 1e-7 : 1.0);
        if (trial % 2) {
            // A limit between the least and the most memory a plan can need.
            double lo = 0, hi = 0;
            for (auto& n : p.nodes) {
                lo += *std::min_element(n.memory.begin(), n.memory.end());
                hi += *std::max_element(n.memory.begin(), n.memory.end());
            }
            for (auto& e : p.edges) hi += *std::max_element(e.memory.begin(), e.memory.end());
            p.memory_limit = lo + 0.6 * (hi - lo);
        }
        SCOPED_TRACE(fmt::format("trial {}: {} nodes, {} edges, limit {}", trial, nodes,
                                 p.edges.size(), p.memory_limit));
        ShardSolution brute;
        try {
            brute = solve_shard_brute_force(p);
        } catch (const ValueError&) {
            EXPECT_THROW(solve_shard_ilp(p, 30), ValueError);
            continue;
        }
        auto ilp = solve_shard_ilp(p, 30, 1);
        ASSERT_FALSE(ilp.empty());
        EXPECT_TRUE(ilp[0].optimal);
        EXPECT_NEAR(ilp[0].objective, brute.objective, 1e-9 * brute.objective + 1e-15);
        EXPECT_DOUBLE_EQ(p.objective(ilp[0].choice), ilp[0].objective);
        if (p.memory_limit > 0) {
            EXPECT_LE(ilp[0].memory, p.memory_limit + 1e-9);
        }
        if (ilp.size() > 1) {
            EXPECT_NE(ilp[1].choice, ilp[0].choice);
            EXPECT_GE(ilp[1].objective, ilp[0].objective * (1 - 1e-9));
        }
    }
}

TEST_F(AutoShardTest, IlpRefusesAMemoryLimitNoPlanFitsNamingTheLeastNeed) {
    ShardProblem p;
    p.nodes = {{"a", {1, 2}, {10, 20}}, {"b", {1}, {5}}};
    p.memory_limit = 12;
    try {
        solve_shard_ilp(p, 10);
        FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("no plan needs less than 15 bytes"), std::string::npos)
            << e.what();
    }
}

TEST_F(AutoShardTest, ReshardingBetweenAnyTwoPlacementsOnATwoByTwoMeshKeepsTheTensor) {
    Mesh mesh({2, 2}, {"x", "y"});
    TensorShape shape{8, 12};
    std::vector<Placement> one_axis = {Replicate{}, Shard{0}, Shard{1}};
    std::vector<MeshPlacement> all;
    for (auto& a : one_axis)
        for (auto& b : one_axis) all.push_back({a, b});
    std::mt19937 rng(5);
    Tensor x = random_tensor(shape, dtype::Float32(), rng);
    for (auto& from : all)
        for (auto& to : all) {
            SCOPED_TRACE(mesh_placement_name(from) + " -> " + mesh_placement_name(to));
            auto steps = reshard_steps(shape, from, to, mesh.shape());
            if (from == to) {
                EXPECT_TRUE(steps.empty());
            }
            Pmap f(
                [&](SpmdContext& ctx, const SymbolVarArray& a) -> SymbolVarArray {
                    return {reshard(a[0], steps, ctx.groups())};
                },
                mesh, {{"x", shape, dtype::Float32(), mesh_placement_spec(2, from, mesh.shape())}},
                {mesh_placement_spec(2, to, mesh.shape())});
            auto out = f({x});
            expect_tensor_near(out.at(0), x, 0, 0, "resharded");
        }
}

TEST_F(AutoShardTest, PlansOfSmallGraphsAreTheBruteForceOptimaOfTheirProblems) {
    // The MLP (10 operators) on 1-d meshes, and its first layer (6 operators) on a 2x2 mesh,
    // at sizes where some plans split and others replicate.
    struct Case {
        std::vector<uint32_t> shape;
        std::vector<std::string> names;
        bool first_layer_only;
    };
    for (auto& c :
         {Case{{2}, {"x"}, false}, Case{{3}, {"x"}, false}, Case{{2, 2}, {"x", "y"}, true}}) {
        for (size_t width : {24, 192}) {
            Mesh mesh(c.shape, c.names);
            SCOPED_TRACE(fmt::format("{}, width {}", mesh.to_string(), width));
            auto graph = ComputingGraph::make();
            auto model = test::build_auto_shard_mlp(*graph, 48, width, 4 * width);
            SymbolVarArray outputs = model.outputs;
            if (c.first_layer_only) {
                // gelu(x W1 + b1): the first layer's output.
                OperatorNode* gelu = nullptr;
                for (auto& o : graph->operators())
                    if (std::string(o->type_name()) == "Elemwise" &&
                        o->output(0)->shape()[1] == 4 * width)
                        gelu = o.get();
                outputs = {SymbolVar(gelu->output(0))};
            }
            AutoSharder planner(outputs, mesh);
            ASSERT_LE(planner.nr_operators(), 12u);
            ShardPlan plan = planner.solve();
            ShardSolution brute = solve_shard_brute_force(planner.problem());
            EXPECT_TRUE(plan.optimal);
            EXPECT_NEAR(plan.predicted_s, brute.objective, 1e-12 + 1e-9 * brute.objective)
                << plan.to_string();
        }
    }
}

namespace {

//! Runs the plan on the mesh (ranks as threads) and returns the outputs.
std::vector<Tensor> run_plan(const AutoSharder& planner, const ShardPlan& plan,
                             const std::vector<Tensor>& inputs) {
    std::vector<ShardingSpec> out_specs;
    for (auto& out : planner.outputs())
        out_specs.push_back(mesh_placement_spec(
            out.shape().ndim(), replicated_placement(plan.mesh.ndim()), plan.mesh.shape()));
    Pmap f(lower_plan(planner, plan), plan.mesh, plan.args, out_specs);
    return f(inputs);
}

std::vector<Tensor> run_one_device(const SymbolVarArray& outputs, const std::vector<Tensor>& inputs,
                                   const std::vector<std::string>& names) {
    auto exec = outputs[0].node()->owner()->graph()->compile(
        std::vector<OutputSpec>(outputs.begin(), outputs.end()));
    for (size_t i = 0; i < inputs.size(); ++i) exec->feed(names[i], inputs[i]);
    exec->run();
    std::vector<Tensor> res;
    for (size_t i = 0; i < outputs.size(); ++i) res.push_back(exec->output(i));
    return res;
}

struct MeshCase {
    std::vector<uint32_t> shape;
    std::vector<std::string> names;
};

const std::vector<MeshCase> kMeshes = {
    {{1, 2}, {"dp", "tp"}}, {{2, 1}, {"dp", "tp"}}, {{2, 2}, {"dp", "tp"}}, {{1, 3}, {"dp", "tp"}}};

void check_model_on_meshes(const std::function<test::AutoShardModel(ComputingGraph&)>& build) {
    for (auto& mc : kMeshes) {
        Mesh mesh(mc.shape, mc.names);
        SCOPED_TRACE(mesh.to_string());
        auto graph = ComputingGraph::make();
        auto model = build(*graph);
        AutoSharder planner(model.outputs, mesh);
        ShardPlan plan = planner.solve();
        ShardPlan dp = planner.plan_where(test::data_parallel_placement(mesh));
        ShardPlan megatron = planner.plan_where(test::megatron_placement(mesh, "dp", "tp"));
        EXPECT_LE(plan.predicted_s, dp.predicted_s * (1 + 1e-9)) << plan.to_string();
        EXPECT_LE(plan.predicted_s, megatron.predicted_s * (1 + 1e-9)) << plan.to_string();

        std::mt19937 rng(3);
        std::vector<Tensor> inputs;
        for (auto& arg : plan.args)
            inputs.push_back(random_tensor(arg.global_shape, arg.dtype, rng));
        std::vector<std::string> names;
        for (auto& arg : plan.args) names.push_back(arg.name);
        auto expected = run_one_device(model.outputs, inputs, names);
        for (const ShardPlan* p : {&plan, &dp, &megatron}) {
            auto got = run_plan(planner, *p, inputs);
            ASSERT_EQ(got.size(), expected.size());
            for (size_t i = 0; i < got.size(); ++i)
                expect_tensor_near(got[i], expected[i], 1e-5, 1e-5, "output");
        }
    }
}

} // namespace

TEST_F(AutoShardTest, MlpPlansOnFourMeshesGiveOneDeviceResultsAndBeatHandWrittenPlans) {
    check_model_on_meshes(
        [](ComputingGraph& g) { return test::build_auto_shard_mlp(g, 96, 192, 768); });
}

TEST_F(AutoShardTest,
       TransformerBlockPlansOnFourMeshesGiveOneDeviceResultsAndBeatHandWrittenPlans) {
    check_model_on_meshes([](ComputingGraph& g) {
        return test::build_auto_shard_transformer(g, /*batch=*/12, /*seq=*/16, /*d=*/48,
                                                  /*heads=*/6, /*d_ff=*/192);
    });
}

namespace {

//! Five SGD steps of `build`'s model on every mesh: the automatic plan's parameters after them
//! equal one device's within 1e-5, as do data parallelism's and Megatron's (propagated from its
//! parameter splits), and it is predicted no slower than either.
void check_training_on_meshes(const std::function<test::AutoShardModel(ComputingGraph&)>& build,
                              size_t rows) {
    for (auto& mc : kMeshes) {
        Mesh mesh(mc.shape, mc.names);
        SCOPED_TRACE(mesh.to_string());
        auto graph = ComputingGraph::make();
        auto step = test::training_step(*graph, build(*graph), 0.05f);
        AutoSharder planner(step, mesh);
        ShardPlan plan = planner.solve();
        ShardPlan dp = planner.plan_where(test::data_parallel_training_placement(mesh, rows));
        ShardPlan megatron = planner.plan_propagated(test::megatron_annotations(mesh, "dp", "tp"));
        EXPECT_LE(plan.predicted_s, dp.predicted_s * (1 + 1e-9)) << plan.to_string();
        EXPECT_LE(plan.predicted_s, megatron.predicted_s * (1 + 1e-9)) << plan.to_string();

        std::mt19937 rng(8);
        std::vector<Tensor> inputs{
            random_tensor(plan.args.at(0).global_shape, dtype::Float32(), rng)};
        // The ranks' parameters are their own copies, taken now, before one device trains the
        // graph's own.
        std::vector<ShardingSpec> out_specs;
        for (auto& out : planner.outputs())
            out_specs.push_back(mesh_placement_spec(
                out.shape().ndim(), replicated_placement(mesh.ndim()), mesh.shape()));
        for (const ShardPlan* p : {&plan, &dp, &megatron}) {
            Pmap f(lower_plan(planner, *p), mesh, p->args, out_specs);
            std::vector<Tensor> got;
            for (int s = 0; s < 5; ++s) got = f(inputs);
            auto exec = graph->compile(std::vector<OutputSpec>(step.begin(), step.end()));
            exec->feed("x", inputs[0]);
            // One device trains copies of the parameters too: restore them afterwards.
            std::vector<std::pair<std::shared_ptr<Tensor>, Tensor>> saved;
            for (auto& o : graph->operators())
                if (std::string(o->type_name()) == "SharedParam") {
                    auto t = static_cast<opr::SharedParam&>(*o).param();
                    Tensor copy(t->shape(), t->dtype());
                    std::memcpy(copy.raw_ptr(), t->raw_ptr(), t->nr_bytes());
                    saved.push_back({t, copy});
                }
            for (int s = 0; s < 5; ++s) exec->run();
            for (size_t i = 0; i < step.size(); ++i)
                expect_tensor_near(got.at(i), exec->output(i), 1e-5, 1e-5,
                                   fmt::format("output {} after 5 steps", i));
            for (auto& [t, copy] : saved) std::memcpy(t->raw_ptr(), copy.raw_ptr(), t->nr_bytes());
        }
    }
}

} // namespace

TEST_F(AutoShardTest, MlpTrainingPlansOnFourMeshesMatchOneDeviceAfterFiveSteps) {
    check_training_on_meshes(
        [](ComputingGraph& g) { return test::build_auto_shard_mlp(g, 96, 192, 768); }, 96);
}

TEST_F(AutoShardTest, TransformerTrainingPlansOnFourMeshesMatchOneDeviceAfterFiveSteps) {
    check_training_on_meshes(
        [](ComputingGraph& g) { return test::build_auto_shard_transformer(g, 12, 16, 48, 6, 192); },
        12 * 16);
}

TEST_F(AutoShardTest, ConvolutionAndEmbeddingPlansGiveOneDeviceResults) {
    // conv 3x3 (8 -> 16 channels) -> relu -> conv 1x1 (16 -> 8) on x {4, 8, 12, 12}; and an
    // embedding of 24 ids from a {50, 32} table through a {32, 16} linear layer.
    std::mt19937 rng(21);
    auto param = [&](ComputingGraph& g, const TensorShape& shape, const char* name) {
        return opr::SharedParam::make(
            g, std::make_shared<Tensor>(random_tensor(shape, dtype::Float32(), rng)), name);
    };
    for (auto shape : {std::vector<uint32_t>{2}, std::vector<uint32_t>{2, 2}}) {
        Mesh mesh(shape, shape.size() == 1 ? std::vector<std::string>{"x"}
                                           : std::vector<std::string>{"x", "y"});
        SCOPED_TRACE(mesh.to_string());
        auto g = ComputingGraph::make();
        auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 8, 12, 12});
        opr::Conv2dParam pad;
        pad.pad_h = pad.pad_w = 1;
        auto h = opr::relu(opr::Conv2d::make(x, param(*g, {16, 8, 3, 3}, "c1.w"), pad));
        auto y = opr::Conv2d::make(h, param(*g, {8, 16, 1, 1}, "c2.w"));
        auto ids = opr::Input::make(*g, "ids", dtype::Int32(), {24});
        auto e = opr::matmul(opr::embedding(param(*g, {50, 32}, "table"), ids),
                             param(*g, {32, 16}, "proj.w"));
        AutoSharder planner({y, e}, mesh);
        ShardPlan plan = planner.solve();
        bool split_conv = false;
        for (auto& c : plan.operators)
            if (std::string(c.opr->type_name()) == "Conv2d" && c.strategy.name != "replicated")
                split_conv = true;
        EXPECT_TRUE(split_conv) << plan.to_string();
        Tensor xv = random_tensor({4, 8, 12, 12}, dtype::Float32(), rng);
        Tensor idv({24}, dtype::Int32());
        for (int i = 0; i < 24; ++i) idv.ptr<int32_t>()[i] = (i * 7) % 50;
        std::vector<Tensor> inputs;
        for (auto& a : plan.args) inputs.push_back(a.name == "x" ? xv : idv);
        std::vector<std::string> names;
        for (auto& a : plan.args) names.push_back(a.name);
        auto expected = run_one_device({y, e}, inputs, names);
        // Sums of 72 products of values in [-1, 1): a split sum rounds differently, by up to
        // about 72 ulps of the terms.
        const double atol = 5e-5;
        auto got = run_plan(planner, plan, inputs);
        for (size_t i = 0; i < 2; ++i) expect_tensor_near(got[i], expected[i], 1e-5, atol, "out");
        // Every strategy of the convolution, forced, gives the same results too.
        for (auto split : {"n", "o", "c"}) {
            ShardPlan forced = planner.plan_where([&](const OperatorNode& o) {
                MeshPlacement p = replicated_placement(mesh.ndim());
                if (std::string(o.type_name()) != "Conv2d") return p;
                p[0] = std::string(split) == "n"   ? Placement{Shard{0}}
                       : std::string(split) == "o" ? Placement{Shard{1}}
                                                   : Placement{Partial{}};
                return p;
            });
            auto f = run_plan(planner, forced, inputs);
            for (size_t i = 0; i < 2; ++i)
                expect_tensor_near(f[i], expected[i], 1e-5, atol,
                                   std::string("conv split ") + split);
        }
    }
}

TEST_F(AutoShardTest, MergingFollowersAndParametersShrinksTheIlpAndKeepsTheResults) {
    Mesh mesh({2, 2}, {"dp", "tp"});
    auto graph = ComputingGraph::make();
    auto model = test::build_auto_shard_transformer(*graph, 12, 16, 48, 6, 192);
    AutoShardOptions merged;
    merged.merge_followers = true;
    AutoSharder whole(model.outputs, mesh), planner(model.outputs, mesh, merged);
    EXPECT_EQ(whole.problem().nodes.size(), whole.nr_operators());
    EXPECT_LT(planner.problem().nodes.size(), whole.nr_operators() / 2);
    ShardPlan plan = planner.solve(), best = whole.solve();
    // Merging restricts the space: never better than the whole problem's optimum.
    EXPECT_GE(plan.predicted_s, best.predicted_s * (1 - 1e-9));
    std::mt19937 rng(4);
    std::vector<Tensor> inputs{random_tensor(plan.args.at(0).global_shape, dtype::Float32(), rng)};
    auto expected = run_one_device(model.outputs, inputs, {"x"});
    expect_tensor_near(run_plan(planner, plan, inputs).at(0), expected.at(0), 1e-5, 1e-5, "output");
}

TEST_F(AutoShardTest, AMemoryLimitBelowDataParallelismsNeedGivesAPlanThatFitsAndRuns) {
    Mesh mesh({2}, {"tp"});
    auto graph = ComputingGraph::make();
    auto model = test::build_auto_shard_mlp(*graph, 8, 64, 512);
    AutoSharder unlimited(model.outputs, mesh);
    ShardPlan dp = unlimited.plan_where(test::data_parallel_placement(mesh));
    AutoShardOptions options;
    options.memory_limit = size_t(dp.memory_bytes * 0.7);
    AutoSharder planner(model.outputs, mesh, options);
    ShardPlan plan = planner.solve();
    EXPECT_LE(plan.memory_bytes, double(options.memory_limit)) << plan.to_string();

    std::mt19937 rng(9);
    std::vector<Tensor> inputs{random_tensor(plan.args.at(0).global_shape, dtype::Float32(), rng)};
    std::vector<ShardingSpec> out_specs{mesh_placement_spec(2, replicated_placement(1), {2})};
    Pmap f(lower_plan(planner, plan), mesh, plan.args, out_specs);
    auto got = f(inputs);
    auto expected = run_one_device(model.outputs, inputs, {plan.args[0].name});
    expect_tensor_near(got.at(0), expected.at(0), 1e-5, 1e-5, "output");
    // The static plan of every rank: its arena and parameters within the limit.
    for (auto& r : f.plan().ranks)
        EXPECT_LE(r.arena_bytes + r.param_bytes, options.memory_limit) << "rank " << r.rank;

    options.memory_limit = 1000; // below even the parameters' shards
    AutoSharder impossible(model.outputs, mesh, options);
    EXPECT_THROW(impossible.solve(), ValueError);
}
