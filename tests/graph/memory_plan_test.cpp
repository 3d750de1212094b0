// Memory planning of compiled graphs: random DAGs must compute exactly what they compute
// without planning, with no two live vars sharing bytes; forwarding happens where allowed
// and never where an input is still needed; the report matches hand-computed numbers.
#include "tests/support/memory_plan_check.h"

using namespace braid;
using namespace braid::testing;

namespace {

class MemoryPlanTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MemoryPlanTest, RandomGraphsComputeWhatTheUnplannedRunComputes) {
    size_t nr_in_place = 0, nr_views = 0, nr_cross_reads = 0, nr_released = 0;
    for (uint64_t seed = 0; seed < 1000; ++seed) {
        RandomGraphConfig cfg;
        cfg.seed = seed;
        cfg.nr_oprs = 10 + seed % 40;
        if (seed % 4 == 3) cfg.comp_nodes = {"cpu0", "cpu1"};
        cfg.dynamic_shapes = seed % 5 == 4;
        cfg.max_dim = seed % 2 ? 16 : 64;
        auto rg = make_random_graph(cfg);
        SCOPED_TRACE("seed " + std::to_string(seed));
        auto ref = compile(rg, false, GetParam());
        auto want = run(ref);
        auto planned = compile(rg, true, GetParam());
        check_plan(*planned.exec);
        expect_same_values(run(planned), want, "first run");
        expect_same_values(run(planned), want, "second run");
        for (auto& n : planned.exec->memory_report().nodes) {
            nr_in_place += n.nr_inplace_forwarded;
            nr_views += n.nr_readonly_forwarded;
            nr_cross_reads += n.nr_cross_node_reads;
            nr_released += n.nr_dynamic_released;
        }
        if (HasFailure()) return;
    }
    // The sweep must exercise every mechanism, or it proves little.
    EXPECT_GT(nr_in_place, 1000u);
    EXPECT_GT(nr_views, 1000u);
    EXPECT_GT(nr_cross_reads, 100u);
    EXPECT_GT(nr_released, 100u);
}

INSTANTIATE_TEST_SUITE_P(AllPlanners, MemoryPlanTest, ::testing::ValuesIn(MemPlanner::algorithms()),
                         [](const auto& info) { return info.param; });

} // namespace
