// Pipeline-parallel training (parallel/pipeline.h): stages as threads train exactly as one
// device does on the whole batch, for S = 2, 3, 4 stages, B = 1, 2, 4, 8 micro-batches and
// both schedules; the programs never deadlock; the memory plans keep the activations of at
// most S - i micro-batches on stage i under 1F1B and of all B under GPipe; the gradient
// accumulators are updated in place; a stage that never runs is named by every other.
#include "parallel/pipeline.h"

#include "parallel/pipeline_model.h"

#include "braid.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <random>

using namespace braid;
using namespace braid::parallel;

namespace {

constexpr size_t kBatch = 16;
constexpr int kSteps = 10;

//! 6 dense layers, small enough to sweep every S and B in a second or two.
PipelineModel small_model() {
    register_all_operators();
    return pipeline_mlp_model({8, 12, 10, 12, 10, 12, 4}, 7);
}

opr::OptimizerConfig sgd() {
    opr::OptimizerConfig c;
    c.lr = 0.05f;
    c.momentum = 0.9f;
    return c;
}

PipelineOptions options(uint32_t stages, uint32_t microbatches, PipelineSchedule schedule,
                        size_t nr_layers) {
    PipelineOptions o;
    o.stage_begin = equal_layer_split(nr_layers, stages);
    o.microbatches = microbatches;
    o.schedule = schedule;
    o.optimizer = sgd();
    o.batch = kBatch;
    return o;
}

class PipelineEquality
    : public ::testing::TestWithParam<std::tuple<PipelineSchedule, uint32_t, uint32_t>> {};

} // namespace

TEST(PipelineSchedule, ProgramsNeverDeadlockAndRunEveryTaskOnce) {
    for (auto schedule : {PipelineSchedule::GPIPE, PipelineSchedule::ONE_F_ONE_B})
        for (uint32_t s = 1; s <= 6; ++s)
            for (uint32_t b = 1; b <= 12; ++b) {
                auto programs = pipeline_program(schedule, s, b); // checks itself
                for (uint32_t i = 0; i < s; ++i) {
                    size_t f = 0, bw = 0;
                    for (auto& op : programs[i]) {
                        f += op.kind == PipelineOp::FORWARD;
                        bw += op.kind == PipelineOp::BACKWARD;
                    }
                    EXPECT_EQ(f, b) << "stage " << i;
                    EXPECT_EQ(bw, b) << "stage " << i;
                }
            }
}

