#include "parallel/auto_shard.h"

#include "base/error.h"
#include "graph/graph_copy.h"
#include "graph/input_node.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <unordered_map>

namespace braid::parallel {

namespace {

//! The price of a forbidden resharding: the ILP never chooses it.
constexpr double FORBIDDEN_S = std::numeric_limits<double>::infinity();

} // namespace

// ---------------------------------------------------------------------------------------------
// The communication model.

size_t CommModel::bytes_sent(const ReshardStep& step, const std::vector<uint32_t>& mesh_shape,
                             size_t elem_bytes) {
    double n = mesh_shape.at(step.axis);
    double before = double(step.local_before.total_nr_elems() * elem_bytes);
    double after = double(step.local_after.total_nr_elems() * elem_bytes);
    bool to_rep = std::holds_alternative<Replicate>(step.to);
    bool from_partial = std::holds_alternative<Partial>(step.from);
    if (std::holds_alternative<Replicate>(step.from)) return 0;          // a local slice
    if (from_partial && to_rep) return size_t(2 * (n - 1) / n * before); // all-reduce
    if (from_partial) return size_t((n - 1) / n * before);               // reduce-scatter
    if (to_rep) return size_t((n - 1) / n * after);                      // all-gather
    return size_t((n - 1) / n * before);                                 // all-to-all
}

double CommModel::seconds(const ReshardStep& step, const std::vector<uint32_t>& mesh_shape,
                          size_t elem_bytes) const {
    if (std::holds_alternative<Replicate>(step.from)) return 0;
    bool all_reduce =
        std::holds_alternative<Partial>(step.from) && std::holds_alternative<Replicate>(step.to);
    return (all_reduce ? 2 : 1) * latency_s +
           double(bytes_sent(step, mesh_shape, elem_bytes)) / bytes_per_s;
}

// ---------------------------------------------------------------------------------------------
// The planner.

struct AutoSharder::Impl {
    Mesh mesh;
    AutoShardOptions options;
    std::shared_ptr<ComputingGraph> graph;
    SymbolVarArray outputs;
    std::vector<OperatorNode*> oprs;
    std::unordered_map<const OperatorNode*, size_t> index;
    std::vector<std::vector<OperatorStrategy>> cands;
    //! Per operator input k: (producer index, its output index).
    std::vector<std::vector<std::pair<size_t, size_t>>> producers;
    std::vector<std::vector<size_t>> consumers;
    std::vector<std::vector<size_t>>
        sink_outputs; //!< per operator: its outputs that are graph outputs

    // Groups of merged operators: per group its members (head first) and, per group strategy,
    // each member's strategy.
    struct Group {
        std::vector<size_t> members;
        std::vector<std::vector<size_t>> member_choice; //!< [group strategy][member]
    };
    std::vector<Group> groups;
    std::vector<size_t> group_of;
    ShardProblem problem;

    Impl(Mesh m, AutoShardOptions o) : mesh(std::move(m)), options(std::move(o)) {}

    double reshard_cost(const VarNode* var, const MeshPlacement& from, const MeshPlacement& to,
                        double* memory = nullptr, size_t* bytes = nullptr) const {
        if (from == to) return 0;
        auto steps = reshard_steps(var->shape(), from, to, mesh.shape());
        size_t elem = var->dtype().size();
        double t = 0;
        for (auto& s : steps) {
            t += options.comm.seconds(s, mesh.shape(), elem);
            if (memory) *memory += double(s.local_after.total_nr_elems() * elem);
            if (bytes) *bytes += CommModel::bytes_sent(s, mesh.shape(), elem);
        }
        return t;
    }

    //! The price of input k of operator v placed `from` by its producer and read as `to`.
    double edge_cost(size_t v, size_t k, const MeshPlacement& from, const MeshPlacement& to,
                     double* memory = nullptr, size_t* bytes = nullptr) const {
        if (ignores_input_placement(*oprs[v], k)) return 0;
        if (forbids_input_reshard(*oprs[v], k) && from != to) return FORBIDDEN_S;
        return reshard_cost(oprs[v]->input(k), from, to, memory, bytes);
    }

