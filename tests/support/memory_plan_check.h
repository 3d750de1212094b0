// Checks shared by the memory-plan property tests (CPU and CUDA comp nodes): compile a random
// graph with or without planning, run it, compare the values, and check a plan against its
// executable independently of how the plan was made.
#pragma once

#include "graph/memory_plan.h"
#include "tests/support/random_graph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

namespace braid::testing {

//! Values a run produced: fetched outputs, then callback outputs (host copies).
struct RunValues {
    std::vector<Tensor> fetched, callbacks;
};

struct Compiled {
    std::unique_ptr<Executable> exec;
    std::shared_ptr<std::vector<Tensor>> callback_values;
};

inline Compiled compile(RandomGraph& rg, bool plan, const std::string& planner) {
    rg.graph->options().enable_memory_plan = plan;
    rg.graph->options().memory_planner = planner;
    // check_plan() re-derives lifetimes from the operators' own inputs, as built.
    rg.graph->options().enable_fusion = false;
    Compiled c;
    // Callbacks on the chosen vars and on every var nobody reads, so the whole graph runs.
    if (rg.observed.empty()) {
        rg.observed = rg.callbacks;
        for (auto& v : rg.sinks()) rg.observed.push_back(v);
    }
    const auto& observed = rg.observed;
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

inline RunValues run(Compiled& c) {
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

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
    Tensor ca = a.contiguous(), cb = b.contiguous();
    return std::memcmp(ca.raw_ptr(), cb.raw_ptr(), ca.nr_bytes()) == 0;
}

//! Bitwise equality with rtol == 0; otherwise |a - b| <= rtol * (1 + |b|) per element (for
//! devices whose libraries may pick another kernel for other buffer alignments).
inline bool same_values(const Tensor& a, const Tensor& b, double rtol) {
    if (rtol == 0) return bitwise_equal(a, b);
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
    for (size_t i = 0; i < a.shape().total_nr_elems(); ++i)
        if (std::abs(a.at(i) - b.at(i)) > rtol * (1 + std::abs(b.at(i)))) return false;
    return true;
}

inline void expect_same_values(const RunValues& got, const RunValues& want, const std::string& what,
                               double rtol = 0) {
    ASSERT_EQ(got.fetched.size(), want.fetched.size());
    for (size_t i = 0; i < got.fetched.size(); ++i)
        EXPECT_TRUE(same_values(got.fetched[i], want.fetched[i], rtol)) << what << ": output " << i;
    ASSERT_EQ(got.callbacks.size(), want.callbacks.size());
    for (size_t i = 0; i < got.callbacks.size(); ++i)
        EXPECT_TRUE(same_values(got.callbacks[i], want.callbacks[i], rtol))
            << what << ": callback " << i;
}

//! The var at the root of `var`'s chain of read-only views.
inline VarNode* storage_root(VarNode* var) {
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
 * aligned and inside the arena; placements alive together (operators' workspaces included)
 * share no byte unless one took over the other in place; each placement covers its var's lifetime
 * as the sequences define it (local readers through views; a reader on another comp node up to the
 * first local step after it in the global order).
 */
inline void check_plan(const Executable& exec) {
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
            if (pl[i].workspace) { // an operator's scratch memory: alive during its step alone
                EXPECT_EQ(pl[i].lifetime_end, pl[i].lifetime_begin + 1) << pl[i].name;
                EXPECT_EQ(pl[i].inplace_of, -1) << pl[i].name;
                continue;
            }
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

} // namespace braid::testing
