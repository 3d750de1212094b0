// The static per-rank plan: arena, parameter, input and output bytes and every collective's
// group and bytes, from compiled executables that never ran, checked against byte counts
// worked out by hand; and the mismatches between ranks it reports.
#include "parallel/rank_plan.h"

#include "collective/collective_modes.h"
#include "comm/group_client.h"
#include "parallel/mesh.h"

#include "braid.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>

using namespace braid;
using namespace braid::parallel;
using opr::CollectiveMode;

namespace {

//! One rank's graph: x {8,16} (512 bytes) times w {16,32} (2048 bytes) gives h {8,32}
//! (1024 bytes, the only arena var), all-reduced in place over `reduce_axis`, then gathered
//! over `gather_axis` into the fetched output {8 * n, 32}.
struct RankGraph {
    std::shared_ptr<ComputingGraph> graph;
    std::unique_ptr<Executable> exec;
};

RankGraph build_rank(const Mesh& mesh, uint32_t rank, std::shared_ptr<comm::GroupClient> client,
                     const std::string& reduce_axis, const std::string& gather_axis,
                     bool with_gather = true) {
    RankGraph r;
    GraphOptions opt;
    opt.default_comp_node = fmt::format("cpu{}", rank);
    r.graph = ComputingGraph::make(opt);
    MeshGroups groups(mesh, rank, client);
    auto x = opr::Input::make(*r.graph, "x", dtype::Float32(), {8, 16});
    auto w = opr::SharedParam::make(
        *r.graph, std::make_shared<Tensor>(TensorShape{16, 32}, dtype::Float32()));
    auto h = opr::matmul(x, w);
    auto s = opr::all_reduce_sum(h, groups.group(reduce_axis), "sum");
    auto y = with_gather ? opr::all_gather(s, groups.group(gather_axis), "gather") : s;
    r.exec = r.graph->compile({y});
    return r;
}

} // namespace

class RankPlanTest : public ::testing::Test {
protected:
    void SetUp() override {
        register_all_operators();
        // Making a plan never waits for peers; if it did, the wait ends here, not in ctest.
        setenv("BRAID_COMM_TIMEOUT", "20", /*overwrite=*/0);
    }
};

TEST_F(RankPlanTest, CountsBytesOfAllReduceAndAllGatherByHandOnTwoAndFourRanks) {
    for (uint32_t n : {2u, 4u}) {
        SCOPED_TRACE(fmt::format("{} ranks", n));
        Mesh mesh({n}, {"x"});
        auto client = std::make_shared<comm::InProcessGroupClient>();
        // Built and compiled one after the other on this thread: nothing runs, no rank waits.
        std::vector<RankGraph> graphs;
        std::vector<const Executable*> execs;
        for (uint32_t r = 0; r < n; ++r) graphs.push_back(build_rank(mesh, r, client, "x", "x"));
        for (auto& g : graphs) execs.push_back(g.exec.get());
        auto plan = plan_ranks(execs);
        ASSERT_EQ(plan.ranks.size(), n);
        EXPECT_TRUE(plan.problems.empty()) << plan.to_string();
        for (uint32_t r = 0; r < n; ++r) {
            const auto& rp = plan.ranks[r];
            EXPECT_EQ(rp.rank, r);
            EXPECT_EQ(rp.param_bytes, 16u * 32 * 4);
            EXPECT_EQ(rp.input_bytes, 8u * 16 * 4);
            // h (1024 bytes) is the arena's only var: the all-reduce writes over it in place,
            // and the gathered output is fetched, so it has an allocation of its own.
            EXPECT_EQ(rp.arena_bytes, 1024u);
            EXPECT_EQ(rp.output_bytes, 1024u * n);
            ASSERT_EQ(rp.collectives.size(), 2u);
            const auto& ar = rp.collectives[0];
            EXPECT_EQ(ar.mode, CollectiveMode::ALL_REDUCE_SUM);
            EXPECT_EQ(ar.group_size, n);
            EXPECT_EQ(ar.group_rank, int32_t(r));
            EXPECT_TRUE(ar.shape_known);
            EXPECT_EQ(ar.input_shape, TensorShape({8, 32}));
            // Ring all-reduce: 2 (n-1)/n of 1024 bytes each way: 1024 on 2 ranks, 1536 on 4.
            size_t ar_bytes = n == 2 ? 1024 : 1536;
            EXPECT_EQ(ar.bytes_sent, ar_bytes);
            EXPECT_EQ(ar.bytes_received, ar_bytes);
            const auto& ag = rp.collectives[1];
            EXPECT_EQ(ag.mode, CollectiveMode::ALL_GATHER);
            EXPECT_EQ(ag.output_shape, TensorShape({8 * n, 32}));
            // All-gather: this rank's 1024 bytes to each of n-1 peers, theirs back.
            EXPECT_EQ(ag.bytes_sent, 1024u * (n - 1));
            EXPECT_EQ(ag.bytes_received, 1024u * (n - 1));
            EXPECT_EQ(rp.bytes_sent(), ar_bytes + 1024u * (n - 1));
            std::vector<uint32_t> everyone;
            for (uint32_t k = 0; k < n; ++k) everyone.push_back(k);
            EXPECT_EQ(ar.group_ranks, everyone);
            EXPECT_EQ(ag.group_ranks, everyone);
        }
        auto text = plan.to_string();
        EXPECT_NE(text.find("rank 1: ALL_REDUCE_SUM key \"mesh/x:sum\" on cpu1"), std::string::npos)
            << text;
        EXPECT_NE(text.find(fmt::format("sends {}, receives {}", 1024 * (n - 1), 1024 * (n - 1))),
                  std::string::npos)
            << text;
    }
}

