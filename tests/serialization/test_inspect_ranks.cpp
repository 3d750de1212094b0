// braid-inspect --ranks N on the data-parallel example model: the per-rank plan a user reads
// before launching a job, with byte counts worked out by hand, and its usage errors.
#include "helpers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace braid::test;
using ::testing::HasSubstr;

namespace {

const std::string INSPECT = BRAID_INSPECT_PATH;
const std::string DP = std::string(BRAID_EXAMPLE_MODELS_DIR) + "/dp_allreduce.braid";

} // namespace

TEST(BraidInspectRanks, PrintsEveryRanksMemoryAndCollectiveBytes) {
    auto r = run_tool(INSPECT, {DP, "--ranks", "4"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("per-rank plan for 4 ranks"));
    // dp_allreduce: x {8,16} float32 and label {8} int32 are 544 input bytes; w1 {16,32},
    // b1 {32}, w2 {32,10}, b2 {10} hold 3496 parameter bytes, plus two float32 scalar
    // constants: 3504, and one more float32 {1} that the executable folds from one of them
    // when compiled (fold_constants: a negated scalar, reshaped): 3508. Its 5
    // all-reduces move 4 + 2048 + 128 + 1280 + 40 = 3500 bytes of
    // tensors; a ring over 4 ranks sends and receives 2 * 3/4 of each: 6 + 3072 + 192 + 1920 +
    // 60 = 5250 bytes.
    for (int rank = 0; rank < 4; ++rank) {
        EXPECT_THAT(r.out, ::testing::ContainsRegex(fmt::format(
                               "\n +{} +[0-9]+ +3508 +544 +3500 +5 +5250 +5250\n", rank)))
            << r.out;
        EXPECT_THAT(r.out, HasSubstr(fmt::format(
                               "rank {}: ALL_REDUCE_SUM key \"dp:grad_w1\" on cpu0: group of 4 "
                               "(ranks 0,1,2,3), rank {} in it; {{16,32}} -> {{16,32}} float32; "
                               "sends 3072, receives 3072",
                               rank, rank)));
    }
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("problem:")));
}

TEST(BraidInspectRanks, RefusesZeroRanksAndDot) {
    auto zero = run_tool(INSPECT, {DP, "--ranks", "0"});
    EXPECT_EQ(zero.status, 2) << zero.out;
    EXPECT_THAT(zero.err, HasSubstr("--ranks"));
    auto dot = run_tool(INSPECT, {DP, "--ranks", "2", "--dot"});
    EXPECT_EQ(dot.status, 2) << dot.out;
}
