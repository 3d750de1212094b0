#include "parallel/pipeline_profile.h"

#include "base/error.h"
#include "graph/grad.h"
#include "memory/memory_budget.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/reduce.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace braid::parallel {

namespace {

//! Operators that move or hold data rather than compute: outside every module.
bool is_module_op(const OperatorNode& opr) {
    std::string t = opr.type_name();
    return t != "RemoteSend" && t != "RemoteRecv" && t != "SharedParam" && t != "Input" &&
           t != "ImmutableTensor";
}

//! Fills the static part of `m` from the module's operators `ops` (graph indices).
void measure_module(const PipelineStage& st, ModuleProfile& m) {
    const auto& oprs = st.graph->operators();
    // The executed operators and their steps.
    std::unordered_map<const OperatorNode*, size_t> step_of;
    for (auto& [cn, seq] : st.step->sequences())
        for (size_t s = 0; s < seq.size(); ++s) step_of[seq[s]] = s;
    std::unordered_set<const OperatorNode*> in_module;
    size_t first_step = std::numeric_limits<size_t>::max(), end_step = 0;
    for (size_t i : m.op_indices) {
        auto* opr = oprs[i].get();
        auto it = step_of.find(opr);
        if (it == step_of.end() || !is_module_op(*opr)) continue;
        in_module.insert(opr);
        first_step = std::min(first_step, it->second);
        end_step = std::max(end_step, it->second + 1);
    }
    std::set<const VarNode*> inputs, outputs;
    for (auto* opr : in_module) {
        for (auto* in : opr->inputs())
            if (!in_module.count(in->owner())) inputs.insert(in);
        for (auto* out : opr->outputs())
            for (auto* reader : out->readers())
                if (step_of.count(reader) && !in_module.count(reader)) outputs.insert(out);
    }
    for (auto* v : inputs) m.input_bytes += v->static_bytes();
    for (auto* v : outputs) m.output_bytes += v->static_bytes();
    m.nr_inputs = inputs.size();
    m.nr_outputs = outputs.size();

    // Donations and temporaries from the plan's placements.
    const auto& node = st.step->memory_report().nodes.at(0);
    std::unordered_map<std::string, size_t> placement_of;
    for (size_t p = 0; p < node.placements.size(); ++p) placement_of[node.placements[p].name] = p;
    std::set<std::string> input_names, output_names;
    for (auto* v : inputs) input_names.insert(v->name());
    for (auto* v : outputs) output_names.insert(v->name());
    for (auto* v : outputs) {
        auto it = placement_of.find(v->name());
        if (it == placement_of.end()) continue;
        const auto& p = node.placements[it->second];
        if (p.in_place && p.inplace_of >= 0 &&
            input_names.count(node.placements[size_t(p.inplace_of)].name)) {
            m.donated_bytes += v->static_bytes();
            ++m.nr_donated;
        }
    }
    std::set<std::string> produced;
    for (auto* opr : in_module)
        for (auto* out : opr->outputs()) produced.insert(out->name());
    if (end_step > first_step) {
        std::vector<size_t> live(end_step - first_step, 0);
        for (auto& p : node.placements) {
            if (p.in_place || !produced.count(p.name) || output_names.count(p.name)) continue;
            for (size_t t = std::max(p.lifetime_begin, first_step);
                 t < std::min(p.lifetime_end, end_step); ++t)
                live[t - first_step] += p.bytes;
        }
        m.temp_buffer_size = *std::max_element(live.begin(), live.end());
    }
    m.peak_memory = m.input_bytes + m.output_bytes + m.temp_buffer_size - m.donated_bytes;
}

} // namespace

