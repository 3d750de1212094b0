// The inter-operator pass with submeshes: Alpa's DP over stage boundaries and device counts
// against brute force over every split, on random stage times and on a pipeline MLP priced by
// the intra-operator ILP.
#include "parallel/stage_sharding.h"

#include "parallel/pipeline_model.h"

#include "braid.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

using namespace braid;
using namespace braid::parallel;

namespace {

//! The least objective over every split of the layers into stages and of the devices among them.
double brute_force(size_t layers, uint32_t devices, uint32_t microbatches,
                   const StageCostFn& cost) {
    double best = std::numeric_limits<double>::infinity();
    // Stage boundaries: a bitmask over the L - 1 gaps; devices: every composition into S parts.
    for (uint32_t mask = 0; mask < (1u << (layers - 1)); ++mask) {
        std::vector<std::pair<size_t, size_t>> stages;
        size_t begin = 0;
        for (size_t gap = 0; gap + 1 < layers; ++gap)
            if (mask & (1u << gap)) {
                stages.push_back({begin, gap + 1});
                begin = gap + 1;
            }
        stages.push_back({begin, layers});
        size_t s = stages.size();
        if (s > devices) continue;
        std::vector<uint32_t> parts(s, 1);
        std::function<void(size_t, uint32_t)> assign = [&](size_t i, uint32_t left) {
            if (i + 1 == s) {
                parts[i] = left;
                double sum = 0, worst = 0;
                for (size_t k = 0; k < s; ++k) {
                    auto t = cost(stages[k].first, stages[k].second, parts[k]);
                    if (!t) return;
                    sum += *t;
                    worst = std::max(worst, *t);
                }
                best = std::min(best, sum + double(microbatches - 1) * worst);
                return;
            }
            for (uint32_t m = 1; m + (s - i - 1) <= left; ++m) {
                parts[i] = m;
                assign(i + 1, left - m);
            }
        };
        assign(0, devices);
    }
    return best;
}

} // namespace

TEST(StageSharding, DpEqualsBruteForceOnRandomStageTimes) {
    std::mt19937 rng(17);
    std::uniform_real_distribution<double> u(0.5, 10.0);
    std::bernoulli_distribution missing(0.15);
    for (int trial = 0; trial < 60; ++trial) {
        size_t layers = 1 + trial % 5;
        uint32_t devices = 1 + trial % 4, microbatches = 1 + (trial * 7) % 8;
        std::map<std::tuple<size_t, size_t, uint32_t>, std::optional<double>> table;
        for (size_t a = 0; a < layers; ++a)
            for (size_t b = a + 1; b <= layers; ++b)
                for (uint32_t m = 1; m <= devices; ++m)
                    table[{a, b, m}] =
                        missing(rng) ? std::nullopt : std::optional<double>((b - a) * u(rng) / m);
        StageCostFn cost = [&](size_t a, size_t b, uint32_t m) { return table.at({a, b, m}); };
        SCOPED_TRACE(fmt::format("trial {}: {} layers, {} devices, {} micro-batches", trial, layers,
                                 devices, microbatches));
        double want = brute_force(layers, devices, microbatches, cost);
        if (std::isinf(want)) {
            EXPECT_THROW(auto_partition_submeshes(layers, devices, microbatches, cost), ValueError);
            continue;
        }
        auto got = auto_partition_submeshes(layers, devices, microbatches, cost);
        EXPECT_NEAR(got.objective, want, 1e-9 * want);
        uint32_t used = 0;
        double sum = 0, worst = 0;
        for (size_t s = 0; s < got.stage_begin.size(); ++s) {
            used += got.stage_devices[s];
            size_t end = s + 1 < got.stage_begin.size() ? got.stage_begin[s + 1] : layers;
            EXPECT_EQ(table.at({got.stage_begin[s], end, got.stage_devices[s]}), got.stage_cost[s]);
            sum += got.stage_cost[s];
            worst = std::max(worst, got.stage_cost[s]);
        }
        EXPECT_EQ(used, devices);
        EXPECT_NEAR(got.objective, sum + (microbatches - 1) * worst, 1e-9 * want);
    }
}

TEST(StageSharding, PipelineMlpStagesPricedByTheIlpEqualBruteForce) {
    register_all_operators();
    auto model = pipeline_mlp_model({64, 256, 256, 64, 16}, 1, "relu", false);
    AutoShardOptions options; // analytic costs: repeatable
    std::map<std::tuple<size_t, size_t, uint32_t>, std::optional<double>> cache;
    StageCostFn cost = [&](size_t a, size_t b, uint32_t m) {
        auto key = std::tuple{a, b, m};
        if (!cache.count(key)) cache[key] = sharded_stage_cost(model, a, b, m, 32, options);
        return cache[key];
    };
    for (uint32_t devices : {1u, 2u, 4u})
        for (uint32_t microbatches : {1u, 8u}) {
            SCOPED_TRACE(fmt::format("{} devices, {} micro-batches", devices, microbatches));
            auto got = auto_partition_submeshes(model.layers.size(), devices, microbatches, cost);
            EXPECT_NEAR(got.objective,
                        brute_force(model.layers.size(), devices, microbatches, cost),
                        1e-9 * got.objective);
        }
    // More devices never predict a slower whole model here (it can replicate; a whole model
    // has no transfers to spread).
    size_t layers = model.layers.size();
    EXPECT_LE(*cost(0, layers, 2), *cost(0, layers, 1) * (1 + 1e-9));
    // A stage's transfers are priced: a slower link makes a middle stage slower, and the whole
    // model (no neighbours) no slower.
    AutoShardOptions slow = options;
    slow.comm.bytes_per_s = options.comm.bytes_per_s / 100;
    for (uint32_t m : {1u, 2u}) {
        EXPECT_GT(*sharded_stage_cost(model, 1, 2, m, 32, slow), *cost(1, 2, m) * 1.5) << m;
        EXPECT_NEAR(*sharded_stage_cost(model, 0, layers, 1, 32, slow), *cost(0, layers, 1),
                    1e-9 * *cost(0, layers, 1));
    }
}