TEST_F(RankPlanTest, NamesTheSubGroupsOfEachMeshAxis) {
    // A 2x2 mesh {x=2, y=2}: the all-reduce over y pairs ranks {0,1} and {2,3}, the all-gather
    // over x pairs {0,2} and {1,3}.
    Mesh mesh({2, 2}, {"x", "y"});
    auto client = std::make_shared<comm::InProcessGroupClient>();
    std::vector<RankGraph> graphs;
    std::vector<const Executable*> execs;
    for (uint32_t r = 0; r < 4; ++r) graphs.push_back(build_rank(mesh, r, client, "y", "x"));
    for (auto& g : graphs) execs.push_back(g.exec.get());
    auto plan = plan_ranks(execs);
    EXPECT_TRUE(plan.problems.empty()) << plan.to_string();
    const std::vector<std::vector<uint32_t>> over_y = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
    const std::vector<std::vector<uint32_t>> over_x = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    for (uint32_t r = 0; r < 4; ++r) {
        const auto& rp = plan.ranks[r];
        ASSERT_EQ(rp.collectives.size(), 2u);
        EXPECT_EQ(rp.collectives[0].group_ranks, over_y[r]) << "rank " << r;
        EXPECT_EQ(rp.collectives[1].group_ranks, over_x[r]) << "rank " << r;
        // Groups of 2: 2 (1/2) 1024 bytes for the all-reduce, 1024 for the all-gather.
        EXPECT_EQ(rp.collectives[0].bytes_sent, 1024u);
        EXPECT_EQ(rp.collectives[1].bytes_received, 1024u);
        EXPECT_EQ(rp.output_bytes, 2048u);
    }
}

TEST_F(RankPlanTest, ReportsACollectiveThatSomePeersLack) {
    // Rank 1 leaves out the all-gather: its peer would wait for it until the deadline.
    Mesh mesh({2}, {"x"});
    auto client = std::make_shared<comm::InProcessGroupClient>();
    auto r0 = build_rank(mesh, 0, client, "x", "x");
    auto r1 = build_rank(mesh, 1, client, "x", "x", /*with_gather=*/false);
    auto plan = plan_ranks({r0.exec.get(), r1.exec.get()});
    ASSERT_EQ(plan.problems.size(), 1u) << plan.to_string();
    const auto& gather_key = plan.ranks[0].collectives[1].key;
    EXPECT_EQ(plan.problems[0], fmt::format("key \"{}\": 1 of 2 peers present (ranks 0); the "
                                            "others would wait for the missing ones until their "
                                            "deadline",
                                            gather_key));
    EXPECT_NE(plan.to_string().find("problem: key"), std::string::npos);
}

