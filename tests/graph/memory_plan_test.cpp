// Memory planning of compiled graphs: random DAGs must compute exactly what they compute
// without planning, with no two live vars sharing bytes; forwarding happens where allowed
// and never where an input is still needed; the report matches hand-computed numbers.
#include "graph/memory_plan.h"
#include "tests/support/random_graph.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

using namespace braid;
using braid::testing::make_random_graph;
using braid::testing::RandomGraph;
using braid::testing::RandomGraphConfig;

namespace {

//! Values a run produced: fetched outputs, then callback outputs (host copies).
struct RunValues {
    std::vector<Tensor> fetched, callbacks;
};

struct Compiled {
    std::unique_ptr<Executable> exec;
    std::shared_ptr<std::vector<Tensor>> callback_values;
};

Compiled compile(RandomGraph& rg, bool plan, const std::string& planner) {
    rg.graph->options().enable_memory_plan = plan;
    rg.graph->options().memory_planner = planner;
    Compiled c;
    // Callbacks on the chosen vars and on every var nobody reads, so the whole graph runs.
    auto observed = rg.callbacks;
    for (auto& v : rg.sinks()) observed.push_back(v);
    c.callback_values = std::make_shared<std::vector<Tensor>>(observed.size());
    std::vector<OutputSpec> specs(rg.fetched.begin(), rg.fetched.end());
    for (size_t i = 0; i < observed.size(); ++i) {
        auto values = c.callback_values;
        specs.emplace_back(observed[i], [values, i](const Tensor& t) { (*values)[i] = t.copy(); });
    }
    c.exec = rg.graph->compile(specs);
    for (auto& [name, value] : rg.feeds) {
        try {
            c.exec->feed(name, value);
        } catch (const GraphError&) { // an input no output depends on
        }
    }
    return c;
}

RunValues run(Compiled& c) {
    c.exec->run();
    RunValues v;
    for (size_t i = 0; i < c.exec->nr_outputs(); ++i) {
        try {
            v.fetched.push_back(c.exec->output(i).copy());
        } catch (const GraphError&) { // a callback output
        }
    }
    v.callbacks = *c.callback_values;
    return v;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
    Tensor ca = a.contiguous(), cb = b.contiguous();
    return std::memcmp(ca.raw_ptr(), cb.raw_ptr(), ca.nr_bytes()) == 0;
}

void expect_same_values(const RunValues& got, const RunValues& want, const std::string& what) {
    ASSERT_EQ(got.fetched.size(), want.fetched.size());
    for (size_t i = 0; i < got.fetched.size(); ++i)
        EXPECT_TRUE(bitwise_equal(got.fetched[i], want.fetched[i])) << what << ": output " << i;
    ASSERT_EQ(got.callbacks.size(), want.callbacks.size());
    for (size_t i = 0; i < got.callbacks.size(); ++i)
        EXPECT_TRUE(bitwise_equal(got.callbacks[i], want.callbacks[i]))
            << what << ": callback " << i;
}

//! The var at the root of `var`'s chain of read-only views.
VarNode* storage_root(VarNode* var) {
    for (;;) {
        auto* opr = var->owner();
        size_t k = 0;
        while (opr->output(k) != var) ++k;
        if (opr->output_mem(k) != OutputMem::READONLY_FORWARD) return var;
        var = opr->input(opr->forward_input(k));
    }
}

/*!
 * Checks a plan against the executable, independently of how the plan was made: offsets
 * aligned and inside the arena; placements alive together share no byte unless one took
 * over the other in place; each placement covers its var's lifetime as the sequences
 * define it (local readers through views; a reader on another comp node up to the first
 * local step after it in the global order).
 */
void check_plan(const Executable& exec) {
    const auto& report = exec.memory_report();
    auto seqs = exec.sequences();
    ASSERT_EQ(report.nodes.size(), seqs.size());
    std::map<std::string, VarNode*> by_name;
    std::map<VarNode*, std::pair<size_t, size_t>> producer; // node, step
    for (size_t n = 0; n < seqs.size(); ++n)
        for (size_t s = 0; s < seqs[n].second.size(); ++s)
            for (auto* out : seqs[n].second[s]->outputs()) {
                by_name[out->name()] = out;
                producer[out] = {n, s};
            }
    // Required lifetime end per root var.
    std::map<VarNode*, size_t> need_end;
    for (size_t n = 0; n < seqs.size(); ++n)
        for (size_t s = 0; s < seqs[n].second.size(); ++s)
            for (auto* in : seqs[n].second[s]->inputs()) {
                VarNode* root = storage_root(in);
                auto [rn, rs] = producer.at(root);
                size_t end = s + 1;
                if (rn != n) { // first step of the root's node after this reader
                    auto& oprs = seqs[rn].second;
                    end = oprs.size();
                    for (size_t x = 0; x < oprs.size(); ++x)
                        if (oprs[x]->id() > seqs[n].second[s]->id()) {
                            end = x;
                            break;
                        }
                }
                need_end[root] = std::max(need_end[root], end);
            }
    for (size_t n = 0; n < report.nodes.size(); ++n) {
        auto& node = report.nodes[n];
        auto& pl = node.placements;
        ASSERT_GT(node.alignment, 0u);
        EXPECT_GE(node.arena_bytes, node.lower_bound_bytes);
        EXPECT_LE(node.arena_bytes, node.no_reuse_bytes);
        EXPECT_LE(node.arena_bytes, node.arena_capacity_bytes);
        std::vector<size_t> chain(pl.size());
        for (size_t i = 0; i < pl.size(); ++i) {
            chain[i] = pl[i].inplace_of >= 0 ? chain[size_t(pl[i].inplace_of)] : i;
            EXPECT_EQ(pl[i].offset % node.alignment, 0u) << pl[i].name;
            EXPECT_LE(pl[i].offset + pl[i].bytes, node.arena_bytes) << pl[i].name;
            VarNode* var = by_name.at(pl[i].name);
            EXPECT_EQ(pl[i].lifetime_begin, producer.at(var).second) << pl[i].name;
            EXPECT_GE(pl[i].lifetime_end, need_end[var]) << pl[i].name;
            if (pl[i].inplace_of >= 0) {
                EXPECT_EQ(pl[i].offset, pl[size_t(pl[i].inplace_of)].offset) << pl[i].name;
            }
        }
        for (size_t i = 0; i < pl.size(); ++i)
            for (size_t j = i + 1; j < pl.size(); ++j) {
                auto &a = pl[i], &b = pl[j];
                if (chain[i] == chain[j] || !a.bytes || !b.bytes) continue;
                bool alive_together =
                    a.lifetime_begin < b.lifetime_end && b.lifetime_begin < a.lifetime_end;
                bool share = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
                EXPECT_FALSE(alive_together && share)
                    << node.comp_node << ": " << a.name << " and " << b.name;
            }
    }
}

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
