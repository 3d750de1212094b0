// The memory-planning property test on CUDA comp nodes: random graphs on cuda0 (and on cuda0
// with cpu0, so vars cross devices) compute what they compute without planning, and every
// plan passes the same independent check as on the CPU.
#include "cuda_checker.h"

#include "tests/support/memory_plan_check.h"

using namespace braid;
using namespace braid::testing;

TEST(CudaMemoryPlan, RandomGraphsComputeWhatTheUnplannedRunComputes) {
    BRAID_REQUIRE_CUDA();
    register_all_operators();
    for (uint64_t seed = 0; seed < 200; ++seed) {
        RandomGraphConfig cfg;
        cfg.seed = seed;
        cfg.nr_oprs = 10 + seed % 40;
        cfg.comp_nodes = seed % 4 == 3 ? std::vector<std::string>{"cuda0", "cpu0"}
                                       : std::vector<std::string>{"cuda0"};
        cfg.dynamic_shapes = seed % 5 == 4;
        cfg.max_dim = seed % 2 ? 16 : 64;
        auto rg = make_random_graph(cfg);
        SCOPED_TRACE("seed " + std::to_string(seed));
        auto ref = compile(rg, false, "best_fit");
        auto want = run(ref);
        auto planned = compile(rg, true, "best_fit");
        check_plan(*planned.exec);
        // cuBLAS may choose another kernel for other buffer alignments: near, not bitwise.
        expect_same_values(run(planned), want, "first run", 1e-5);
        expect_same_values(run(planned), want, "second run", 1e-5);
        if (HasFailure()) return;
    }
}
