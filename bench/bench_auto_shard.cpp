// Automatic sharding: how long planning takes, and how the chosen plans run.
//
// Planning: a stack of transformer blocks (24 by default, about 1,000 operators) planned on a
// mesh: operators, ILP nodes and edges after merging followers, and the seconds from the graph
// to the plan (analysis, costs, ILP). The target is under 30 s for 1,000 operators.
//
// Plans: the Megatron MLP and one transformer block on each mesh, forward and as training steps
// (SGD), with operator costs measured
// on one device: the automatic plan against pure data parallelism and the Megatron plan
// (parallel/tensor_parallel.h's split, over the "tp" axis, data parallel over "dp"), where the
// model admits them, each predicted by the same cost model and measured (ranks as threads of
// this process, median step time), with the ratios auto / best hand-written plan in the same
// run, and which hand-written plan the automatic one is, if any.
//
//     bench_auto_shard [--json] [--blocks 24] [--mesh dp=2,tp=2] [--iterations 50] [--skip-plans]
//     [--merge auto|on|off]
#include "auto_shard_models.h"
#include "base/cpu_isa.h"
#include "bench/bench_cli.h"
#include "braid.h"
#include "parallel/auto_shard.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

using namespace braid;
using namespace braid::parallel;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

//! A plan ready to run on its mesh (ranks as threads) with random inputs.
struct RunnablePlan {
    std::unique_ptr<Pmap> pmap;
    std::vector<Tensor> inputs;
    std::vector<double> times;

    RunnablePlan(const AutoSharder& planner, const ShardPlan& plan) {
        std::vector<ShardingSpec> out_specs;
        for (auto& out : planner.outputs())
            out_specs.push_back(mesh_placement_spec(
                out.shape().ndim(), replicated_placement(plan.mesh.ndim()), plan.mesh.shape()));
        pmap = std::make_unique<Pmap>(lower_plan(planner, plan), plan.mesh, plan.args, out_specs);
        std::mt19937 rng(1);
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        for (auto& a : plan.args) {
            Tensor t(a.global_shape, a.dtype);
            for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) t.ptr<float>()[i] = u(rng);
            inputs.push_back(t);
        }
        (*pmap)(inputs); // warm-up
    }
    void step() {
        auto t0 = Clock::now();
        (*pmap)(inputs);
        times.push_back(seconds_since(t0));
    }
    double median() {
        std::sort(times.begin(), times.end());
        return times[times.size() / 2];
    }
};

