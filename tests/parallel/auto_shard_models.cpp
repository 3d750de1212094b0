#include "auto_shard_models.h"

#include "braid.h"

#include <map>
#include <memory>
#include <random>

namespace braid::test {

using namespace braid::parallel;

namespace {

std::shared_ptr<Tensor> uniform(const TensorShape& shape, std::mt19937& rng, float bound) {
    auto t = std::make_shared<Tensor>(shape, dtype::Float32());
    std::uniform_real_distribution<float> u(-bound, bound);
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t->ptr<float>()[i] = u(rng);
    return t;
}

SymbolVar linear(ComputingGraph& g, SymbolVar x, size_t in, size_t out, const std::string& name,
                 std::mt19937& rng) {
    auto w =
        opr::SharedParam::make(g, uniform({in, out}, rng, 1.f / std::sqrt(float(in))), name + ".w");
    auto b = opr::SharedParam::make(g, uniform({out}, rng, 0.02f), name + ".b");
    return opr::matmul(x, w) + b;
}

} // namespace

AutoShardModel build_auto_shard_mlp(ComputingGraph& graph, size_t tokens, size_t d, size_t d_ff) {
    std::mt19937 rng(42);
    auto x = opr::Input::make(graph, "x", dtype::Float32(), {tokens, d});
    auto h = opr::gelu(linear(graph, x, d, d_ff, "mlp.fc1", rng));
    return {{linear(graph, h, d_ff, d, "mlp.fc2", rng).rename("y")}};
}

AutoShardModel build_auto_shard_transformer(ComputingGraph& graph, size_t batch, size_t seq,
                                            size_t d, size_t heads, size_t d_ff,
                                            const std::string& prefix, SymbolVar x) {
    std::mt19937 rng(1234 + uint32_t(prefix.size()));
    if (!x.valid()) x = opr::Input::make(graph, "x", dtype::Float32(), {batch * seq, d});
    auto norm = [&](SymbolVar in, const std::string& name) {
        auto gain = uniform({d}, rng, 0.1f);
        for (size_t i = 0; i < d; ++i) gain->ptr<float>()[i] += 1.f;
        return opr::layer_norm(
            in, opr::SharedParam::make(graph, gain, prefix + name + ".gain"),
            opr::SharedParam::make(graph, uniform({d}, rng, 0.02f), prefix + name + ".bias"));
    };
    long b = long(batch), s = long(seq), h = long(heads), dh = long(d / heads);
    auto split_heads = [&](SymbolVar t) {
        return opr::dimshuffle(t.reshape(std::vector<long>{b, s, h, dh}), {0, 2, 1, 3});
    };
    auto n1 = norm(x, "ln1");
    auto q = split_heads(linear(graph, n1, d, d, prefix + "attn.q", rng));
    auto k = split_heads(linear(graph, n1, d, d, prefix + "attn.k", rng));
    auto v = split_heads(linear(graph, n1, d, d, prefix + "attn.v", rng));
    auto ctx = opr::scaled_dot_product_attention(q, k, v, /*causal=*/true)[0];
    auto merged = opr::dimshuffle(ctx, {0, 2, 1, 3}).reshape(std::vector<long>{b * s, long(d)});
    auto x1 = x + linear(graph, merged, d, d, prefix + "attn.out", rng);
    auto m = opr::gelu(linear(graph, norm(x1, "ln2"), d, d_ff, prefix + "mlp.fc1", rng));
    auto y = x1 + linear(graph, m, d_ff, d, prefix + "mlp.fc2", rng);
    return {{y}};
}

PlacementRule data_parallel_training_placement(const Mesh& mesh, size_t rows) {
    return [mesh, rows](const OperatorNode& opr) {
        MeshPlacement p = replicated_placement(mesh.ndim());
        std::string type = opr.type_name();
        if (type == "SharedParam" || type == "ImmutableTensor" || type == "ParamUpdate") return p;
        const TensorShape& shape = opr.output(0)->shape();
        Placement each = Replicate{};
        if (shape.ndim() > 0 && shape[0] == rows && type != "GetVarShape")
            each = Shard{0};
        else if (type == "MatMul" || type == "Reduce")
            each = Partial{};
        for (size_t a = 0; a < mesh.ndim(); ++a)
            if (mesh.shape()[a] > 1) p[a] = each;
        return p;
    };
}

SymbolVarArray training_step(ComputingGraph& graph, const AutoShardModel& model, float lr) {
    SymbolVarArray params;
    for (auto& o : graph.operators())
        if (std::string(o->type_name()) == "SharedParam") params.push_back(SymbolVar(o->output(0)));
    auto y = model.outputs.at(0);
    auto loss = opr::reduce_mean(y * y);
    opr::OptimizerConfig sgd;
    sgd.lr = lr;
    SymbolVarArray outs = opr::minimize(loss, params, sgd);
    outs.push_back(loss);
    return outs;
}

namespace {

//! Megatron's split of a parameter named `name` (ndim 1 or 2) over the tensor-parallel axis.
Placement megatron_param_split(const std::string& name, size_t ndim) {
    auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
    bool column = has(".q.") || has(".k.") || has(".v.") || has("fc1.");
    bool row = has(".out.") || has("fc2.");
    if (column) return Shard{ndim == 2 ? 1 : 0};
    if (row && ndim == 2) return Shard{0};
    return Replicate{};
}

} // namespace

std::function<std::optional<MeshPlacement>(const OperatorNode&)>
megatron_annotations(const Mesh& mesh, const std::string& dp_axis, const std::string& tp_axis) {
    size_t dp = mesh.axis_index(dp_axis), tp = mesh.axis_index(tp_axis);
    return [=](const OperatorNode& opr) -> std::optional<MeshPlacement> {
        std::string type = opr.type_name();
        MeshPlacement p = replicated_placement(mesh.ndim());
        if (type == "SharedParam") {
            if (mesh.shape()[tp] > 1)
                p[tp] = megatron_param_split(opr.name(), opr.output(0)->shape().ndim());
            return p;
        }
        if (type == "Input") {
            if (mesh.shape()[dp] > 1) p[dp] = Shard{0};
            return p;
        }
        return std::nullopt;
    };
}

PlacementRule megatron_placement(const Mesh& mesh, const std::string& dp_axis,
                                 const std::string& tp_axis) {
    auto placed = std::make_shared<std::map<const VarNode*, Placement>>();
    size_t dp = mesh.axis_index(dp_axis), tp = mesh.axis_index(tp_axis);
    bool split_tp = mesh.shape()[tp] > 1;
    return [=](const OperatorNode& opr) {
        auto in = [&](size_t k) {
            auto it = placed->find(opr.input(k));
            return it == placed->end() ? Placement{Replicate{}} : it->second;
        };
        std::string type = opr.type_name();
        Placement t = Replicate{};
        if (type == "SharedParam") {
            t = megatron_param_split(opr.name(), opr.output(0)->shape().ndim());
        } else if (type == "MatMul") {
            if (in(1) == Placement{Shard{1}})
                t = Shard{1};
            else if (in(1) == Placement{Shard{0}})
                t = Partial{};
        } else if (type == "Elemwise") {
            for (size_t k = 0; k < opr.inputs().size(); ++k) {
                Placement pk = in(k);
                if (auto* s = std::get_if<Shard>(&pk)) {
                    size_t off = opr.output(0)->shape().ndim() - opr.input(k)->shape().ndim();
                    t = Shard{int(off) + s->dim};
                }
            }
            // A partial sum is summed before its bias is added.
            for (size_t k = 0; k < opr.inputs().size(); ++k)
                if (std::holds_alternative<Partial>(in(k))) t = Replicate{};
        } else if (type == "Reshape") {
            Placement p0 = in(0);
            auto* s = std::get_if<Shard>(&p0);
            if (s && s->dim == 1 && opr.output(0)->shape().ndim() == 4) t = Shard{2};
            if (s && s->dim == 2 && opr.output(0)->shape().ndim() == 2) t = Shard{1};
        } else if (type == "Dimshuffle") {
            auto& pattern = static_cast<const opr::Dimshuffle&>(opr).param().pattern;
            Placement p0 = in(0);
            if (auto* s = std::get_if<Shard>(&p0))
                for (size_t i = 0; i < pattern.size(); ++i)
                    if (pattern[i] == s->dim) t = Shard{int(i)};
        } else if (type == "Attention") {
            t = in(0);
        }
        if (!split_tp) t = Replicate{};
        (*placed)[opr.output(0)] = t;
        MeshPlacement p = replicated_placement(mesh.ndim());
        p[tp] = t;
        if (mesh.shape()[dp] > 1 && type != "SharedParam" && type != "ImmutableTensor")
            p[dp] = Shard{0};
        return p;
    };
}

} // namespace braid::test