    double output_memory(size_t v, const OperatorStrategy& s) const {
        double m = 0;
        for (size_t k = 0; k < oprs[v]->outputs().size(); ++k)
            m += double(mesh_local_shape(oprs[v]->output(k)->shape(), s.outputs[k], mesh.shape())
                            .total_nr_elems() *
                        oprs[v]->output(k)->dtype().size());
        return m;
    }

    double sink_cost(size_t v, const OperatorStrategy& s, double* memory = nullptr,
                     size_t* bytes = nullptr) const {
        double t = 0;
        for (size_t k : sink_outputs[v])
            t += reshard_cost(oprs[v]->output(k), s.outputs[k], replicated_placement(mesh.ndim()),
                              memory, bytes);
        return t;
    }

    void analyse(const SymbolVarArray& user_outputs);
    std::vector<double> operator_times();
    void build_groups(bool merge);
    void build_problem();
    ShardPlan evaluate(const std::vector<size_t>& choice) const;
};

void AutoSharder::Impl::analyse(const SymbolVarArray& user_outputs) {
    if (user_outputs.empty()) BRAID_THROW(ValueError, "auto-shard: no outputs to plan");
    GraphOptions go = user_outputs[0].node()->owner()->graph()->options();
    go.enable_fusion = false;
    graph = ComputingGraph::make(go);
    outputs = copy_graph(user_outputs, *graph, {}, false);
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i].node()->set_name(user_outputs[i].name());
    for (auto& o : graph->operators()) {
        index[o.get()] = oprs.size();
        oprs.push_back(o.get());
    }
    std::unordered_map<const VarNode*, std::pair<size_t, size_t>> made_by;
    for (size_t v = 0; v < oprs.size(); ++v)
        for (size_t k = 0; k < oprs[v]->outputs().size(); ++k) made_by[oprs[v]->output(k)] = {v, k};
    producers.resize(oprs.size());
    consumers.resize(oprs.size());
    sink_outputs.resize(oprs.size());
    for (size_t v = 0; v < oprs.size(); ++v)
        for (auto* in : oprs[v]->inputs()) {
            auto p = made_by.at(in);
            producers[v].push_back(p);
            consumers[p.first].push_back(v);
        }
    for (auto& out : outputs) {
        auto [v, k] = made_by.at(out.node());
        if (!out.node()->shape_known())
            BRAID_THROW(ValueError,
                        "auto-shard: the shape of output \"{}\" is not static; give "
                        "the inputs static shapes",
                        out.name());
        sink_outputs[v].push_back(k);
    }
    std::vector<double> times = operator_times();
    for (size_t v = 0; v < oprs.size(); ++v)
        cands.push_back(enumerate_strategies(*oprs[v], mesh, times[v]));
}

std::vector<double> AutoSharder::Impl::operator_times() {
    std::vector<double> t(oprs.size(), 0.0);
    if (options.costs == AutoShardOptions::Costs::ANALYTIC) {
        for (size_t v = 0; v < oprs.size(); ++v) {
            // Sources and reshapes (views) cost nothing.
            std::string type = oprs[v]->type_name();
            if (is_source_operator(*oprs[v]) || type == "Reshape" || type == "AxisAddRemove")
                continue;
            double bytes = 0;
            for (auto* in : oprs[v]->inputs()) bytes += double(in->static_bytes());
            for (auto* out : oprs[v]->outputs()) bytes += double(out->static_bytes());
            double flops = operator_flops(*oprs[v]);
            t[v] = flops / options.flops_per_s + bytes / options.memory_bytes_per_s;
        }
        return t;
    }
    // Measured: run the analysed graph on one device, each operator's kernel time per run.
    for (auto* o : oprs)
        if (auto type = std::string(o->type_name()); type == "RemoteSend" || type == "RemoteRecv")
            BRAID_THROW(ValueError,
                        "auto-shard: {} transfers to another rank, so the graph cannot run "
                        "alone to measure its operators; plan it with analytic costs",
                        o->describe());
    auto exec = graph->compile(std::vector<OutputSpec>(outputs.begin(), outputs.end()));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    for (auto* o : oprs)
        if (auto* in = dynamic_cast<InputNode*>(o)) {
            Tensor value(o->output(0)->shape(), o->output(0)->dtype());
            if (value.dtype() == dtype::Float32())
                for (size_t i = 0; i < value.shape().total_nr_elems(); ++i)
                    value.ptr<float>()[i] = uni(rng);
            else
                std::memset(value.raw_ptr(), 0, value.nr_bytes());
            exec->feed(in->input_name(), value);
        }
    std::vector<std::vector<double>> runs(oprs.size());
    std::vector<double> current(oprs.size(), 0.0);
    exec->set_step_observer([&](const OperatorNode& o, auto begin, auto end) {
        auto it = index.find(&o);
        if (it != index.end())
            current[it->second] += std::chrono::duration<double>(end - begin).count();
    });
    // Warm-up runs until a run is no faster than the one before (at most 10): kernels build
    // their primitives and the pool and caches settle (a fixed three runs were not enough: the
    // first plan of a process measured up to 2.6x its operators' time).
    double last = std::numeric_limits<double>::infinity();
    for (int r = 0; r < 10; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        exec->run();
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (t >= last * 0.97) break;
        last = t;
    }
    for (int r = 0; r < std::max(options.measure_repeats, 1); ++r) {
        std::fill(current.begin(), current.end(), 0.0);
        exec->run();
        for (size_t v = 0; v < oprs.size(); ++v) runs[v].push_back(current[v]);
    }
    for (size_t v = 0; v < oprs.size(); ++v) {
        std::sort(runs[v].begin(), runs[v].end());
        t[v] = runs[v][runs[v].size() / 2];
    }
    return t;
}

