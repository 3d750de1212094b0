#include "graph/memory_plan.h"

#include "base/error.h"
#include "base/log.h"

#include <algorithm>
#include <chrono>

namespace braid {

namespace {

constexpr uint32_t NONE = ~uint32_t(0);
constexpr uint32_t MANY = NONE - 1;

size_t output_slot(const OperatorNode* opr, const VarNode* var) {
    size_t k = 0;
    while (opr->output(k) != var) ++k;
    return k;
}

size_t var_bytes(const VarNode* var) {
    return TensorLayout(var->shape(), var->dtype()).nr_bytes();
}

double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
}

std::string format_bytes(size_t b) {
    if (b >= (size_t(1) << 20)) return fmt::format("{:.2f} MiB", double(b) / double(1 << 20));
    if (b >= (size_t(1) << 10)) return fmt::format("{:.1f} KiB", double(b) / double(1 << 10));
    return fmt::format("{} B", b);
}

} // namespace

//! What one plan() learns about the vars and steps before any placement.
struct MemoryPlan::Analysis {
    enum class Kind : uint8_t {
        ARENA,   //!< static PLANNED: placed by the planner
        OWN,     //!< static PLANNED but fetched (or viewed by a fetched var): own allocation
        DYNAMIC, //!< PLANNED with a shape known only at execution
        VIEW,    //!< READONLY_FORWARD: shares the memory of root[]
        BOUND,   //!< set by its operator
    };
    //! A read of an arena var's memory by a step of another comp node.
    struct RemoteRead {
        uint32_t root, node, step;
    };

    const std::vector<VarNode*>& vars;
    const std::unordered_map<VarNode*, size_t>& var_index;
    const std::vector<Sequence>& seqs;

    std::vector<Kind> kind;           //!< per var
    std::vector<uint32_t> root;       //!< per var: whose memory it is (itself unless VIEW)
    std::vector<bool> keeps_layout;   //!< per var: same bytes, same order as its root
    std::vector<bool> fetched;        //!< per var: read by the user after execute()
    std::vector<uint32_t> node, step; //!< per var: producing comp node and local step
    std::vector<uint32_t> last_local; //!< per root: last reading step on its own node
    std::vector<bool> read_remotely;  //!< per root: read by another comp node
    std::vector<RemoteRead> remote_reads;
    std::vector<uint32_t> reader_node; //!< per var, direct readers: NONE, a node, or MANY
    std::vector<uint32_t> reader_step; //!< per var: last direct reading step on reader_node
    std::vector<std::vector<size_t>> positions; //!< per node: global position of each step

    Analysis(const std::vector<VarNode*>& v, const std::unordered_map<VarNode*, size_t>& vi,
             const std::vector<Sequence>& s)
        : vars(v), var_index(vi), seqs(s) {}

    size_t index(VarNode* var) const { return var_index.at(var); }

    void run(const std::vector<size_t>& fetched_vars) {
        size_t n = vars.size();
        fetched.assign(n, false);
        kind.assign(n, Kind::BOUND);
        root.resize(n);
        keeps_layout.assign(n, true);
        node.assign(n, NONE);
        step.assign(n, NONE);
        // Vars are in topological order, so a view's input is classified before the view.
        for (size_t i = 0; i < n; ++i) {
            VarNode* var = vars[i];
            OperatorNode* opr = var->owner();
            size_t k = output_slot(opr, var);
            root[i] = uint32_t(i);
            switch (opr->output_mem(k)) {
            case OutputMem::PLANNED:
                kind[i] = var->shape_known() ? Kind::ARENA : Kind::DYNAMIC;
                break;
            case OutputMem::READONLY_FORWARD: {
                size_t src = index(opr->input(opr->forward_input(k)));
                kind[i] = Kind::VIEW;
                root[i] = root[src];
                keeps_layout[i] = keeps_layout[src] && opr->forward_keeps_layout(k);
                break;
            }
            case OutputMem::BOUND:
                break;
            }
        }
        // What the user reads after execute() must not live in memory that gets reused.
        for (size_t f : fetched_vars) {
            fetched[f] = true;
            if (kind[root[f]] == Kind::ARENA) kind[root[f]] = Kind::OWN;
        }

        positions.resize(seqs.size());
        for (uint32_t ni = 0; ni < seqs.size(); ++ni) {
            auto& oprs = seqs[ni].second;
            for (uint32_t si = 0; si < oprs.size(); ++si) {
                positions[ni].push_back(oprs[si]->id());
                for (auto* out : oprs[si]->outputs()) {
                    size_t v = index(out);
                    node[v] = ni;
                    step[v] = si;
                }
            }
        }

        last_local.assign(n, NONE);
        read_remotely.assign(n, false);
        reader_node.assign(n, NONE);
        reader_step.assign(n, 0);
        for (uint32_t ni = 0; ni < seqs.size(); ++ni) {
            auto& oprs = seqs[ni].second;
            for (uint32_t si = 0; si < oprs.size(); ++si)
                for (auto* in : oprs[si]->inputs()) {
                    size_t v = index(in);
                    if (reader_node[v] == NONE || reader_node[v] == ni) {
                        reader_node[v] = ni;
                        reader_step[v] = si;
                    } else {
                        reader_node[v] = MANY;
                    }
                    uint32_t r = root[v];
                    if (kind[r] != Kind::ARENA) continue;
                    if (node[r] == ni) {
                        last_local[r] = last_local[r] == NONE ? si : std::max(last_local[r], si);
                    } else {
                        read_remotely[r] = true;
                        remote_reads.push_back({r, ni, si});
                    }
                }
        }
    }
};

