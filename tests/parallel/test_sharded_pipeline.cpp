// Pipelines of sharded stages (parallel/sharded_pipeline.h): stages of 1, 2 and 3 ranks, under
// both schedules, train exactly as one device does on the whole batch (losses and parameters
// after five steps within 1e-5); the stages of several ranks really split their operators; the
// inter-operator pass's own choice of stages and devices runs; merging followers plans a stage
// about as well as the whole ILP; bad options are named.
#include "parallel/sharded_pipeline.h"

#include "parallel/pipeline_model.h"
#include "parallel/stage_sharding.h"

#include "braid.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>

using namespace braid;
using namespace braid::parallel;

namespace {

constexpr size_t kBatch = 16;
constexpr int kSteps = 5;

//! Four dense layers whose widths split over 2 ranks.
PipelineModel model4() {
    register_all_operators();
    setenv("BRAID_COMM_TIMEOUT", "60", /*overwrite=*/0);
    return pipeline_mlp_model({8, 16, 32, 16, 4}, 5);
}

opr::OptimizerConfig sgd() {
    opr::OptimizerConfig c;
    c.lr = 0.05f;
    c.momentum = 0.9f;
    return c;
}

ShardedPipelineOptions options(std::vector<size_t> stage_begin, std::vector<uint32_t> devices,
                               PipelineSchedule schedule, uint32_t microbatches) {
    ShardedPipelineOptions o;
    o.pipeline.stage_begin = std::move(stage_begin);
    o.pipeline.microbatches = microbatches;
    o.pipeline.schedule = schedule;
    o.pipeline.optimizer = sgd();
    o.pipeline.batch = kBatch;
    o.stage_devices = std::move(devices);
    // Communication priced near zero: every split that divides the work is worth it, so the
    // stages of several ranks shard their operators.
    o.sharding.comm.latency_s = 1e-9;
    o.sharding.comm.bytes_per_s = 1e15;
    return o;
}

//! Trains with `o` and with one device; both must agree after kSteps steps.
void expect_trains_as_one_device(const ShardedPipelineOptions& o) {
    auto model = model4();
    auto reference = clone_model(model);
    auto data = random_batches(model, kSteps, kBatch, 12);
    auto ref_losses = train_on_one_device(reference, data, sgd());
    ShardedPipelineTrainer trainer(model, o);
    for (uint32_t i = 0; i < trainer.nr_stages(); ++i) {
        const ShardPlan* plan = trainer.stage_plan(i);
        ASSERT_EQ(plan != nullptr, o.stage_devices[i] > 1) << "stage " << i;
        if (!plan) continue;
        size_t split_matmuls = 0;
        for (auto& c : plan->operators)
            if (std::string(c.opr->type_name()) == "MatMul" && c.strategy.name != "replicated")
                ++split_matmuls;
        EXPECT_GT(split_matmuls, 0u) << "stage " << i << " split no MatMul:\n" << plan->to_string();
    }
    for (int s = 0; s < kSteps; ++s) {
        double loss = trainer.step(data[s].first, data[s].second);
        EXPECT_NEAR(loss, ref_losses[s], 1e-5 * std::abs(ref_losses[s])) << "step " << s;
    }
    EXPECT_LE(max_relative_difference(model, reference), 1e-5) << trainer.to_string();
    EXPECT_GT(max_relative_difference(model, model4()), 1e-3) << "the model did not train";
}

struct Case {
    std::vector<size_t> stage_begin;
    std::vector<uint32_t> devices;
};

class ShardedPipelineEquality
    : public ::testing::TestWithParam<std::tuple<PipelineSchedule, size_t>> {};

const std::vector<Case> kCases = {
    {{0, 2}, {2, 1}},       // the first stage sharded
    {{0, 2}, {1, 2}},       // the last stage (the loss) sharded
    {{0, 2}, {2, 2}},       // both
    {{0, 1, 3}, {1, 3, 1}}, // a middle stage on 3 ranks (its widths do not divide by 3)
};

} // namespace

TEST_P(ShardedPipelineEquality, StagesOnSeveralRanksTrainAsOneDevice) {
    auto [schedule, k] = GetParam();
    const Case& c = kCases.at(k);
    SCOPED_TRACE(fmt::format("{}, stages at {} on {} rank(s)", pipeline_schedule_name(schedule),
                             fmt::join(c.stage_begin, ","), fmt::join(c.devices, ",")));
    auto o = options(c.stage_begin, c.devices, schedule, 4);
    if (k == 3) {
        // Nothing of the middle stage divides by 3: it runs replicated, and must still agree.
        auto model = model4();
        auto reference = clone_model(model);
        auto data = random_batches(model, kSteps, kBatch, 12);
        auto ref_losses = train_on_one_device(reference, data, sgd());
        ShardedPipelineTrainer trainer(model, o);
        ASSERT_NE(trainer.stage_plan(1), nullptr);
        EXPECT_EQ(trainer.nr_ranks(), 5u);
        for (int s = 0; s < kSteps; ++s)
            EXPECT_NEAR(trainer.step(data[s].first, data[s].second), ref_losses[s],
                        1e-5 * std::abs(ref_losses[s]))
                << "step " << s;
        EXPECT_LE(max_relative_difference(model, reference), 1e-5) << trainer.to_string();
        return;
    }
    expect_trains_as_one_device(o);
}