void AutoSharder::Impl::build_groups(bool merge) {
    group_of.assign(oprs.size(), 0);
    for (size_t v = 0; v < oprs.size(); ++v) {
        // A follower joins the group of its one computed input when that input feeds only it.
        if (merge && follows_its_input(*oprs[v]) && sink_outputs[v].empty()) {
            std::optional<size_t> from;
            size_t input_k = 0, computed = 0;
            for (size_t k = 0; k < producers[v].size(); ++k)
                if (!is_source_operator(*oprs[producers[v][k].first])) {
                    ++computed;
                    from = producers[v][k].first;
                    input_k = k;
                }
            if (computed == 1 && consumers[*from].size() == 1 && sink_outputs[*from].empty() &&
                oprs[*from]->outputs().size() == 1) {
                Group& g = groups[group_of[*from]];
                size_t member_of_from =
                    std::find(g.members.begin(), g.members.end(), *from) - g.members.begin();
                // It follows: it reads its input as the producer placed it (a replicated
                // producer keeps a replicated follower). Cheapest given the producer's placement
                // only when no strategy reads it as it is (a partial sum, say): a slice of a
                // replicated input costs nothing, so the cheapest would split every follower and
                // leave the resharding to whatever reads it next.
                for (auto& choice : g.member_choice) {
                    const MeshPlacement& given = cands[*from][choice[member_of_from]].outputs[0];
                    size_t best = 0;
                    double best_cost = std::numeric_limits<double>::infinity();
                    for (bool exact : {true, false}) {
                        for (size_t j = 0; j < cands[v].size(); ++j) {
                            if (exact && cands[v][j].inputs[input_k] != given) continue;
                            double c = cands[v][j].compute_s +
                                       edge_cost(v, input_k, given, cands[v][j].inputs[input_k]);
                            if (c < best_cost) {
                                best_cost = c;
                                best = j;
                            }
                        }
                        if (best_cost < std::numeric_limits<double>::infinity()) break;
                    }
                    choice.push_back(best);
                }
                g.members.push_back(v);
                group_of[v] = group_of[*from];
                continue;
            }
        }
        Group g;
        g.members = {v};
        for (size_t i = 0; i < cands[v].size(); ++i) g.member_choice.push_back({i});
        group_of[v] = groups.size();
        groups.push_back(std::move(g));
    }
    if (!merge) return;
    // A parameter or constant read by one operator joins that operator's group, placed as it
    // reads it (the least memory among equally cheap placements).
    std::vector<bool> absorbed(groups.size(), false);
    for (size_t v = 0; v < oprs.size(); ++v) {
        std::string type = oprs[v]->type_name();
        if ((type != "SharedParam" && type != "ImmutableTensor") || consumers[v].size() != 1 ||
            !sink_outputs[v].empty() || groups[group_of[v]].members.size() != 1)
            continue;
        size_t c = consumers[v][0];
        Group& g = groups[group_of[c]];
        size_t mc = std::find(g.members.begin(), g.members.end(), c) - g.members.begin();
        size_t k =
            std::find(oprs[c]->inputs().begin(), oprs[c]->inputs().end(), oprs[v]->output(0)) -
            oprs[c]->inputs().begin();
        for (auto& choice : g.member_choice) {
            const MeshPlacement& want = cands[c][choice[mc]].inputs[k];
            size_t best = 0;
            double best_cost = std::numeric_limits<double>::infinity(), best_memory = 0;
            for (size_t j = 0; j < cands[v].size(); ++j) {
                double cost = edge_cost(c, k, cands[v][j].outputs[0], want);
                double memory = output_memory(v, cands[v][j]);
                if (cost < best_cost || (cost == best_cost && memory < best_memory)) {
                    best_cost = cost;
                    best_memory = memory;
                    best = j;
                }
            }
            choice.push_back(best);
        }
        g.members.push_back(v);
        absorbed[group_of[v]] = true;
        group_of[v] = group_of[c];
    }
    // Drop the absorbed groups and renumber.
    std::vector<Group> kept;
    std::vector<size_t> renumber(groups.size(), 0);
    for (size_t i = 0; i < groups.size(); ++i)
        if (!absorbed[i]) {
            renumber[i] = kept.size();
            kept.push_back(std::move(groups[i]));
        }
    groups = std::move(kept);
    for (auto& gv : group_of) gv = renumber[gv];
}

