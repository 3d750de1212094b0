// Lowering an automatic sharding plan into one rank's graph (parallel/auto_shard.h).
#include "parallel/auto_shard.h"

#include "graph/graph_copy.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/reduce.h"
#include "operators/tensor_manip.h"
#include "parallel/sharded_tensor.h"

#include <cstring>
#include <unordered_map>

namespace braid::parallel {

SpmdFunction lower_plan(const AutoSharder& planner, const ShardPlan& plan, LowerOptions options) {
    return [&planner, &plan, options](SpmdContext& ctx,
                                      const SymbolVarArray& args) -> SymbolVarArray {
        const Mesh& mesh = plan.mesh;
        ComputingGraph& g = ctx.graph();
        // Local var of each analysed var, per placement (a placement made once is reused).
        std::unordered_map<const VarNode*, std::vector<std::pair<MeshPlacement, SymbolVar>>> local;
        std::unordered_map<const VarNode*, MeshPlacement> placed;
        auto read = [&](const VarNode* var, const MeshPlacement& want) {
            auto& have = local.at(var);
            if (want.empty()) return have.front().second; // placement ignored
            for (auto& [p, v] : have)
                if (p == want) return v;
            auto steps = reshard_steps(var->shape(), placed.at(var), want, mesh.shape());
            SymbolVar v = reshard(have.front().second, steps, ctx.groups());
            have.push_back({want, v});
            return v;
        };
        size_t next_arg = 0;
        for (auto& c : plan.operators) {
            OperatorNode& opr = *c.opr;
            const auto& s = c.strategy;
            std::string type = opr.type_name();
            SymbolVarArray outs;
            OperatorConfig config(opr.name(), options.comp_node);
            if (type == "Input") {
                outs = {args.at(next_arg++)};
                if (options.global_inputs) {
                    // The whole input: read from it, each rank takes its slice once.
                    local[opr.output(0)] = {{replicated_placement(mesh.ndim()), outs[0]}};
                    placed[opr.output(0)] = replicated_placement(mesh.ndim());
                    SymbolVar piece = read(opr.output(0), s.outputs[0]);
                    local[opr.output(0)] = {{s.outputs[0], piece}};
                    placed[opr.output(0)] = s.outputs[0];
                    continue;
                }
            } else if (is_constant_operator(opr)) {
                for (auto* out : opr.outputs())
                    outs.push_back(opr::ImmutableTensor::make(g, *out->static_value(), config));
            } else if (type == "SharedParam" || type == "ImmutableTensor") {
                const Tensor& whole = type == "SharedParam"
                                          ? *static_cast<opr::SharedParam&>(opr).param()
                                          : static_cast<opr::ImmutableTensor&>(opr).value();
                bool replicated = s.outputs[0] == replicated_placement(mesh.ndim());
                // A parameter that training updates gets a copy per rank; one only read is
                // shared by the ranks of this process.
                bool updated = false;
                for (auto* reader : opr.output(0)->readers())
                    updated |= std::string(reader->type_name()) == "ParamUpdate";
                std::shared_ptr<Tensor> piece;
                if (replicated && type == "SharedParam" && !updated) {
                    piece = static_cast<opr::SharedParam&>(opr).param();
                } else {
                    auto spec =
                        mesh_placement_spec(whole.shape().ndim(), s.outputs[0], mesh.shape());
                    piece = std::make_shared<Tensor>(
                        ShardedTensor::split(whole, spec).shard_of(mesh, ctx.rank()));
                }
                outs = {type == "SharedParam" ? opr::SharedParam::make(g, piece, config)
                                              : opr::ImmutableTensor::make(g, *piece, config)};
            } else {
                SymbolVarArray inputs;
                for (size_t k = 0; k < opr.inputs().size(); ++k)
                    inputs.push_back(read(opr.input(k), ignores_input_placement(opr, k)
                                                            ? MeshPlacement{}
                                                            : s.inputs[k]));
                bool transfer = type == "RemoteSend" || type == "RemoteRecv";
                if (transfer && ctx.rank() != 0) {
                    // Only the first rank transfers (shard_strategies.h). A recv is zeros here
                    // (its Partial(sum) placement); a send stands for its resharded input, so
                    // what waits for the send waits for this rank's part of that resharding.
                    if (type == "RemoteSend") {
                        outs = {inputs.at(0)};
                    } else {
                        Tensor zero(opr.output(0)->shape(), opr.output(0)->dtype());
                        std::memset(zero.raw_ptr(), 0, zero.nr_bytes());
                        outs = {opr::ImmutableTensor::make(g, zero, config)};
                    }
                } else if (type == "Reshape" || type == "AxisAddRemove" || type == "Broadcast") {
                    // To the local shape (a shape input, global, is not read).
                    auto shape =
                        mesh_local_shape(opr.output(0)->shape(), s.outputs[0], mesh.shape());
                    std::vector<long> target(shape.ndim());
                    for (size_t d = 0; d < shape.ndim(); ++d) target[d] = long(shape[d]);
                    outs = {type == "Broadcast" ? opr::Broadcast::make(inputs[0], shape)
                                                : inputs[0].reshape(target)};
                } else {
                    outs = copy_operator(opr, g, inputs);
                    if (type == "Reduce" &&
                        static_cast<opr::Reduce&>(opr).param().mode == opr::ReduceMode::MEAN) {
                        // Means over split dims: each rank's share of the sum of means.
                        double ways = 1;
                        for (size_t a = 0; a < mesh.ndim(); ++a)
                            if (std::holds_alternative<Partial>(s.outputs[0][a]))
                                ways *= mesh.shape()[a];
                        if (ways > 1) outs[0] = outs[0] * (1.0 / ways);
                    }
                }
            }
            for (size_t k = 0; k < opr.outputs().size(); ++k) {
                local[opr.output(k)] = {{s.outputs[k], outs.at(k)}};
                placed[opr.output(k)] = s.outputs[k];
            }
        }
        // Orders imposed after the fact (a gradient's side effect, a send delayed past a later
        // recv) hold between the lowered vars too.
        for (auto& c : plan.operators)
            for (auto* out : c.opr->outputs())
                for (auto* dep : c.opr->graph()->extra_deps(out)) {
                    VarNode* v = local.at(out).front().second.node();
                    VarNode* d = local.at(dep).front().second.node();
                    if (v != d) g.add_extra_dep(v, d);
                }
        SymbolVarArray results;
        for (auto& out : planner.outputs())
            results.push_back(read(out.node(), replicated_placement(mesh.ndim())));
        return results;
    };
}

} // namespace braid::parallel
