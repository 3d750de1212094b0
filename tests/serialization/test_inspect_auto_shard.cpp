// braid-inspect --auto-shard MESH on the example transformer block: the plan a user reads
// before sharding a model, its JSON form, a memory limit, and the usage errors.
#include "helpers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace braid::test;
using ::testing::HasSubstr;

namespace {

const std::string INSPECT = BRAID_INSPECT_PATH;
const std::string BLOCK = std::string(BRAID_EXAMPLE_MODELS_DIR) + "/transformer_block.braid";

} // namespace

TEST(BraidInspectAutoShard, PrintsTheChosenSpecPerOperatorAndEveryRanksStaticPlan) {
    auto r = run_tool(INSPECT, {BLOCK, "--auto-shard", "tp=2", "--analytic"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("automatic sharding on Mesh{tp=2}"));
    EXPECT_THAT(r.out, ::testing::ContainsRegex("MatMul [A-Za-z0-9]+ +[mnk]@tp"));
    EXPECT_THAT(r.out, HasSubstr("predicted step time:"));
    EXPECT_THAT(r.out, HasSubstr("ILP: 43 nodes"));
    EXPECT_THAT(r.out, HasSubstr("runner-up 1:"));
    EXPECT_THAT(r.out, HasSubstr("operator costs: estimated from flops and bytes"));
    EXPECT_THAT(r.out, ::testing::ContainsRegex("\n +1 +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+"));
}

TEST(BraidInspectAutoShard, JsonHoldsThePlanItsPredictionAndTheRanks) {
    auto r = run_tool(INSPECT, {BLOCK, "--auto-shard", "2x2", "--analytic", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["mesh"], "Mesh{x=2,y=2}");
    EXPECT_EQ(j["operators"].size(), 43u);
    EXPECT_GT(j["predicted_s"].get<double>(), 0);
    EXPECT_TRUE(j["optimal"].get<bool>());
    ASSERT_EQ(j["ranks"].size(), 4u);
    for (auto& rank : j["ranks"]) EXPECT_GT(rank["arena_bytes"].get<size_t>(), 0u);
}

TEST(BraidInspectAutoShard, AMemoryLimitShrinksThePlanOrIsRefusedNamingTheLimit) {
    auto free_plan = run_tool(INSPECT, {BLOCK, "--auto-shard", "tp=2", "--analytic", "--json"});
    ASSERT_EQ(free_plan.status, 0) << free_plan.err;
    double need = nlohmann::json::parse(free_plan.out)["memory_bytes"].get<double>();
    auto limited = run_tool(INSPECT, {BLOCK, "--auto-shard", "tp=2", "--analytic", "--json",
                                      "--memory-limit", std::to_string(size_t(need * 0.9))});
    ASSERT_EQ(limited.status, 0) << limited.err;
    EXPECT_LE(nlohmann::json::parse(limited.out)["memory_bytes"].get<double>(), need * 0.9);
    auto none =
        run_tool(INSPECT, {BLOCK, "--auto-shard", "tp=2", "--analytic", "--memory-limit", "1000"});
    EXPECT_EQ(none.status, 3);
    EXPECT_THAT(none.err, HasSubstr("no plan fits the memory limit of 1000 bytes"));
}

TEST(BraidInspectAutoShard, RefusesABadMeshAndJsonWithoutAPlan) {
    auto bad = run_tool(INSPECT, {BLOCK, "--auto-shard", "2xq"});
    EXPECT_EQ(bad.status, 3);
    EXPECT_THAT(bad.err, HasSubstr("mesh \"2xq\""));
    auto json = run_tool(INSPECT, {BLOCK, "--json"});
    EXPECT_EQ(json.status, 2);
    EXPECT_THAT(json.err, HasSubstr("--json goes with"));
}

TEST(BraidInspectAutoShard, AutoStagesPrintsStagesAndTheirDevices) {
    auto r = run_tool(INSPECT, {"--pipeline-mlp", "64,256,256,64", "--microbatches", "4",
                                "--auto-stages", "2", "--analytic", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["devices"], 2);
    uint32_t used = 0;
    for (auto& d : j["stage_devices"]) used += d.get<uint32_t>();
    EXPECT_EQ(used, 2u);
    EXPECT_EQ(j["stage_begin"][0], 0);
    EXPECT_GT(j["objective_s"].get<double>(), 0);
    auto text =
        run_tool(INSPECT, {"--pipeline-mlp", "64,256,256,64", "--auto-stages", "2", "--analytic"});
    ASSERT_EQ(text.status, 0) << text.err;
    EXPECT_THAT(text.out, HasSubstr("stage 0: layers 0.."));
    auto lone = run_tool(INSPECT, {BLOCK, "--analytic"});
    EXPECT_EQ(lone.status, 2);
    EXPECT_THAT(lone.err, HasSubstr("--analytic goes with"));
}