MemoryPlan::MemoryPlan(const GraphOptions& options)
    : m_enabled(options.enable_memory_plan), m_planner(options.memory_planner) {
    MemPlanner::make(m_planner, 64); // an unknown name fails at compile(), not at a re-plan
    if (m_planner.empty()) m_planner = MemPlanner::default_algorithm();
}

size_t MemoryPlan::alignment_for(CompNode cn) {
    size_t device_min = cn.device().kind == Device::Kind::CUDA ? 256 : 64;
    return std::max(cn.allocator()->alignment(), device_min);
}

void MemoryPlan::plan(const std::vector<VarNode*>& vars,
                      const std::unordered_map<VarNode*, size_t>& var_index,
                      const std::vector<Sequence>& sequences, const std::vector<size_t>& fetched,
                      std::vector<Tensor>& tensors) {
    auto start = std::chrono::steady_clock::now();
    Analysis a(vars, var_index, sequences);
    a.run(fetched);

    m_own_allocation.resize(vars.size(), false);
    m_arenas.resize(sequences.size());
    m_hooks.assign(sequences.size(), {});
    for (size_t ni = 0; ni < sequences.size(); ++ni)
        m_hooks[ni].resize(sequences[ni].second.size());
    m_report = {};
    m_report.enabled = m_enabled;
    m_report.nodes.resize(sequences.size());
    for (size_t ni = 0; ni < sequences.size(); ++ni) {
        auto& rn = m_report.nodes[ni];
        rn.comp_node = sequences[ni].first.locator();
        rn.planner = m_enabled ? m_planner : "none";
        rn.alignment = m_enabled ? alignment_for(sequences[ni].first) : 0;
        rn.nr_steps = sequences[ni].second.size();
    }

    // Vars kept out of any arena: fetched outputs get (or keep) their own allocation.
    for (size_t i = 0; i < vars.size(); ++i) {
        bool own =
            a.kind[i] == Analysis::Kind::OWN || (!m_enabled && a.kind[i] == Analysis::Kind::ARENA);
        if (!own) {
            if (a.kind[i] == Analysis::Kind::ARENA) m_own_allocation[i] = false;
            continue;
        }
        VarNode* var = vars[i];
        Tensor& t = tensors[i];
        if (!m_own_allocation[i] || t.empty() || t.shape() != var->shape() ||
            t.dtype() != var->dtype())
            t = Tensor(var->shape(), var->dtype(), var->comp_node().allocator());
        m_own_allocation[i] = true;
        auto& rn = m_report.nodes[a.node[i]];
        ++rn.nr_own_allocation_vars;
        rn.own_allocation_bytes += t.nr_bytes();
    }

    if (m_enabled) {
        for (size_t ni = 0; ni < sequences.size(); ++ni) plan_node(a, ni, tensors);
    } else {
        allocate_without_plan(a, tensors);
    }
    m_report.total_plan_ms = ms_since(start);
    if (logger()->should_log(spdlog::level::debug))
        logger()->debug("memory plan:\n{}", m_report.to_string());
}