TEST_F(RankPlanTest, TrafficOfEveryModeFollowsItsTrait) {
    // 4 ranks, 1200 input bytes: the volume each mode's bandwidth-optimal algorithm moves.
    using T = opr::CollectiveTraffic;
    auto traffic = [](CollectiveMode m, size_t in, size_t out, bool root) {
        return opr::mode_trait(m).traffic(in, out, 4, root);
    };
    EXPECT_EQ(traffic(CollectiveMode::ALL_REDUCE_MAX, 1200, 1200, false), (T{1800, 1800}));
    EXPECT_EQ(traffic(CollectiveMode::REDUCE_SCATTER_SUM, 1200, 300, false), (T{900, 900}));
    EXPECT_EQ(traffic(CollectiveMode::ALL_TO_ALL, 1200, 1200, false), (T{900, 900}));
    EXPECT_EQ(traffic(CollectiveMode::ALL_GATHER, 1200, 4800, false), (T{3600, 3600}));
    EXPECT_EQ(traffic(CollectiveMode::BROADCAST, 1200, 1200, true), (T{3600, 0}));
    EXPECT_EQ(traffic(CollectiveMode::BROADCAST, 0, 1200, false), (T{0, 1200}));
    EXPECT_EQ(traffic(CollectiveMode::REDUCE_SUM, 1200, 4, false), (T{1200, 0}));
    EXPECT_EQ(traffic(CollectiveMode::REDUCE_SUM, 1200, 1200, true), (T{0, 3600}));
    EXPECT_EQ(traffic(CollectiveMode::GATHER, 1200, 4800, true), (T{0, 3600}));
    EXPECT_EQ(traffic(CollectiveMode::SCATTER, 1200, 300, true), (T{900, 0}));
    EXPECT_EQ(traffic(CollectiveMode::SCATTER, 0, 300, false), (T{0, 300}));
    // One rank moves nothing.
    EXPECT_EQ(opr::mode_trait(CollectiveMode::ALL_REDUCE_SUM).traffic(1200, 1200, 1, false),
              (T{0, 0}));
}

TEST_F(RankPlanTest, RefusesAnEmptyOrNullList) {
    EXPECT_THROW(plan_ranks({}), ValueError);
    EXPECT_THROW(plan_ranks({nullptr}), ValueError);
}

TEST_F(RankPlanTest, PlansOneGraphThatHoldsEveryRankPerCompNode) {
    // One graph, rank r on comp node cpu<r>: x_r {8,16} times w_r {16,32}, all-reduced with
    // its peers (one key on both comp nodes), fetched.
    auto g = ComputingGraph::make();
    auto client = std::make_shared<comm::InProcessGroupClient>();
    SymbolVarArray outs;
    for (int32_t r = 0; r < 2; ++r) {
        auto cn = CompNode::load(fmt::format("cpu{}", r));
        auto x = opr::Input::make(*g, fmt::format("x{}", r), dtype::Float32(), {8, 16}, cn);
        auto w = opr::SharedParam::make(
            *g, std::make_shared<Tensor>(TensorShape{16, 32}, dtype::Float32()),
            OperatorConfig::on(cn));
        opr::Group group{"one_graph", 2, r, client, "local", 0, cn};
        outs.push_back(opr::all_reduce_sum(opr::matmul(x, w), group));
    }
    auto exec = g->compile(std::vector<OutputSpec>(outs.begin(), outs.end()));
    auto plan = plan_comp_node_ranks(*exec);
    ASSERT_EQ(plan.ranks.size(), 2u) << plan.to_string();
    EXPECT_TRUE(plan.problems.empty()) << plan.to_string();
    for (uint32_t r = 0; r < 2; ++r) {
        const auto& rp = plan.ranks[r];
        EXPECT_EQ(rp.param_bytes, 2048u);
        EXPECT_EQ(rp.input_bytes, 512u);
        // The all-reduce writes its fetched output in place of h: one {8,32} allocation kept
        // apart from the arena.
        EXPECT_EQ(rp.output_bytes, 1024u) << plan.to_string();
        ASSERT_EQ(rp.collectives.size(), 1u);
        EXPECT_EQ(rp.collectives[0].comp_node, fmt::format("cpu{}", r));
        EXPECT_EQ(rp.collectives[0].group_ranks, (std::vector<uint32_t>{0, 1}));
        EXPECT_EQ(rp.collectives[0].bytes_sent, 1024u);
    }
}
