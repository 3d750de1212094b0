#include "graph/memory_plan.h"

#include "base/error.h"
#include "base/log.h"
#include "memory/memory_budget.h"

#include <algorithm>
#include <chrono>
#include <ctime>

namespace braid {

namespace {

constexpr uint32_t NONE = ~uint32_t(0);
constexpr uint32_t MANY = NONE - 1;

double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
}

//! The workspace `opr` asks for, where its kernel runs and its input and output shapes are
//! static; else 0 (a dynamic step's kernel allocates its own).
size_t workspace_bytes(const OperatorNode& opr) {
    if (bound_to_static_values(opr)) return 0;
    for (auto* v : opr.inputs())
        if (!v->shape_known()) return 0;
    for (auto* v : opr.outputs())
        if (!v->shape_known()) return 0;
    return opr.workspace_bytes();
}

double thread_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

} // namespace

//! What one plan() learns about the vars and steps before any placement. Vars are named by
//! their index; each var node is looked up in the index map once.
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
    //! One comp node's steps: the var indices each reads and writes, flattened.
    struct NodeSteps {
        std::vector<uint32_t> in_begin, inputs;   //!< step i reads inputs[in_begin[i]..[i+1])
        std::vector<uint32_t> out_begin, outputs; //!< step i writes outputs[out_begin[i]..)
        std::vector<size_t> positions;            //!< global (topological) position per step
        size_t size() const { return positions.size(); }
    };

    const std::vector<VarNode*>& vars;
    const std::vector<Sequence>& seqs;
    std::vector<NodeSteps> steps; //!< per node

    std::vector<Kind> kind;             //!< per var
    std::vector<uint32_t> root;         //!< per var: whose memory it is (itself unless VIEW)
    std::vector<uint8_t> keeps_layout;  //!< per var: same bytes, same order as its root
    std::vector<uint8_t> fetched;       //!< per var: read by the user after execute()
    std::vector<size_t> bytes;          //!< per var with a static shape: packed size
    std::vector<uint32_t> node, step;   //!< per var: producing comp node and local step
    std::vector<uint32_t> slot;         //!< per var: output index in its operator
    std::vector<uint32_t> last_local;   //!< per root: last reading step on its own node
    std::vector<uint8_t> read_remotely; //!< per root: read by another comp node
    std::vector<RemoteRead> remote_reads;
    std::vector<uint32_t> reader_node; //!< per var, direct readers: NONE, a node, or MANY
    std::vector<uint32_t> reader_step; //!< per var: last direct reading step on reader_node

    Analysis(const std::vector<VarNode*>& v, const std::vector<Sequence>& s) : vars(v), seqs(s) {}

    void run(const std::unordered_map<VarNode*, size_t>& var_index,
             const std::vector<size_t>& fetched_vars) {
        size_t n = vars.size();
        auto index = [&](VarNode* var) { return uint32_t(var_index.at(var)); };
        node.assign(n, NONE);
        step.assign(n, NONE);
        slot.assign(n, 0);
        steps.resize(seqs.size());
        for (uint32_t ni = 0; ni < seqs.size(); ++ni) {
            auto& oprs = seqs[ni].second;
            auto& ns = steps[ni];
            for (uint32_t si = 0; si < oprs.size(); ++si) {
                ns.positions.push_back(oprs[si]->id());
                ns.in_begin.push_back(uint32_t(ns.inputs.size()));
                if (!bound_to_static_values(*oprs[si])) // reads no input otherwise
                    for (auto* in : oprs[si]->inputs()) ns.inputs.push_back(index(in));
                ns.out_begin.push_back(uint32_t(ns.outputs.size()));
                auto& outs = oprs[si]->outputs();
                for (uint32_t k = 0; k < outs.size(); ++k) {
                    uint32_t v = index(outs[k]);
                    ns.outputs.push_back(v);
                    node[v] = ni;
                    step[v] = si;
                    slot[v] = k;
                }
            }
            ns.in_begin.push_back(uint32_t(ns.inputs.size()));
            ns.out_begin.push_back(uint32_t(ns.outputs.size()));
        }

        kind.assign(n, Kind::BOUND);
        root.resize(n);
        keeps_layout.assign(n, 1);
        bytes.assign(n, 0);
        // Vars are in topological order, so a view's input is classified before the view.
        for (uint32_t i = 0; i < n; ++i) {
            VarNode* var = vars[i];
            OperatorNode* opr = var->owner();
            root[i] = i;
            if (var->shape_known()) bytes[i] = var->shape().nr_bytes(var->dtype());
            switch (opr->output_mem(slot[i])) {
            case OutputMem::PLANNED:
                kind[i] = var->shape_known() ? Kind::ARENA : Kind::DYNAMIC;
                break;
            case OutputMem::READONLY_FORWARD: {
                uint32_t src = index(opr->input(opr->forward_input(slot[i])));
                kind[i] = Kind::VIEW;
                root[i] = root[src];
                keeps_layout[i] = keeps_layout[src] && opr->forward_keeps_layout(slot[i]);
                break;
            }
            case OutputMem::BOUND:
                break;
            }
        }
        // What the user reads after execute() must not live in memory that gets reused.
        fetched.assign(n, 0);
        for (size_t f : fetched_vars) {
            fetched[f] = 1;
            if (kind[root[f]] == Kind::ARENA) kind[root[f]] = Kind::OWN;
        }

        last_local.assign(n, NONE);
        read_remotely.assign(n, 0);
        reader_node.assign(n, NONE);
        reader_step.assign(n, 0);
        for (uint32_t ni = 0; ni < steps.size(); ++ni) {
            auto& ns = steps[ni];
            for (uint32_t si = 0; si < ns.size(); ++si)
                for (uint32_t j = ns.in_begin[si]; j < ns.in_begin[si + 1]; ++j) {
                    uint32_t v = ns.inputs[j];
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
                        read_remotely[r] = 1;
                        remote_reads.push_back({r, ni, si});
                    }
                }
        }
    }
};