void AutoSharder::Impl::build_problem() {
    problem = {};
    problem.memory_limit = double(options.memory_limit);
    for (auto& g : groups) {
        ShardProblem::Node node;
        node.name = oprs[g.members[0]]->name();
        for (auto& choice : g.member_choice) {
            double cost = 0, memory = 0;
            for (size_t m = 0; m < g.members.size(); ++m) {
                size_t v = g.members[m];
                const auto& s = cands[v][choice[m]];
                cost += s.compute_s + sink_cost(v, s, &memory);
                memory += output_memory(v, s);
                // Edges inside the group.
                for (size_t k = 0; k < producers[v].size(); ++k) {
                    auto [u, o] = producers[v][k];
                    if (group_of[u] != group_of[v]) continue;
                    size_t mu =
                        std::find(g.members.begin(), g.members.end(), u) - g.members.begin();
                    cost += edge_cost(v, k, cands[u][choice[mu]].outputs[o], s.inputs[k], &memory);
                }
            }
            node.cost.push_back(cost);
            node.memory.push_back(memory);
        }
        problem.nodes.push_back(std::move(node));
    }
    // Edges between groups: one per (consumer input), priced over both groups' strategies.
    for (size_t v = 0; v < oprs.size(); ++v)
        for (size_t k = 0; k < producers[v].size(); ++k) {
            auto [u, o] = producers[v][k];
            size_t gu = group_of[u], gv = group_of[v];
            if (gu == gv) continue;
            const Group &GU = groups[gu], &GV = groups[gv];
            size_t mu = std::find(GU.members.begin(), GU.members.end(), u) - GU.members.begin();
            size_t mv = std::find(GV.members.begin(), GV.members.end(), v) - GV.members.begin();
            ShardProblem::Edge e;
            e.from = gu;
            e.to = gv;
            for (auto& cu : GU.member_choice)
                for (auto& cv : GV.member_choice) {
                    double memory = 0;
                    e.cost.push_back(edge_cost(v, k, cands[u][cu[mu]].outputs[o],
                                               cands[v][cv[mv]].inputs[k], &memory));
                    e.memory.push_back(memory);
                }
            problem.edges.push_back(std::move(e));
        }
}