StageProfile profile_stage(const PipelineStage& st, const std::string& schedule) {
    StageProfile sp;
    sp.stage = st.index;
    sp.first_layer = st.first_layer;
    sp.end_layer = st.end_layer;
    sp.microbatches = st.microbatches;
    sp.schedule = schedule;
    sp.available_memory = MemoryBudget::resolve(st.graph->options().memory_budget).bytes;
    sp.step_arena_bytes = st.step->memory_report().nodes.at(0).arena_bytes;
    for (auto& opr : st.graph->operators())
        if (std::string(opr->type_name()) == "SharedParam")
            sp.initial_var_size += opr->output(0)->static_bytes();
    uint32_t j = st.microbatches - 1;
    ModuleProfile fwd, bwd, apply;
    fwd.name = fmt::format("stage_{}_forward", st.index);
    bwd.name = fmt::format("stage_{}_backward", st.index);
    apply.name = fmt::format("stage_{}_apply_grad", st.index);
    for (size_t k = 0; k < st.program.size(); ++k) {
        auto& op = st.program[k];
        if (op.microbatch != j) continue;
        auto* target = op.kind == PipelineOp::FORWARD    ? &fwd
                       : op.kind == PipelineOp::BACKWARD ? &bwd
                                                         : nullptr;
        if (!target) continue;
        for (size_t i = st.op_range[k].first; i < st.op_range[k].second; ++i)
            target->op_indices.push_back(i);
    }
    size_t last = st.op_range.empty() ? 0 : st.op_range.back().second;
    for (size_t i = last; i < st.graph->operators().size(); ++i) apply.op_indices.push_back(i);
    for (auto* m : {&fwd, &bwd, &apply}) {
        measure_module(st, *m);
        sp.modules.push_back(std::move(*m));
    }
    return sp;
}

void measure_compute_cost(PipelineTrainer& trainer, const Tensor& x, const Tensor& labels,
                          int steps, std::vector<StageProfile>& profiles) {
    uint32_t n = trainer.nr_stages();
    if (profiles.size() != n)
        BRAID_THROW(ValueError, "{} profiles for a pipeline of {} stages", profiles.size(), n);
    // One map per stage, written only by that stage's comp node thread.
    std::vector<std::unordered_map<const OperatorNode*, double>> seconds(n);
    for (uint32_t i = 0; i < n; ++i)
        trainer.stage(i).step->set_step_observer(
            [&seconds, i](const OperatorNode& opr, auto begin, auto end) {
                seconds[i][&opr] += std::chrono::duration<double>(end - begin).count();
            });
    for (int s = 0; s < steps; ++s) trainer.step(x, labels);
    for (uint32_t i = 0; i < n; ++i) {
        trainer.stage(i).step->set_step_observer(nullptr);
        const auto& oprs = trainer.stage(i).graph->operators();
        for (auto& m : profiles[i].modules) {
            double total = 0;
            for (size_t k : m.op_indices)
                if (is_module_op(*oprs[k])) {
                    auto it = seconds[i].find(oprs[k].get());
                    if (it != seconds[i].end()) total += it->second;
                }
            m.compute_cost = steps > 0 ? total / steps : 0;
        }
    }
}

std::string stage_profile_table(const std::vector<StageProfile>& profiles) {
    std::string out =
        fmt::format("{:<22} {:>12} {:>14} {:>14} {:>14} {:>14} {:>14}\n", "module", "compute_cost",
                    "peak_memory", "temp_buffer", "input_bytes", "output_bytes", "donated");
    for (auto& sp : profiles) {
        for (auto& m : sp.modules)
            out += fmt::format("{:<22} {:>11.6f}s {:>14} {:>14} {:>14} {:>14} {:>14}\n", m.name,
                               m.compute_cost, m.peak_memory, m.temp_buffer_size, m.input_bytes,
                               m.output_bytes, m.donated_bytes);
        out += fmt::format("  stage {}: layers {}-{}, {} micro-batches{}, initial_var_size {} B, "
                           "step arena {} B, available_memory {} B\n",
                           sp.stage, sp.first_layer, sp.end_layer - 1, sp.microbatches,
                           sp.schedule.empty() ? "" : " (" + sp.schedule + ")", sp.initial_var_size,
                           sp.step_arena_bytes, sp.available_memory);
    }
    return out;
}

