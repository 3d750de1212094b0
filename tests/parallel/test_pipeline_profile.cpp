// Stage profiles (parallel/pipeline_profile.h) read from the static memory plans, and the
// automatic partition: Alpa's DP against brute force, its memory limit, and an unbalanced
// model where it beats the equal-layer split.
#include "parallel/pipeline_profile.h"

#include "parallel/pipeline_model.h"

#include "braid.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>

using namespace braid;
using namespace braid::parallel;

namespace {

PipelineOptions options(const PipelineModel& m, uint32_t stages, uint32_t microbatches) {
    PipelineOptions o;
    o.stage_begin = equal_layer_split(m.layers.size(), stages);
    o.microbatches = microbatches;
    o.schedule = PipelineSchedule::ONE_F_ONE_B;
    o.optimizer.lr = 0.01f;
    o.batch = 8 * microbatches;
    return o;
}

size_t param_bytes(const PipelineModel& m, size_t first, size_t end) {
    size_t bytes = 0;
    for (size_t l = first; l < end; ++l)
        for (auto& p : m.layers[l].params) bytes += p->nr_bytes();
    return bytes;
}

//! Brute force over every split: the least objective within the memory limit.
double best_objective(const std::vector<LayerProfile>& layers, uint32_t stages, uint32_t b,
                      size_t limit) {
    double best = std::numeric_limits<double>::infinity();
    std::vector<size_t> begin{0};
    std::function<void(size_t)> go = [&](size_t next) {
        if (begin.size() == stages) {
            for (size_t s = 0; s < stages; ++s) {
                size_t end = s + 1 < stages ? begin[s + 1] : layers.size(), mem = 0;
                for (size_t l = begin[s]; l < end; ++l) mem += layers[l].memory;
                if (limit && mem > limit) return;
            }
            best = std::min(best, partition_objective(layers, begin, b));
            return;
        }
        for (size_t a = next; a < layers.size(); ++a) {
            begin.push_back(a);
            go(a + 1);
            begin.pop_back();
        }
    };
    go(1);
    return best;
}

} // namespace

TEST(PipelineProfile, ModulesFollowTheMemoryPlanAndAlpasIdentity) {
    register_all_operators();
    auto model = pipeline_mlp_model({8, 16, 16, 16, 4}, 5);
    PipelineTrainer t(model, options(model, 2, 4));
    for (uint32_t i = 0; i < 2; ++i) {
        auto p = profile_stage(t.stage(i), "1f1b");
        ASSERT_EQ(p.modules.size(), 3u);
        size_t params = param_bytes(model, t.stage(i).first_layer, t.stage(i).end_layer);
        EXPECT_EQ(p.initial_var_size, params);
        auto &fwd = p.modules[0], &bwd = p.modules[1];
        EXPECT_EQ(fwd.name, fmt::format("stage_{}_forward", i));
        // The forward reads the parameters and donates nothing.
        EXPECT_GE(fwd.input_bytes, params);
        EXPECT_EQ(fwd.donated_bytes, 0u);
        EXPECT_GT(fwd.output_bytes, 0u); // activations kept for the backward
        // The backward adds into the accumulators in place: every one is donated (on the last
        // stage also the running loss sum, a float32 {1}).
        bool last = i == 1;
        EXPECT_EQ(bwd.donated_bytes, params + (last ? 4 : 0)) << "stage " << i;
        EXPECT_EQ(bwd.nr_donated, 2 * (t.stage(i).end_layer - t.stage(i).first_layer) + last);
        for (auto& m : p.modules)
            EXPECT_EQ(m.peak_memory + m.donated_bytes,
                      m.input_bytes + m.output_bytes + m.temp_buffer_size)
                << m.name;
    }
    std::vector<StageProfile> profiles{profile_stage(t.stage(0)), profile_stage(t.stage(1))};
    Tensor x({32, 8}, dtype::Float32()), y({32, 4}, dtype::Float32());
    for (size_t k = 0; k < x.shape().total_nr_elems(); ++k) x.ptr<float>()[k] = 0.1f;
    for (size_t k = 0; k < y.shape().total_nr_elems(); ++k) y.ptr<float>()[k] = 0.2f;
    measure_compute_cost(t, x, y, 2, profiles);
    for (auto& p : profiles)
        for (auto& m : p.modules) EXPECT_GT(m.compute_cost, 0) << m.name;
    auto json = stage_profiles_json(profiles);
    EXPECT_NE(json.find("\"name\":\"stage_1_backward\""), std::string::npos) << json;
    EXPECT_NE(stage_profile_table(profiles).find("stage_0_apply_grad"), std::string::npos);
}

TEST(PipelinePartition, DynamicProgramFindsTheBestSplitWithinTheMemoryLimit) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> t(0.1, 5.0);
    std::uniform_int_distribution<size_t> mem(1, 100);
    for (int c = 0; c < 60; ++c) {
        size_t n = 3 + size_t(c % 7);
        std::vector<LayerProfile> layers(n);
        for (auto& l : layers) l = {t(rng), mem(rng)};
        uint32_t stages = 1 + uint32_t(c % 4), b = 1u << (c % 4);
        if (stages > n) continue;
        size_t limit = c % 3 == 0 ? 0 : 150;
        double expected = best_objective(layers, stages, b, limit);
        if (expected == std::numeric_limits<double>::infinity()) {
            EXPECT_THROW(auto_partition(layers, stages, b, limit), ValueError);
            continue;
        }
        auto p = auto_partition(layers, stages, b, limit);
        EXPECT_NEAR(p.objective, expected, 1e-9) << "case " << c;
        ASSERT_EQ(p.stage_begin.size(), stages);
        EXPECT_EQ(p.stage_begin[0], 0u);
    }
}

TEST(PipelinePartition, BeatsTheEqualLayerSplitOnAnUnbalancedModel) {
    register_all_operators();
    // Two wide layers first, then six narrow ones: an equal split puts both wide ones on
    // stage 0.
    auto model = pipeline_mlp_model({32, 256, 256, 16, 16, 16, 16, 16, 16, 4}, 9);
    auto layers = profile_layers(model, 16, 5, 2);
    ASSERT_EQ(layers.size(), 9u);
    EXPECT_GT(layers[1].compute_cost, layers[5].compute_cost);
    auto equal = equal_layer_split(9, 2);
    auto best = auto_partition(layers, 2, 4);
    EXPECT_LT(best.objective, partition_objective(layers, equal, 4));
    EXPECT_LT(best.stage_begin[1], equal[1]);
    // A limit below the two wide layers' memory separates them.
    size_t wide = layers[0].memory + layers[1].memory;
    auto limited = auto_partition(layers, 2, 4, wide - 1);
    EXPECT_EQ(limited.stage_begin[1], 1u);
}