TEST(PipelineSchedule, NaiveOneFOneBOrderIsCaughtAsADeadlock) {
    // Stage 1 sends g0 before taking a1 while stage 0 sends a1 before taking g0.
    using Op = PipelineOp;
    std::vector<std::vector<PipelineOp>> programs = {{{Op::FORWARD, 0},
                                                      {Op::SEND_ACTIVATION, 0},
                                                      {Op::FORWARD, 1},
                                                      {Op::SEND_ACTIVATION, 1},
                                                      {Op::RECV_GRAD, 0},
                                                      {Op::BACKWARD, 0},
                                                      {Op::RECV_GRAD, 1},
                                                      {Op::BACKWARD, 1}},
                                                     {{Op::RECV_ACTIVATION, 0},
                                                      {Op::FORWARD, 0},
                                                      {Op::BACKWARD, 0},
                                                      {Op::SEND_GRAD, 0},
                                                      {Op::RECV_ACTIVATION, 1},
                                                      {Op::FORWARD, 1},
                                                      {Op::BACKWARD, 1},
                                                      {Op::SEND_GRAD, 1}}};
    try {
        check_pipeline_program(programs);
        FAIL() << "no deadlock found";
    } catch (const GraphError& e) {
        EXPECT_NE(std::string(e.what()).find("stage 0 at send a1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("stage 1 at send g0"), std::string::npos) << e.what();
    }
}

TEST(PipelineSchedule, OneFOneBKeepsAtMostSMinusIForwardsAhead) {
    for (uint32_t s = 2; s <= 4; ++s)
        for (uint32_t b = 1; b <= 8; ++b)
            for (uint32_t i = 0; i < s; ++i) {
                long in_flight = 0, worst = 0;
                for (auto& t : pipeline_tasks(PipelineSchedule::ONE_F_ONE_B, s, b, i)) {
                    in_flight += t.kind == PipelineOp::FORWARD ? 1 : -1;
                    worst = std::max(worst, in_flight);
                }
                EXPECT_EQ(worst, long(std::min(s - i, b)))
                    << s << " stages, " << b << " mb, stage " << i;
            }
}

TEST_P(PipelineEquality, ParametersAfterTenStepsEqualOneDevice) {
    auto [schedule, stages, microbatches] = GetParam();
    auto model = small_model();
    auto reference = clone_model(model);
    auto data = random_batches(model, kSteps, kBatch, 11);
    auto ref_losses = train_on_one_device(reference, data, sgd());

    PipelineTrainer trainer(model, options(stages, microbatches, schedule, model.layers.size()));
    for (int s = 0; s < kSteps; ++s) {
        double loss = trainer.step(data[s].first, data[s].second);
        EXPECT_NEAR(loss, ref_losses[s], 1e-5 * std::abs(ref_losses[s])) << "step " << s;
    }
    EXPECT_LE(max_relative_difference(model, reference), 1e-5);
    // The model moved: equality is not two untouched copies.
    EXPECT_GT(max_relative_difference(model, small_model()), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    StagesAndMicrobatches, PipelineEquality,
    ::testing::Combine(::testing::Values(PipelineSchedule::GPIPE, PipelineSchedule::ONE_F_ONE_B),
                       ::testing::Values(2u, 3u, 4u), ::testing::Values(1u, 2u, 4u, 8u)),
    [](const auto& info) {
        return fmt::format("{}_S{}_B{}", pipeline_schedule_name(std::get<0>(info.param)),
                           std::get<1>(info.param), std::get<2>(info.param));
    });

TEST(PipelineMemory, OneFOneBHoldsSMinusIMicrobatchesAndGPipeAllB) {
    auto model = small_model();
    for (uint32_t s : {2u, 4u})
        for (uint32_t b : {2u, 4u, 8u}) {
            PipelineTrainer one_f(model, options(s, b, PipelineSchedule::ONE_F_ONE_B, 6));
            PipelineTrainer gpipe(model, options(s, b, PipelineSchedule::GPIPE, 6));
            for (uint32_t i = 0; i < s; ++i) {
                EXPECT_EQ(max_microbatches_in_flight(one_f.stage(i)), std::min(s - i, b))
                    << s << " stages, " << b << " micro-batches, stage " << i;
                EXPECT_EQ(max_microbatches_in_flight(gpipe.stage(i)), b)
                    << s << " stages, " << b << " micro-batches, stage " << i;
                size_t one_f_bytes = one_f.stage(i).step->memory_report().nodes[0].arena_bytes;
                size_t gpipe_bytes = gpipe.stage(i).step->memory_report().nodes[0].arena_bytes;
                EXPECT_LE(one_f_bytes, gpipe_bytes) << "stage " << i;
                if (i == 0 && s < b) {
                    EXPECT_LT(one_f_bytes, gpipe_bytes) << s << " stages, " << b;
                }
            }
        }
}

TEST(PipelineMemory, GradientAccumulatorsAreUpdatedInPlace) {
    auto model = small_model();
    PipelineTrainer t(model, options(2, 4, PipelineSchedule::ONE_F_ONE_B, 6));
    for (uint32_t i = 0; i < 2; ++i) {
        auto& node = t.stage(i).step->memory_report().nodes.at(0);
        // Each of the stage's parameters: 3 adds (B = 4) and the mean, all in place.
        size_t nr_params = 2 * (t.stage(i).end_layer - t.stage(i).first_layer);
        size_t in_place_adds = 0;
        for (auto& p : node.placements)
            if (p.in_place && p.name.find("/b/") != std::string::npos) ++in_place_adds;
        EXPECT_GE(in_place_adds, 3 * nr_params) << "stage " << i << "\n" << node.placements.size();
        EXPECT_EQ(t.stage(i).nr_accumulators, 4 * nr_params);
    }
}

TEST(PipelineFailure, AStageThatNeverRunsIsNamedByEveryOtherWithinTheDeadline) {
    // Before anything is built: a communicator takes its deadline when it is created.
    setenv("BRAID_COMM_TIMEOUT", "1", 1);
    auto model = small_model();
    PipelineTrainer t(model, options(3, 2, PipelineSchedule::ONE_F_ONE_B, 6));
    auto data = random_batches(model, 2, kBatch, 11);
    t.step(data[0].first, data[0].second); // every stage joined its transfers
    auto begin = std::chrono::steady_clock::now();
    try {
        t.step_only(data[1].first, data[1].second, {0, 2}); // stage 1 is dead
        FAIL() << "the step succeeded without stage 1";
    } catch (const Error& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("pipeline stage 0: "), std::string::npos) << msg;
        EXPECT_NE(msg.find("pipeline stage 2: "), std::string::npos) << msg;
        EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    EXPECT_LT(seconds, 10.0);
    unsetenv("BRAID_COMM_TIMEOUT");
}

TEST(PipelineOptions, BadBoundariesAndBatchesAreNamed) {
    auto model = small_model();
    auto o = options(2, 3, PipelineSchedule::GPIPE, 6);
    EXPECT_THROW(PipelineTrainer(model, o), ValueError); // 16 rows, 3 micro-batches
    o = options(2, 2, PipelineSchedule::GPIPE, 6);
    o.stage_begin = {0, 6};
    EXPECT_THROW(PipelineTrainer(model, o), ValueError);
    EXPECT_THROW(parse_pipeline_schedule("zb"), ValueError);
}