bool same_strategies(const ShardPlan& a, const ShardPlan& b) {
    for (size_t i = 0; i < a.operators.size(); ++i)
        if (a.operators[i].strategy.split != b.operators[i].strategy.split) return false;
    return true;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"Automatic sharding: planning time and plans against hand-written ones"};
    bool json = false, skip_plans = false;
    size_t blocks = 24;
    std::string mesh_arg = "dp=2,tp=2";
    int iterations = 50;
    app.add_flag("--json", json, "One JSON object per line");
    app.add_option("--blocks", blocks, "Transformer blocks of the planning case");
    app.add_option("--mesh", mesh_arg, "Mesh of the planning case (e.g. dp=2,tp=2)");
    app.add_option("--iterations", iterations, "Measured steps per plan");
    app.add_flag("--skip-plans", skip_plans, "Only the planning case");
    std::string merge = "auto";
    app.add_option("--merge", merge, "Planning case: merge followers (auto, on, off)")
        ->check(CLI::IsMember({"auto", "on", "off"}));
    if (auto rc = bench::parse_command_line(app, argc, argv)) return *rc;
    register_all_operators();
    if (json)
        std::printf("{\"cpu\":\"%s\"}\n", cpu_model_name().c_str());
    else
        std::printf("CPU: %s\n", cpu_model_name().c_str());

    {
        Mesh mesh = parse_mesh(mesh_arg);
        auto g = ComputingGraph::make();
        SymbolVar x;
        for (size_t b = 0; b < blocks; ++b)
            x = test::build_auto_shard_transformer(*g, 8, 64, 256, 8, 1024, fmt::format("b{}.", b),
                                                   x)
                    .outputs[0];
        AutoShardOptions options;
        if (merge != "auto") options.merge_followers = merge == "on";
        auto t0 = Clock::now();
        AutoSharder planner({x}, mesh, options);
        double analysis = seconds_since(t0);
        ShardPlan plan = planner.solve();
        double total = seconds_since(t0);
        if (json)
            std::printf("{\"case\":\"planning\",\"blocks\":%zu,\"mesh\":\"%s\",\"operators\":%zu,"
                        "\"ilp_nodes\":%zu,\"ilp_edges\":%zu,\"analysis_s\":%.3f,\"total_s\":%.3f,"
                        "\"optimal\":%s,\"predicted_ms\":%.4f}\n",
                        blocks, mesh.to_string().c_str(), planner.nr_operators(), plan.ilp_nodes,
                        plan.ilp_edges, analysis, total, plan.optimal ? "true" : "false",
                        plan.predicted_s * 1e3);
        else
            std::printf("planning: %zu transformer blocks on %s: %zu operators -> ILP %zu nodes, "
                        "%zu edges; %.2f s (analysis %.2f s), %s, predicted step %.3f ms (target: "
                        "under 30 s)\n",
                        blocks, mesh.to_string().c_str(), planner.nr_operators(), plan.ilp_nodes,
                        plan.ilp_edges, total, analysis,
                        plan.optimal ? "optimal" : "best found at the time limit",
                        plan.predicted_s * 1e3);
    }
    if (skip_plans) return 0;

    struct Model {
        const char* name;
        std::function<SymbolVarArray(ComputingGraph&)> build;
        size_t training_rows = 0; //!< a training step's batch rows; 0: inference
    };
    auto forward = [](auto build) {
        return [build](ComputingGraph& g) { return build(g).outputs; };
    };
    auto training = [](auto build) {
        return [build](ComputingGraph& g) { return test::training_step(g, build(g), 0.01f); };
    };
    auto mlp = [](ComputingGraph& g) { return test::build_auto_shard_mlp(g, 192, 384, 1536); };
    auto block = [](ComputingGraph& g) {
        return test::build_auto_shard_transformer(g, 12, 32, 192, 6, 768);
    };
    // Batches of 12 sequences (data parallelism splits them), one long sequence, which data
    // parallelism cannot split (causal attention needs it whole), and training steps.
    std::vector<Model> models = {{"mlp", forward(mlp)},
                                 {"transformer_block", forward(block)},
                                 {"transformer_seq384", forward([](ComputingGraph& g) {
                                      return test::build_auto_shard_transformer(g, 1, 384, 192, 6,
                                                                                768);
                                  })},
                                 {"mlp_training", training(mlp), 192},
                                 {"transformer_training", training(block), 12 * 32}};
    for (auto& m : models)
        for (std::string ms : {"dp=1,tp=2", "dp=2,tp=1", "dp=2,tp=2", "dp=1,tp=3"}) {
            Mesh mesh = parse_mesh(ms);
            auto g = ComputingGraph::make();
            SymbolVarArray model = m.build(*g);
            AutoShardOptions options;
            options.costs = AutoShardOptions::Costs::MEASURED;
            AutoSharder planner(model, mesh, options);
            // The automatic plan and the hand-written ones that the model admits (for
            // training, Megatron's parameter splits propagated through the backward pass).
            std::vector<std::pair<std::string, ShardPlan>> plans = {{"auto", planner.solve()}};
            auto add = [&](const char* name, auto make) {
                try {
                    plans.push_back({name, make()});
                } catch (const ValueError&) {
                }
            };
            if (m.training_rows) {
                add("dp", [&] {
                    return planner.plan_where(
                        test::data_parallel_training_placement(mesh, m.training_rows));
                });
                if (mesh.axis_size("tp") > 1)
                    add("megatron", [&] {
                        return planner.plan_propagated(
                            test::megatron_annotations(mesh, "dp", "tp"));
                    });
            } else {
                add("dp", [&] { return planner.plan_where(test::data_parallel_placement(mesh)); });
                add("megatron",
                    [&] { return planner.plan_where(test::megatron_placement(mesh, "dp", "tp")); });
            }
            // The plans in turn, step by step, so that a slow spell of the machine falls on
            // all of them.
            std::vector<std::unique_ptr<RunnablePlan>> runs;
            for (auto& [name, plan] : plans)
                runs.push_back(std::make_unique<RunnablePlan>(planner, plan));
            // The order rotates each round, so no plan always runs first.
            for (int i = 0; i < iterations; ++i)
                for (size_t k = 0; k < runs.size(); ++k) runs[(i + k) % runs.size()]->step();
            double best_pred = 1e300, best_meas = 1e300;
            std::string same = "neither", predicted, measured;
            for (size_t k = 0; k < plans.size(); ++k) {
                double t = runs[k]->median();
                predicted += fmt::format("{}{} {:.3f}", k ? ", " : "", plans[k].first,
                                         plans[k].second.predicted_s * 1e3);
                measured += fmt::format("{}{} {:.3f}", k ? ", " : "", plans[k].first, t * 1e3);
                if (k == 0) continue;
                best_pred = std::min(best_pred, plans[k].second.predicted_s);
                best_meas = std::min(best_meas, t);
                if (same == "neither" && same_strategies(plans[0].second, plans[k].second))
                    same = plans[k].first;
            }
            // No hand-written plan fits the model: no ratio (0).
            double pred_ratio = plans.size() > 1 ? plans[0].second.predicted_s / best_pred : 0;
            double meas_ratio = plans.size() > 1 ? runs[0]->median() / best_meas : 0;
            if (json)
                std::printf("{\"case\":\"%s\",\"mesh\":\"%s\",\"predicted_ms\":\"%s\","
                            "\"measured_ms\":\"%s\",\"predicted_ratio\":%.3f,"
                            "\"measured_ratio\":%.3f,\"auto_is\":\"%s\"}\n",
                            m.name, ms.c_str(), predicted.c_str(), measured.c_str(), pred_ratio,
                            meas_ratio, same.c_str());
            else
                std::printf("%-20s %-9s predicted ms: %s (ratio %.2f) | measured ms: %s (ratio "
                            "%.2f); auto = %s\n",
                            m.name, ms.c_str(), predicted.c_str(), pred_ratio, measured.c_str(),
                            meas_ratio, same.c_str());
        }
    return 0;
}