std::string stage_profiles_json(const std::vector<StageProfile>& profiles) {
    auto stages = nlohmann::ordered_json::array();
    for (auto& sp : profiles) {
        auto modules = nlohmann::ordered_json::array();
        for (auto& m : sp.modules)
            modules.push_back({{"name", m.name},
                               {"compute_cost", m.compute_cost},
                               {"peak_memory", m.peak_memory},
                               {"temp_buffer_size", m.temp_buffer_size},
                               {"input_bytes", m.input_bytes},
                               {"output_bytes", m.output_bytes},
                               {"donated_bytes", m.donated_bytes},
                               {"nr_inputs", m.nr_inputs},
                               {"nr_outputs", m.nr_outputs},
                               {"nr_donated", m.nr_donated}});
        stages.push_back({{"stage", sp.stage},
                          {"first_layer", sp.first_layer},
                          {"end_layer", sp.end_layer},
                          {"microbatches", sp.microbatches},
                          {"schedule", sp.schedule},
                          {"initial_var_size", sp.initial_var_size},
                          {"step_arena_bytes", sp.step_arena_bytes},
                          {"available_memory", sp.available_memory},
                          {"modules", std::move(modules)}});
    }
    return nlohmann::ordered_json{{"stages", std::move(stages)}}.dump(
        -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// ---- per-layer profiles and the partition

std::vector<LayerProfile> profile_layers(const PipelineModel& model, size_t rows, int repeats,
                                         uint32_t in_flight) {
    std::vector<LayerProfile> result;
    size_t width = model.input_width;
    GraphOptions go;
    go.enable_fusion = false; // like the stages (parallel/pipeline.cpp), and names stay whole
    for (auto& layer : model.layers) {
        auto g = ComputingGraph::make(go);
        auto x = opr::Input::make(*g, "x", dtype::Float32(), {rows, width});
        SymbolVarArray params;
        size_t param_bytes = 0;
        for (auto& p : layer.params) {
            params.push_back(opr::SharedParam::make(*g, p));
            param_bytes += p->nr_bytes();
        }
        auto y = layer.forward(x, params);
        size_t nr_forward = g->operators().size();
        auto gy = opr::Input::make(*g, "gy", dtype::Float32(), y.shape());
        SymbolVarArray wrt = params;
        wrt.push_back(x);
        auto grads = grad(opr::reduce_sum(y * gy), wrt);
        auto exec = g->compile(std::vector<OutputSpec>(grads.begin(), grads.end()));
        Tensor xv({rows, width}, dtype::Float32()), gv(y.shape(), dtype::Float32());
        for (size_t i = 0; i < xv.shape().total_nr_elems(); ++i) xv.ptr<float>()[i] = 0.01f * i;
        for (size_t i = 0; i < gv.shape().total_nr_elems(); ++i) gv.ptr<float>()[i] = 1.f;
        exec->feed("x", xv).feed("gy", gv);
        // Activation bytes: arena vars written by the forward and read after it.
        std::unordered_set<std::string> forward_vars;
        for (size_t i = 0; i < nr_forward; ++i)
            for (auto* out : g->operators()[i]->outputs()) forward_vars.insert(out->name());
        size_t boundary = 0;
        for (auto& [cn, seq] : exec->sequences())
            for (size_t s = 0; s < seq.size(); ++s)
                for (size_t i = 0; i < nr_forward; ++i)
                    if (seq[s] == g->operators()[i].get()) boundary = std::max(boundary, s + 1);
        size_t activation_bytes = 0;
        for (auto& p : exec->memory_report().nodes.at(0).placements)
            if (forward_vars.count(p.name) && p.lifetime_end > boundary)
                activation_bytes += p.bytes;
        double total = 0;
        exec->set_step_observer([&](const OperatorNode&, auto begin, auto end) {
            total += std::chrono::duration<double>(end - begin).count();
        });
        std::vector<double> times;
        exec->run(); // warm-up
        for (int r = 0; r < std::max(repeats, 1); ++r) {
            total = 0;
            exec->run();
            times.push_back(total);
        }
        std::sort(times.begin(), times.end());
        result.push_back({times[times.size() / 2], 3 * param_bytes + in_flight * activation_bytes});
        width = y.shape()[y.shape().ndim() - 1];
    }
    return result;
}

double partition_objective(const std::vector<LayerProfile>& layers,
                           const std::vector<size_t>& stage_begin, uint32_t microbatches) {
    double sum = 0, worst = 0;
    for (size_t s = 0; s < stage_begin.size(); ++s) {
        size_t end = s + 1 < stage_begin.size() ? stage_begin[s + 1] : layers.size();
        double t = 0;
        for (size_t l = stage_begin[s]; l < end; ++l) t += layers[l].compute_cost;
        sum += t;
        worst = std::max(worst, t);
    }
    return sum + double(microbatches - 1) * worst;
}

StagePartition auto_partition(const std::vector<LayerProfile>& layers, uint32_t nr_stages,
                              uint32_t microbatches, size_t memory_limit) {
    size_t n = layers.size();
    if (nr_stages == 0 || nr_stages > n)
        BRAID_THROW(ValueError, "cannot split {} layers into {} stages", n, nr_stages);
    std::vector<double> cost(n + 1, 0);
    std::vector<size_t> mem(n + 1, 0);
    for (size_t l = 0; l < n; ++l) {
        cost[l + 1] = cost[l] + layers[l].compute_cost;
        mem[l + 1] = mem[l] + layers[l].memory;
    }
    auto seg_cost = [&](size_t a, size_t b) { return cost[b] - cost[a]; };
    auto fits = [&](size_t a, size_t b) {
        return !memory_limit || mem[b] - mem[a] <= memory_limit;
    };
    std::set<double> candidates;
    for (size_t a = 0; a < n; ++a)
        for (size_t b = a + 1; b <= n; ++b)
            if (fits(a, b)) candidates.insert(seg_cost(a, b));
    constexpr double INF = std::numeric_limits<double>::infinity();
    StagePartition best;
    best.objective = INF;
    for (double t_max : candidates) {
        // f[s][k]: least Σ t_i of the first k layers in s stages, each within t_max and memory.
        std::vector<std::vector<double>> f(nr_stages + 1, std::vector<double>(n + 1, INF));
        std::vector<std::vector<size_t>> from(nr_stages + 1, std::vector<size_t>(n + 1, 0));
        f[0][0] = 0;
        for (uint32_t s = 1; s <= nr_stages; ++s)
            for (size_t k = s; k <= n; ++k)
                for (size_t a = s - 1; a < k; ++a) {
                    if (f[s - 1][a] == INF || !fits(a, k) || seg_cost(a, k) > t_max) continue;
                    double v = f[s - 1][a] + seg_cost(a, k);
                    if (v < f[s][k]) f[s][k] = v, from[s][k] = a;
                }
        if (f[nr_stages][n] == INF) continue;
        double objective = f[nr_stages][n] + double(microbatches - 1) * t_max;
        if (objective >= best.objective) continue;
        best.objective = objective;
        best.stage_begin.assign(nr_stages, 0);
        for (size_t s = nr_stages, k = n; s > 0; --s) {
            best.stage_begin[s - 1] = from[s][k];
            k = from[s][k];
        }
    }
    if (best.objective == INF)
        BRAID_THROW(ValueError,
                    "no split of {} layers into {} stages keeps every stage within {} bytes "
                    "(largest layer: {} bytes)",
                    n, nr_stages, memory_limit,
                    std::max_element(layers.begin(), layers.end(), [](auto& a, auto& b) {
                        return a.memory < b.memory;
                    })->memory);
    for (size_t s = 0; s < nr_stages; ++s) {
        size_t end = s + 1 < nr_stages ? best.stage_begin[s + 1] : n;
        best.stage_cost.push_back(seg_cost(best.stage_begin[s], end));
    }
    // Report the true objective (the DP's t_max may exceed the partition's max).
    best.objective = partition_objective(layers, best.stage_begin, microbatches);
    return best;
}

} // namespace braid::parallel