void MemoryPlan::allocate_without_plan(Analysis& a, std::vector<Tensor>&) {
    using Kind = Analysis::Kind;
    // Static vars already got their own allocations; dynamic ones allocate at execution.
    for (size_t i = 0; i < a.vars.size(); ++i)
        if (a.kind[i] == Kind::DYNAMIC) ++m_report.nodes[a.node[i]].nr_dynamic_vars;
}

void MemoryPlan::plan_node(Analysis& a, size_t ni, std::vector<Tensor>& tensors) {
    using Kind = Analysis::Kind;
    auto start = std::chrono::steady_clock::now();
    auto& rn = m_report.nodes[ni];
    auto& oprs = a.seqs[ni].second;
    auto& hooks = m_hooks[ni];
    CompNode cn = a.seqs[ni].first;
    auto planner = MemPlanner::make(m_planner, rn.alignment);
    size_t nr_steps = oprs.size();

    // Lifetimes of this node's arena vars; reads from other nodes extend them to the first
    // local step that follows the reader in the global order, and that step waits for it.
    std::vector<size_t> arena_vars;
    std::vector<size_t> lifetime_end(a.vars.size(), 0);
    for (auto* opr : oprs)
        for (auto* out : opr->outputs()) {
            size_t v = a.index(out);
            if (a.kind[v] != Kind::ARENA) continue;
            arena_vars.push_back(v);
            size_t end = a.step[v] + 1;
            if (a.last_local[v] != NONE) end = std::max(end, size_t(a.last_local[v]) + 1);
            lifetime_end[v] = end;
        }
    for (auto& rr : a.remote_reads) {
        if (a.node[rr.root] != ni) continue;
        size_t reader_pos = a.positions[rr.node][rr.step];
        auto& pos = a.positions[ni];
        size_t x = size_t(std::upper_bound(pos.begin(), pos.end(), reader_pos) - pos.begin());
        lifetime_end[rr.root] = std::max(lifetime_end[rr.root], x);
        if (x >= nr_steps) continue; // alive to the end of the run: nothing to wait for
        auto& waits = hooks[x].waits;
        auto it =
            std::find_if(waits.begin(), waits.end(), [&](auto& w) { return w.first == rr.node; });
        if (it == waits.end()) {
            waits.emplace_back(rr.node, rr.step + 1);
            ++rn.nr_cross_node_waits;
        } else {
            it->second = std::max(it->second, rr.step + 1);
        }
        m_hooks[rr.node][rr.step].notify = true;
    }
    for (size_t v : arena_vars) planner->add(a.step[v], lifetime_end[v], var_bytes(a.vars[v]), v);

    // In place: an output takes over its input's block when this step is the block's last
    // reader and nothing else can observe the overwrite (see the header for every rule).
    std::vector<bool> taken(a.vars.size(), false);
    std::vector<size_t> inplace_src(a.vars.size(), SIZE_MAX);
    for (size_t si = 0; si < nr_steps; ++si) {
        OperatorNode* opr = oprs[si];
        for (size_t k = 0; k < opr->outputs().size(); ++k) {
            size_t d = a.index(opr->output(k));
            int ii = opr->inplace_input(k);
            if (a.kind[d] != Kind::ARENA || ii < 0 || size_t(ii) >= opr->inputs().size()) continue;
            size_t u = a.index(opr->input(size_t(ii)));
            uint32_t c = a.root[u];
            if (a.kind[c] != Kind::ARENA || a.node[c] != ni || a.read_remotely[c] || taken[c] ||
                a.last_local[c] != si || !a.keeps_layout[u])
                continue;
            size_t bytes = var_bytes(a.vars[d]);
            if (var_bytes(a.vars[u]) != bytes || var_bytes(a.vars[c]) != bytes ||
                a.vars[u]->dtype() != a.vars[d]->dtype())
                continue;
            // Another input reading the same block must see it element for element.
            bool aliased_differently = false;
            for (auto* in : opr->inputs()) {
                size_t w = a.index(in);
                if (a.root[w] == c && (!a.keeps_layout[w] || var_bytes(in) != bytes))
                    aliased_differently = true;
            }
            if (aliased_differently) continue;
            planner->add_overwrite(d, c);
            taken[c] = true;
            inplace_src[d] = c;
            ++rn.nr_inplace_forwarded;
        }
    }
    planner->solve();

    rn.arena_bytes = planner->arena_size();
    rn.lower_bound_bytes = planner->lower_bound();
    rn.no_reuse_bytes = planner->no_reuse_size();
    rn.nr_planned_vars = arena_vars.size();
    Storage& arena = m_arenas[ni];
    if (arena.empty() || arena.size() < rn.arena_bytes)
        arena = Storage::make(rn.arena_bytes, cn.allocator());
    rn.arena_capacity_bytes = arena.size();
    std::unordered_map<size_t, long> placement_of;
    for (size_t v : arena_vars) {
        VarNode* var = a.vars[v];
        size_t off = planner->offset(v);
        tensors[v] = Tensor(arena, off, TensorLayout(var->shape(), var->dtype()));
        MemoryReport::VarPlacement p;
        p.name = var->name();
        p.bytes = (var_bytes(var) + rn.alignment - 1) / rn.alignment * rn.alignment;
        p.offset = off;
        p.lifetime_begin = a.step[v];
        p.lifetime_end = lifetime_end[v];
        if (inplace_src[v] != SIZE_MAX) {
            p.in_place = true;
            p.inplace_of = placement_of.at(inplace_src[v]);
        }
        placement_of[v] = long(rn.placements.size());
        rn.placements.push_back(std::move(p));
    }

    // Views and dynamic vars produced here.
    for (size_t si = 0; si < nr_steps; ++si)
        for (auto* out : oprs[si]->outputs()) {
            size_t v = a.index(out);
            Kind rk = a.kind[a.root[v]];
            if (a.kind[v] == Kind::VIEW && (rk == Kind::ARENA || rk == Kind::OWN))
                ++rn.nr_readonly_forwarded;
            if (a.kind[v] == Kind::DYNAMIC) {
                ++rn.nr_dynamic_vars;
                tensors[v] = Tensor(); // never keep a view of an earlier plan's arena
            }
            if (rk != Kind::DYNAMIC || a.fetched[v] || a.reader_node[v] == MANY) continue;
            // Release the tensor after its last direct reader (views hold their own
            // reference); with readers on several nodes it stays until the next run.
            if (a.reader_node[v] == NONE)
                hooks[si].release_after.push_back(v);
            else
                m_hooks[a.reader_node[v]][a.reader_step[v]].release_after.push_back(v);
            if (a.kind[v] == Kind::DYNAMIC) ++rn.nr_dynamic_released;
        }
    rn.plan_ms = ms_since(start);
}

