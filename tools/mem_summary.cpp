#include "tools/mem_summary.h"

#include "graph/input_node.h"
#include "memory/memory_budget.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace braid::tools {

std::string MemorySummary::to_string() const {
    std::string s;
    for (auto& n : nodes) {
        s += fmt::format("  {}: {} planned vars, {} without reuse, lower bound {} (largest live "
                         "set); parameters {}, inputs {}",
                         n.comp_node, n.planned_vars, format_bytes(n.planned_bytes),
                         format_bytes(n.peak_live_bytes), format_bytes(n.param_bytes),
                         format_bytes(n.input_bytes));
        if (n.dynamic_vars) s += fmt::format(", {} vars allocated at execution", n.dynamic_vars);
        s += "\n";
    }
    return s;
}

MemorySummary summarize_memory(const Executable& exec, const std::vector<VarNode*>& outputs) {
    MemorySummary summary;
    auto seqs = exec.sequences();
    // Where each operator runs: (node index, step).
    std::unordered_map<const OperatorNode*, std::pair<size_t, size_t>> where;
    for (size_t n = 0; n < seqs.size(); ++n)
        for (size_t s = 0; s < seqs[n].second.size(); ++s) where[seqs[n].second[s]] = {n, s};
    std::unordered_map<const VarNode*, bool> is_output;
    for (auto* v : outputs) is_output[v] = true;

    for (size_t n = 0; n < seqs.size(); ++n) {
        MemorySummary::Node node;
        node.comp_node = seqs[n].first.locator();
        const auto& oprs = seqs[n].second;
        size_t end_step = oprs.size();
        // Lifetime of each planned var: [producer step, last reader step on this node]; a
        // read-only view extends the lifetime of the var it views.
        std::unordered_map<const VarNode*, std::pair<size_t, size_t>> life;
        std::unordered_map<const VarNode*, const VarNode*> root; // view -> viewed var
        auto root_of = [&](const VarNode* v) {
            while (root.count(v)) v = root[v];
            return v;
        };
        for (size_t s = 0; s < oprs.size(); ++s) {
            auto* opr = oprs[s];
            for (size_t k = 0; k < opr->outputs().size(); ++k) {
                auto* var = opr->output(k);
                size_t bytes =
                    var->shape_known() ? var->shape().total_nr_elems() * var->dtype().size() : 0;
                switch (opr->output_mem(k)) {
                case OutputMem::PLANNED:
                    if (!var->shape_known()) {
                        ++node.dynamic_vars;
                        continue;
                    }
                    ++node.planned_vars;
                    node.planned_bytes += bytes;
                    life[var] = {s, s};
                    break;
                case OutputMem::READONLY_FORWARD:
                    root[var] = opr->input(opr->forward_input(k));
                    break;
                case OutputMem::BOUND:
                    if (dynamic_cast<const InputNode*>(opr))
                        node.input_bytes += bytes;
                    else
                        node.param_bytes += bytes;
                    break;
                }
            }
        }
        auto extend = [&](const VarNode* v, size_t step) {
            auto it = life.find(root_of(v));
            if (it != life.end()) it->second.second = std::max(it->second.second, step);
        };
        for (size_t s = 0; s < oprs.size(); ++s)
            for (auto* in : oprs[s]->inputs()) extend(in, s);
        for (auto& [var, _] : life) {
            for (auto* reader : var->readers()) {
                auto it = where.find(reader);
                if (it != where.end() && it->second.first != n) extend(var, end_step);
            }
        }
        for (auto& [view, _] : root)
            if (is_output.count(view)) extend(view, end_step);
        for (auto& [var, l] : life)
            if (is_output.count(var)) l.second = end_step;
        std::vector<long> delta(end_step + 2, 0);
        for (auto& [var, l] : life) {
            long bytes = long(var->shape().total_nr_elems() * var->dtype().size());
            delta[l.first] += bytes;
            delta[l.second + 1] -= bytes;
        }
        long live = 0;
        for (long d : delta) {
            live += d;
            node.peak_live_bytes = std::max(node.peak_live_bytes, size_t(std::max(live, 0L)));
        }
        summary.nodes.push_back(node);
    }
    return summary;
}

} // namespace braid::tools
