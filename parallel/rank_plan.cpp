#include "parallel/rank_plan.h"

#include "base/error.h"
#include "collective/collective_modes.h"
#include "graph/input_node.h"
#include "memory/memory_budget.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <unordered_set>

namespace braid::parallel {

namespace {

size_t bytes_of(const TensorShape& shape, DType dtype) {
    return shape.total_nr_elems() * dtype.size();
}

PlannedCollective plan_collective(const opr::CollectiveComm& opr) {
    const auto& p = opr.param();
    PlannedCollective c;
    c.name = opr.name();
    c.key = p.key;
    c.mode = p.mode;
    c.backend = p.backend;
    c.comp_node = opr.comp_node().locator();
    c.group_size = p.nr_devices;
    c.group_rank = p.rank;
    c.is_root = p.is_root;
    c.dtype = p.dtype;
    c.has_input = opr.has_input();
    const VarNode* in = c.has_input ? opr.input(0) : nullptr;
    const VarNode* out = opr.output(0);
    c.shape_known = out->shape_known() && (!in || in->shape_known());
    if (!c.shape_known) return c;
    if (in) c.input_shape = in->shape();
    c.output_shape = out->shape();
    size_t in_bytes = in ? bytes_of(in->shape(), in->dtype()) : 0;
    auto traffic = opr::mode_trait(p.mode).traffic(in_bytes, bytes_of(out->shape(), out->dtype()),
                                                   p.nr_devices, p.is_root);
    c.bytes_sent = traffic.sent;
    c.bytes_received = traffic.received;
    return c;
}

std::string shape_text(const PlannedCollective& c) {
    if (!c.shape_known) return "shape known only at execution";
    return fmt::format("{} -> {} {}", c.has_input ? c.input_shape.to_string() : "(no input)",
                       c.output_shape.to_string(), c.dtype.name());
}

} // namespace

size_t RankPlan::bytes_sent() const {
    size_t total = 0;
    for (auto& c : collectives) total += c.bytes_sent;
    return total;
}

size_t RankPlan::bytes_received() const {
    size_t total = 0;
    for (auto& c : collectives) total += c.bytes_received;
    return total;
}

namespace {

//! The plan of the comp nodes of `exec` that `take` accepts (by locator), as rank `rank`.
template <typename Filter> RankPlan plan_of(const Executable& exec, uint32_t rank, Filter take) {
    RankPlan plan;
    plan.rank = rank;
    for (auto& node : exec.memory_report().nodes) {
        if (!take(node.comp_node)) continue;
        plan.arena_bytes += node.arena_bytes;
        plan.output_bytes += node.own_allocation_bytes;
        plan.dynamic_vars += node.nr_dynamic_vars;
    }
    // Bound outputs (parameters, constants, fed inputs) are outside the arena; a parameter
    // read by several comp nodes is counted once.
    std::unordered_set<const VarNode*> counted;
    for (auto& [cn, oprs] : exec.sequences()) {
        if (!take(cn.locator())) continue;
        for (auto* opr : oprs) {
            for (size_t k = 0; k < opr->outputs().size(); ++k) {
                auto* var = opr->output(k);
                if (opr->output_mem(k) != OutputMem::BOUND || !var->shape_known() ||
                    !counted.insert(var).second)
                    continue;
                size_t bytes = bytes_of(var->shape(), var->dtype());
                if (dynamic_cast<const InputNode*>(opr))
                    plan.input_bytes += bytes;
                else
                    plan.param_bytes += bytes;
            }
            if (auto* coll = dynamic_cast<const opr::CollectiveComm*>(opr))
                plan.collectives.push_back(plan_collective(*coll));
        }
    }
    return plan;
}

//! Fills every collective's group_ranks and lists the keys whose peers disagree.
void match_collectives(DistributedPlan& plan) {
    // Every key's holders, in rank order.
    struct Holders {
        std::vector<const PlannedCollective*> collectives;
        std::vector<uint32_t> ranks;
    };
    std::map<std::string, Holders> by_key;
    for (auto& rank : plan.ranks)
        for (auto& c : rank.collectives) {
            auto& h = by_key[c.key];
            h.collectives.push_back(&c);
            if (h.ranks.empty() || h.ranks.back() != rank.rank) h.ranks.push_back(rank.rank);
        }
    for (auto& rank : plan.ranks)
        for (auto& c : rank.collectives) c.group_ranks = by_key[c.key].ranks;
    for (auto& [key, h] : by_key) {
        const auto* first = h.collectives.front();
        for (auto* c : h.collectives)
            if (c->group_size != first->group_size || c->mode != first->mode) {
                plan.problems.push_back(fmt::format(
                    "key \"{}\": peers disagree: ranks {} hold it as {} over {} ranks, one as {} "
                    "over {} ranks",
                    key, fmt::join(h.ranks, ","), opr::collective_mode_name(first->mode),
                    first->group_size, opr::collective_mode_name(c->mode), c->group_size));
                break;
            }
        if (h.collectives.size() != first->group_size)
            plan.problems.push_back(fmt::format(
                "key \"{}\": {} of {} peers present (ranks {}); the others would wait for the "
                "missing ones until their deadline",
                key, h.collectives.size(), first->group_size, fmt::join(h.ranks, ",")));
    }
}

} // namespace

RankPlan plan_rank(const Executable& exec, uint32_t rank) {
    return plan_of(exec, rank, [](const std::string&) { return true; });
}

DistributedPlan plan_ranks(const std::vector<const Executable*>& execs) {
    if (execs.empty()) BRAID_THROW(ValueError, "plan_ranks: no executables; expected one per rank");
    DistributedPlan plan;
    for (uint32_t r = 0; r < execs.size(); ++r) {
        if (!execs[r]) BRAID_THROW(ValueError, "plan_ranks: the executable of rank {} is null", r);
        plan.ranks.push_back(plan_rank(*execs[r], r));
    }
    match_collectives(plan);
    return plan;
}

DistributedPlan plan_comp_node_ranks(const Executable& exec) {
    DistributedPlan plan;
    uint32_t rank = 0;
    for (auto& [cn, oprs] : exec.sequences()) {
        std::string locator = cn.locator();
        plan.ranks.push_back(
            plan_of(exec, rank++, [&](const std::string& other) { return other == locator; }));
    }
    match_collectives(plan);
    return plan;
}

std::string DistributedPlan::to_string() const {
    std::string s =
        fmt::format("{:>4}  {:>12}  {:>12}  {:>12}  {:>12}  {:>11}  {:>12}  {:>12}\n", "rank",
                    "arena", "parameters", "inputs", "outputs", "collectives", "sent", "received");
    for (auto& r : ranks)
        s += fmt::format("{:>4}  {:>12}  {:>12}  {:>12}  {:>12}  {:>11}  {:>12}  {:>12}\n", r.rank,
                         r.arena_bytes, r.param_bytes, r.input_bytes, r.output_bytes,
                         r.collectives.size(), r.bytes_sent(), r.bytes_received());
    s += "(bytes per run; sent and received: the collectives' bandwidth-optimal volume)\n";
    for (auto& r : ranks) {
        if (r.dynamic_vars)
            s += fmt::format("rank {}: {} vars allocated only at execution (not counted)\n", r.rank,
                             r.dynamic_vars);
        for (auto& c : r.collectives) {
            std::string group_rank = c.group_rank >= 0 ? fmt::format("{}", c.group_rank) : "?";
            std::string name = c.name == c.key ? "" : fmt::format(" \"{}\"", c.name);
            bool root = c.is_root && opr::mode_trait(c.mode).rooted();
            s += fmt::format("rank {}: {}{} key \"{}\" on {}: group of {} (ranks {}), rank {}{} "
                             "in it; {}; sends {}, receives {}\n",
                             r.rank, opr::collective_mode_name(c.mode), name, c.key, c.comp_node,
                             c.group_size, fmt::join(c.group_ranks, ","), group_rank,
                             root ? " (root)" : "", shape_text(c), c.bytes_sent, c.bytes_received);
        }
    }
    for (auto& p : problems) s += "problem: " + p + "\n";
    return s;
}

} // namespace braid::parallel
