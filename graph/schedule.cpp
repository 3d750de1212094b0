#include "graph/schedule.h"

#include "base/error.h"
#include "graph/computing_graph.h"

#include <functional>
#include <map>
#include <queue>
#include <unordered_map>

namespace braid {

std::vector<OperatorNode*> schedule_operators(const ComputingGraph& graph,
                                              const std::vector<OperatorNode*>& oprs) {
    // Units of the schedule: one per operator, except that the members of a peer group share
    // one (created at the group's first member, so units stay in insertion order).
    std::unordered_map<OperatorNode*, size_t> unit_of;
    std::map<std::string, size_t> group_unit;
    std::vector<std::vector<OperatorNode*>> units;
    bool any_group = false;
    for (auto* opr : oprs) {
        std::string group = opr->peer_group();
        size_t u = units.size();
        if (!group.empty()) {
            auto [it, inserted] = group_unit.emplace(group, u);
            u = it->second;
            any_group |= !inserted;
        }
        if (u == units.size()) units.emplace_back();
        units[u].push_back(opr);
        unit_of[opr] = u;
    }
    // Inputs always come earlier in insertion order; an extra dependency may name a later
    // operator (an order imposed after the fact, e.g. a send delayed past a later recv).
    bool any_later_dep = false;
    for (size_t u = 0; u < units.size() && !any_later_dep; ++u)
        for (auto* opr : units[u])
            for (auto* out : opr->outputs())
                for (auto* dep : graph.extra_deps(out)) {
                    auto it = unit_of.find(dep->owner());
                    any_later_dep |= it != unit_of.end() && it->second > u;
                }
    if (!any_group && !any_later_dep) return oprs; // insertion order is already topological

    // Kahn's algorithm over the units, always taking the earliest ready unit: with no merged
    // groups this reproduces insertion order exactly.
    std::vector<std::vector<size_t>> users(units.size());
    std::vector<size_t> pending(units.size(), 0);
    // An extra dependency between members of one group (a gradient's side effect that is a
    // peer of the gradient itself) is satisfied by running them together; an input is not.
    auto depend = [&](size_t u, OperatorNode* producer, bool reads) {
        auto it = unit_of.find(producer);
        if (it == unit_of.end()) return;
        if (it->second == u) {
            if (reads && units[u].size() > 1)
                BRAID_THROW(GraphError,
                            "the peers of collective \"{}\" depend on one another in this graph "
                            "(one member reads another's result), so none of them could start",
                            units[u].front()->peer_group());
            return;
        }
        users[it->second].push_back(u);
        ++pending[u];
    };
    for (size_t u = 0; u < units.size(); ++u)
        for (auto* opr : units[u]) {
            for (auto* in : opr->inputs()) depend(u, in->owner(), true);
            for (auto* out : opr->outputs())
                for (auto* dep : graph.extra_deps(out)) depend(u, dep->owner(), false);
        }
    std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
    for (size_t u = 0; u < units.size(); ++u)
        if (!pending[u]) ready.push(u);
    std::vector<OperatorNode*> order;
    order.reserve(oprs.size());
    while (!ready.empty()) {
        size_t u = ready.top();
        ready.pop();
        order.insert(order.end(), units[u].begin(), units[u].end());
        for (size_t v : users[u])
            if (--pending[v] == 0) ready.push(v);
    }
    if (order.size() != oprs.size()) {
        std::string stuck;
        for (size_t u = 0; u < units.size(); ++u)
            if (pending[u] && units[u].size() > 1)
                stuck += fmt::format("{}\"{}\"", stuck.empty() ? "" : ", ",
                                     units[u].front()->peer_group());
        BRAID_THROW(GraphError,
                    "collectives of this graph wait for each other in a cycle ({}): each rank "
                    "would need another's result before joining the collective the other waits in",
                    stuck.empty() ? "no group named" : stuck);
    }
    return order;
}

} // namespace braid