MemoryPlan::MemoryPlan(const GraphOptions& options)
    : m_enabled(options.enable_memory_plan), m_planner(options.memory_planner),
      m_budget(MemoryBudget::resolve(options.memory_budget)) {
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
    double cpu_start = thread_cpu_ms();
    Analysis a(vars, sequences);
    a.run(var_index, fetched);

    m_own_allocation.resize(vars.size(), false);
    m_arenas.resize(sequences.size());
    m_hooks.assign(sequences.size(), {});
    for (size_t ni = 0; ni < sequences.size(); ++ni)
        m_hooks[ni].resize(sequences[ni].second.size());
    m_report = {};
    m_report.enabled = m_enabled;
    // The budget is charged with every allocation before it is made: fetched outputs first
    // (and, with planning off, every static var), then each comp node's arena once solved.
    m_budget_used = 0;
    m_largest_var.clear();
    size_t own_bytes = 0, largest_bytes = 0;
    for (size_t i = 0; i < vars.size(); ++i) {
        using Kind = Analysis::Kind;
        if (a.kind[i] != Kind::ARENA && a.kind[i] != Kind::OWN) continue;
        if (a.kind[i] == Kind::OWN || !m_enabled) own_bytes += a.bytes[i];
        if (a.bytes[i] > largest_bytes || m_largest_var.empty()) {
            largest_bytes = a.bytes[i];
            m_largest_var = fmt::format("\"{}\" of {}: {} {}, {} bytes", vars[i]->name(),
                                        vars[i]->owner()->describe(), vars[i]->shape().to_string(),
                                        vars[i]->dtype().name(), a.bytes[i]);
        }
    }
    charge_budget(own_bytes, "the fetched outputs' own allocations");
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
    m_report.total_plan_cpu_ms = thread_cpu_ms() - cpu_start;
    if (logger()->should_log(spdlog::level::debug))
        logger()->debug("memory plan:\n{}", m_report.to_string());
}