INSTANTIATE_TEST_SUITE_P(
    SchedulesAndStages, ShardedPipelineEquality,
    ::testing::Combine(::testing::Values(PipelineSchedule::GPIPE, PipelineSchedule::ONE_F_ONE_B),
                       ::testing::Values(size_t(0), size_t(1), size_t(2), size_t(3))),
    [](const auto& info) {
        const Case& c = kCases.at(std::get<1>(info.param));
        return fmt::format("{}_Devices{}",
                           std::get<0>(info.param) == PipelineSchedule::GPIPE ? "GPipe"
                                                                              : "OneFOneB",
                           fmt::join(c.devices, "_"));
    });

TEST(ShardedPipeline, TheInterOperatorPassesChoiceOfStagesAndDevicesRuns) {
    auto model = model4();
    auto o = options({}, {}, PipelineSchedule::ONE_F_ONE_B, 2);
    // Stage costs from the intra-operator ILP on each candidate range and submesh.
    std::map<std::tuple<size_t, size_t, uint32_t>, std::optional<double>> cache;
    auto cost = [&](size_t a, size_t b, uint32_t m) {
        auto key = std::make_tuple(a, b, m);
        if (!cache.count(key))
            cache[key] = sharded_stage_cost(model, a, b, m, kBatch / 2, o.sharding);
        return cache[key];
    };
    SubmeshPartition part = auto_partition_submeshes(model.layers.size(), 3, 2, cost);
    SCOPED_TRACE(fmt::format("stages at {} on {} rank(s)", fmt::join(part.stage_begin, ","),
                             fmt::join(part.stage_devices, ",")));
    o.pipeline.stage_begin = part.stage_begin;
    o.stage_devices = part.stage_devices;
    ASSERT_GT(std::count_if(part.stage_devices.begin(), part.stage_devices.end(),
                            [](uint32_t d) { return d > 1; }),
              0)
        << "the pass gave every stage one device; this test needs a sharded stage";
    auto reference = clone_model(model);
    auto data = random_batches(model, kSteps, kBatch, 12);
    auto ref_losses = train_on_one_device(reference, data, sgd());
    ShardedPipelineTrainer trainer(model, o);
    for (int s = 0; s < kSteps; ++s)
        EXPECT_NEAR(trainer.step(data[s].first, data[s].second), ref_losses[s],
                    1e-5 * std::abs(ref_losses[s]))
            << "step " << s << "\n"
            << trainer.to_string();
    EXPECT_LE(max_relative_difference(model, reference), 1e-5) << trainer.to_string();
}

TEST(ShardedPipeline, StageDevicesThatDoNotMatchTheStagesAreNamed) {
    auto model = model4();
    auto expect_error = [&](const ShardedPipelineOptions& o, const std::string& part) {
        try {
            ShardedPipelineTrainer trainer(model, o);
            ADD_FAILURE() << "no error; expected one with \"" << part << "\"";
        } catch (const ValueError& e) {
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        }
    };
    expect_error(options({0, 2}, {2, 1, 1}, PipelineSchedule::GPIPE, 2),
                 "3 stage device counts for 2 stages");
    expect_error(options({0, 2}, {2, 0}, PipelineSchedule::GPIPE, 2), "stage 1 has no device");
    auto mpi = options({0, 2}, {2, 1}, PipelineSchedule::GPIPE, 2);
    mpi.pipeline.backend = "mpi";
    expect_error(mpi, "backend \"mpi\"");
}

TEST(ShardedPipeline, MergedFollowersPlanAStageAsWellAsTheWholeIlp) {
    // A stage's graph holds many followers of replicated values (the received activations and
    // gradients, once spread). Merging used to split each one where its slice was free and left
    // the resharding to its readers: here plans 2.0-2.2x the whole ILP's optimum.
    auto model = pipeline_mlp_model({16, 64, 64, 64, 64}, 3);
    register_all_operators();
    PipelineOptions po = options({0, 2}, {2, 1}, PipelineSchedule::GPIPE, 4).pipeline;
    po.client = std::make_shared<comm::InProcessGroupClient>();
    for (uint32_t i = 0; i < 2; ++i) {
        PipelineStage st = build_pipeline_stage(model, po, i);
        AutoShardOptions merged, whole;
        merged.merge_followers = true;
        whole.merge_followers = false;
        Mesh mesh({2}, {"x"});
        // The plans name operators of their planners' graphs: keep the planners.
        AutoSharder merged_planner(st.step_outputs, mesh, merged);
        AutoSharder whole_planner(st.step_outputs, mesh, whole);
        ShardPlan a = merged_planner.solve();
        ShardPlan b = whole_planner.solve();
        EXPECT_LT(a.ilp_nodes, b.ilp_nodes) << "stage " << i;
        EXPECT_LE(a.predicted_s, b.predicted_s * 1.05) << "stage " << i << ": merged\n"
                                                       << a.to_string() << "whole\n"
                                                       << b.to_string();
    }
}