ShardPlan AutoSharder::Impl::evaluate(const std::vector<size_t>& choice) const {
    ShardPlan plan;
    plan.mesh = mesh;
    for (size_t v = 0; v < oprs.size(); ++v) {
        const auto& s = cands[v][choice[v]];
        plan.operators.push_back({oprs[v], s});
        plan.compute_s += s.compute_s;
        plan.comm_s += sink_cost(v, s, &plan.memory_bytes, &plan.comm_bytes);
        plan.memory_bytes += output_memory(v, s);
        for (size_t k = 0; k < producers[v].size(); ++k) {
            auto [u, o] = producers[v][k];
            plan.comm_s += edge_cost(v, k, cands[u][choice[u]].outputs[o], s.inputs[k],
                                     &plan.memory_bytes, &plan.comm_bytes);
        }
        if (auto* in = dynamic_cast<InputNode*>(oprs[v])) {
            const VarNode* var = oprs[v]->output(0);
            plan.args.push_back(
                {in->input_name(), var->shape(), var->dtype(),
                 mesh_placement_spec(var->shape().ndim(), s.outputs[0], mesh.shape())});
        }
    }
    plan.predicted_s = plan.compute_s + plan.comm_s;
    plan.ilp_nodes = problem.nodes.size();
    plan.ilp_edges = problem.edges.size();
    return plan;
}

AutoSharder::AutoSharder(const SymbolVarArray& outputs, Mesh mesh, AutoShardOptions options)
    : m_impl(std::make_unique<Impl>(std::move(mesh), std::move(options))) {
    m_impl->analyse(outputs);
    bool merge = m_impl->options.merge_followers.value_or(m_impl->oprs.size() > 200);
    m_impl->build_groups(merge);
    m_impl->build_problem();
}

AutoSharder::~AutoSharder() = default;

size_t AutoSharder::nr_operators() const {
    return m_impl->oprs.size();
}
OperatorNode& AutoSharder::operator_at(size_t i) const {
    return *m_impl->oprs.at(i);
}
const std::vector<OperatorStrategy>& AutoSharder::candidates(size_t i) const {
    return m_impl->cands.at(i);
}
const ShardProblem& AutoSharder::problem() const {
    return m_impl->problem;
}
const SymbolVarArray& AutoSharder::outputs() const {
    return m_impl->outputs;
}

ShardPlan AutoSharder::solve() const {
    auto& I = *m_impl;
    auto solutions = solve_shard_ilp(I.problem, I.options.time_limit_s, I.options.runner_ups);
    auto per_operator = [&](const ShardSolution& s) {
        std::vector<size_t> choice(I.oprs.size());
        for (size_t g = 0; g < I.groups.size(); ++g)
            for (size_t m = 0; m < I.groups[g].members.size(); ++m)
                choice[I.groups[g].members[m]] = I.groups[g].member_choice[s.choice[g]][m];
        return choice;
    };
    ShardPlan plan = I.evaluate(per_operator(solutions.at(0)));
    plan.solved = true;
    plan.optimal = solutions[0].optimal;
    plan.solve_s = solutions[0].solve_seconds;
    for (size_t i = 1; i < solutions.size(); ++i) {
        ShardPlan r = I.evaluate(per_operator(solutions[i]));
        plan.runner_ups.push_back({r.predicted_s, r.memory_bytes});
    }
    return plan;
}

ShardPlan AutoSharder::plan_propagated(
    const std::function<std::optional<MeshPlacement>(const OperatorNode&)>& annotate) const {
    auto& I = *m_impl;
    std::vector<size_t> choice(I.oprs.size());
    for (size_t v = 0; v < I.oprs.size(); ++v) {
        std::optional<MeshPlacement> want = annotate(*I.oprs[v]);
        double best = std::numeric_limits<double>::infinity();
        bool found = false;
        for (size_t i = 0; i < I.cands[v].size(); ++i) {
            const auto& s = I.cands[v][i];
            if (want && !s.outputs.empty() && s.outputs[0] != *want) continue;
            double cost = s.compute_s;
            for (size_t k = 0; k < I.producers[v].size(); ++k) {
                auto [u, o] = I.producers[v][k];
                cost += I.edge_cost(v, k, I.cands[u][choice[u]].outputs[o], s.inputs[k]);
            }
            if (!found || cost < best) {
                best = cost;
                choice[v] = i;
                found = true;
            }
        }
        if (!found)
            BRAID_THROW(ValueError, "auto-shard: {} has no strategy whose output is placed {}",
                        I.oprs[v]->describe(), mesh_placement_name(*want));
    }
    return I.evaluate(choice);
}