void MemoryPlan::charge_budget(size_t bytes, const std::string& what) {
    if (__builtin_add_overflow(m_budget_used, bytes, &m_budget_used) ||
        m_budget_used > m_budget.bytes)
        BRAID_THROW(MemoryBudgetError,
                    "the static memory plan needs {} bytes ({}) once {} ({} bytes) is counted, "
                    "over the memory budget of {}; the largest var is {}. Set "
                    "GraphOptions::memory_budget or BRAID_MEMORY_BUDGET (braid-run "
                    "--memory-budget) to allow more",
                    m_budget_used, format_bytes(m_budget_used), what, bytes, m_budget.describe(),
                    m_largest_var);
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
    auto& ns = a.steps[ni];
    auto& oprs = a.seqs[ni].second;
    auto& hooks = m_hooks[ni];
    CompNode cn = a.seqs[ni].first;
    size_t nr_steps = ns.size();

    // This node's arena vars in step order; the planner knows them by their position here.
    std::vector<uint32_t> arena_vars;
    std::vector<uint32_t> key_of(a.vars.size(), NONE);
    for (uint32_t v : ns.outputs)
        if (a.kind[v] == Kind::ARENA) {
            key_of[v] = uint32_t(arena_vars.size());
            arena_vars.push_back(v);
        }

    // Lifetimes: from the writing step to the last local reader (views' readers included).
    // A var read on another comp node stays alive to the end of this node's sequence: a wait
    // for the remote reader before reusing its bytes would add a dependency the graph does not
    // have, and with collectives (whose peers wait for each other across comp nodes) such a
    // wait can deadlock. The next run starts only after every comp node finished.
    std::vector<size_t> lifetime_end(arena_vars.size());
    for (size_t key = 0; key < arena_vars.size(); ++key) {
        uint32_t v = arena_vars[key];
        lifetime_end[key] = size_t(a.last_local[v] == NONE ? a.step[v] : a.last_local[v]) + 1;
    }
    for (auto& rr : a.remote_reads) {
        if (a.node[rr.root] != ni) continue;
        size_t& end = lifetime_end[key_of[rr.root]];
        if (end < nr_steps) ++rn.nr_cross_node_reads;
        end = nr_steps;
    }
    auto planner = MemPlanner::make(m_planner, rn.alignment);
    for (size_t key = 0; key < arena_vars.size(); ++key)
        planner->add(a.step[arena_vars[key]], lifetime_end[key], a.bytes[arena_vars[key]], key);
    // Workspaces, keyed after the vars: alive during their step alone.
    std::vector<std::pair<uint32_t, size_t>> workspaces; // (step, bytes)
    if (cn.device().kind == Device::Kind::CPU)
        for (uint32_t si = 0; si < nr_steps; ++si)
            if (size_t bytes = workspace_bytes(*oprs[si])) {
                planner->add(si, si + 1, bytes, arena_vars.size() + workspaces.size());
                workspaces.emplace_back(si, bytes);
            }

    // In place: an output takes over its input's block when this step is the block's last
    // reader and nothing else can observe the overwrite (see the header for every rule).
    std::vector<uint8_t> taken(arena_vars.size(), 0);
    std::vector<uint32_t> inplace_src(arena_vars.size(), NONE); // by key: the key taken over
    for (uint32_t si = 0; si < nr_steps; ++si) {
        OperatorNode* opr = oprs[si];
        const uint32_t* ins = ns.inputs.data() + ns.in_begin[si];
        size_t nr_ins = ns.in_begin[si + 1] - ns.in_begin[si];
        for (uint32_t j = ns.out_begin[si]; j < ns.out_begin[si + 1]; ++j) {
            uint32_t d = ns.outputs[j];
            int ii = a.kind[d] == Kind::ARENA ? opr->inplace_input(a.slot[d]) : -1;
            if (ii < 0 || size_t(ii) >= nr_ins) continue;
            uint32_t u = ins[ii], c = a.root[u];
            if (a.kind[c] != Kind::ARENA || a.node[c] != ni || a.read_remotely[c] ||
                taken[key_of[c]] || a.last_local[c] != si || !a.keeps_layout[u])
                continue;
            size_t size = a.bytes[d];
            if (a.bytes[u] != size || a.bytes[c] != size ||
                a.vars[u]->dtype() != a.vars[d]->dtype())
                continue;
            // Another input reading the same block must see it element for element.
            bool aliased_differently = false;
            for (size_t k = 0; k < nr_ins; ++k)
                if (a.root[ins[k]] == c && (!a.keeps_layout[ins[k]] || a.bytes[ins[k]] != size))
                    aliased_differently = true;
            if (aliased_differently) continue;
            planner->add_overwrite(key_of[d], key_of[c]);
            taken[key_of[c]] = 1;
            inplace_src[key_of[d]] = key_of[c];
            ++rn.nr_inplace_forwarded;
        }
    }
    planner->solve();

    rn.arena_bytes = planner->arena_size();
    rn.lower_bound_bytes = planner->lower_bound();
    rn.no_reuse_bytes = planner->no_reuse_size();
    rn.nr_planned_vars = arena_vars.size();
    rn.nr_workspaces = workspaces.size();
    charge_budget(rn.arena_bytes, "the arena of " + rn.comp_node);
    Storage& arena = m_arenas[ni];
    if (arena.empty() || arena.size() < rn.arena_bytes)
        arena = Storage::make(rn.arena_bytes, cn.allocator());
    rn.arena_capacity_bytes = arena.size();
    rn.placements.resize(arena_vars.size());
    size_t align = rn.alignment;
    for (size_t key = 0; key < arena_vars.size(); ++key) {
        uint32_t v = arena_vars[key];
        VarNode* var = a.vars[v];
        size_t off = planner->offset(key);
        tensors[v] = Tensor(arena, off, TensorLayout(var->shape(), var->dtype()));
        auto& p = rn.placements[key];
        p.name = var->name();
        p.bytes = (a.bytes[v] + align - 1) / align * align;
        p.offset = off;
        p.lifetime_begin = a.step[v];
        p.lifetime_end = lifetime_end[key];
        p.in_place = inplace_src[key] != NONE;
        p.inplace_of = p.in_place ? long(inplace_src[key]) : -1;
    }
    for (size_t k = 0; k < workspaces.size(); ++k) {
        auto [si, bytes] = workspaces[k];
        size_t off = planner->offset(arena_vars.size() + k);
        hooks[si].workspace = Tensor(arena, off, TensorLayout({bytes}, dtype::Uint8()));
        MemoryReport::VarPlacement p;
        p.name = "workspace of " + oprs[si]->describe();
        p.bytes = (bytes + align - 1) / align * align;
        p.offset = off;
        p.lifetime_begin = si;
        p.lifetime_end = si + 1;
        p.workspace = true;
        rn.placements.push_back(std::move(p));
        rn.workspace_bytes += bytes;
    }

    // Views and dynamic vars produced here.
    for (uint32_t si = 0; si < nr_steps; ++si)
        for (uint32_t j = ns.out_begin[si]; j < ns.out_begin[si + 1]; ++j) {
            uint32_t v = ns.outputs[j];
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
    std::vector<size_t> order(placements.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    n = std::min(n, order.size());
    std::partial_sort(order.begin(), order.begin() + long(n), order.end(), [&](size_t x, size_t y) {
        auto &px = placements[x], &py = placements[y];
        return px.bytes != py.bytes ? px.bytes > py.bytes : x < y;
    });
    std::vector<VarPlacement> res;
    for (size_t i = 0; i < n; ++i) res.push_back(placements[order[i]]);
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
                         "allocations ({}); {} dynamic ({} released early); {} kept for "
                         "reads on other comp nodes; {} workspaces ({})\n",
                         n.nr_planned_vars, n.nr_readonly_forwarded, n.nr_inplace_forwarded,
                         n.nr_own_allocation_vars, format_bytes(n.own_allocation_bytes),
                         n.nr_dynamic_vars, n.nr_dynamic_released, n.nr_cross_node_reads,
                         n.nr_workspaces, format_bytes(n.workspace_bytes));
        for (auto& p : n.largest_vars(nr_largest))
            s += fmt::format("    {:>12} at {:>10}  steps [{}, {}){}  {}\n", format_bytes(p.bytes),
                             p.offset, p.lifetime_begin, p.lifetime_end,
                             p.in_place ? " in place" : "", p.name);
    }
    s += fmt::format("planned in {:.2f} ms ({:.2f} ms CPU)", total_plan_ms, total_plan_cpu_ms);
    return s;
}

} // namespace braid