std::vector<MemoryReport::VarPlacement> MemoryReport::Node::largest_vars(size_t n) const {
    std::vector<VarPlacement> res = placements;
    std::stable_sort(res.begin(), res.end(), [](auto& x, auto& y) { return x.bytes > y.bytes; });
    if (res.size() > n) res.resize(n);
    return res;
}

std::string MemoryReport::to_string(size_t nr_largest) const {
    std::string s;
    for (auto& n : nodes) {
        if (!enabled) {
            s += fmt::format("{}: memory planning off; {} static vars in {} of separate "
                             "allocations, {} dynamic vars\n",
                             n.comp_node, n.nr_own_allocation_vars,
                             format_bytes(n.own_allocation_bytes), n.nr_dynamic_vars);
            continue;
        }
        double ratio =
            n.lower_bound_bytes ? double(n.arena_bytes) / double(n.lower_bound_bytes) : 1.0;
        s += fmt::format(
            "{}: {} steps, arena {} (lower bound {}, x{:.3f}; without reuse {}), planner {} "
            "aligned to {}, {:.2f} ms\n",
            n.comp_node, n.nr_steps, format_bytes(n.arena_bytes), format_bytes(n.lower_bound_bytes),
            ratio, format_bytes(n.no_reuse_bytes), n.planner, n.alignment, n.plan_ms);
        s += fmt::format("  {} planned vars; forwarded {} read-only + {} in place; {} own "
                         "allocations ({}); {} dynamic ({} released early); {} cross-node "
                         "waits\n",
                         n.nr_planned_vars, n.nr_readonly_forwarded, n.nr_inplace_forwarded,
                         n.nr_own_allocation_vars, format_bytes(n.own_allocation_bytes),
                         n.nr_dynamic_vars, n.nr_dynamic_released, n.nr_cross_node_waits);
        for (auto& p : n.largest_vars(nr_largest))
            s += fmt::format("    {:>12} at {:>10}  steps [{}, {}){}  {}\n", format_bytes(p.bytes),
                             p.offset, p.lifetime_begin, p.lifetime_end,
                             p.in_place ? " in place" : "", p.name);
    }
    s += fmt::format("planned in {:.2f} ms", total_plan_ms);
    return s;
}

} // namespace braid