std::function<MeshPlacement(const OperatorNode&)> data_parallel_placement(const Mesh& mesh) {
    return [mesh](const OperatorNode& opr) {
        MeshPlacement p = replicated_placement(mesh.ndim());
        std::string type = opr.type_name();
        if (type == "SharedParam" || type == "ImmutableTensor") return p;
        for (size_t a = 0; a < mesh.ndim(); ++a)
            if (mesh.shape()[a] > 1) p[a] = Shard{0};
        return p;
    };
}

ShardPlan
AutoSharder::plan_where(const std::function<MeshPlacement(const OperatorNode&)>& want) const {
    auto& I = *m_impl;
    std::vector<size_t> choice(I.oprs.size());
    for (size_t v = 0; v < I.oprs.size(); ++v) {
        MeshPlacement w = want(*I.oprs[v]);
        double best = std::numeric_limits<double>::infinity();
        bool found = false;
        for (size_t i = 0; i < I.cands[v].size(); ++i)
            if (I.cands[v][i].outputs.empty() || I.cands[v][i].outputs[0] == w)
                if (I.cands[v][i].compute_s < best) {
                    best = I.cands[v][i].compute_s;
                    choice[v] = i;
                    found = true;
                }
        if (!found)
            BRAID_THROW(ValueError, "auto-shard: {} has no strategy whose output is placed {}",
                        I.oprs[v]->describe(), mesh_placement_name(w));
    }
    return I.evaluate(choice);
}

std::string ShardPlan::to_string() const {
    std::string s = fmt::format("automatic sharding on {}\n", mesh.to_string());
    s += fmt::format("{:<40} {:<22} {:<28} {:>10}\n", "operator", "strategy", "output", "compute");
    for (auto& c : operators) {
        std::string label = fmt::format("{} {}", c.opr->type_name(), c.opr->name());
        if (label.size() > 40) label = label.substr(0, 37) + "...";
        s += fmt::format("{:<40} {:<22} {:<28} {:>8.1f}us\n", label, c.strategy.name,
                         c.strategy.outputs.empty() ? std::string("-")
                                                    : mesh_placement_name(c.strategy.outputs[0]),
                         c.strategy.compute_s * 1e6);
    }
    s +=
        fmt::format("predicted step time: {:.1f} us (compute {:.1f} us, communication {:.1f} us)\n",
                    predicted_s * 1e6, compute_s * 1e6, comm_s * 1e6);
    s += fmt::format("per rank: memory <= {:.2f} MiB (upper bound), {} bytes sent per step\n",
                     memory_bytes / 1048576.0, comm_bytes);
    if (solved)
        s += fmt::format("ILP: {} nodes, {} edges, {} in {:.3f} s\n", ilp_nodes, ilp_edges,
                         optimal ? "optimal" : "best found (time limit)", solve_s);
    for (size_t i = 0; i < runner_ups.size(); ++i)
        s += fmt::format("runner-up {}: {:.1f} us, memory <= {:.2f} MiB\n", i + 1,
                         runner_ups[i].predicted_s * 1e6, runner_ups[i].memory_bytes / 1048576.0);
    return s;
}

std::string ShardPlan::to_json() const {
    nlohmann::ordered_json j;
    j["mesh"] = mesh.to_string();
    auto ops = nlohmann::ordered_json::array();
    for (auto& c : operators) {
        auto outs = nlohmann::ordered_json::array();
        for (auto& o : c.strategy.outputs) outs.push_back(mesh_placement_name(o));
        ops.push_back({{"type", c.opr->type_name()},
                       {"name", c.opr->name()},
                       {"strategy", c.strategy.name},
                       {"outputs", outs},
                       {"compute_s", c.strategy.compute_s}});
    }
    j["operators"] = ops;
    j["predicted_s"] = predicted_s;
    j["compute_s"] = compute_s;
    j["comm_s"] = comm_s;
    j["memory_bytes"] = memory_bytes;
    j["comm_bytes"] = comm_bytes;
    j["solved"] = solved;
    j["optimal"] = optimal;
    j["solve_s"] = solve_s;
    j["ilp_nodes"] = ilp_nodes;
    j["ilp_edges"] = ilp_edges;
    auto ru = nlohmann::ordered_json::array();
    for (auto& r : runner_ups)
        ru.push_back({{"predicted_s", r.predicted_s}, {"memory_bytes", r.memory_bytes}});
    j["runner_ups"] = ru;
    return j.dump();
}

} // namespace braid::parallel
