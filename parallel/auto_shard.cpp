#include "parallel/auto_shard.h"

#include "base/error.h"
#include "graph/graph_copy.h"
#include "graph/input_node.h"
#include "operators/attention.h"
#include "operators/conv.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/matmul.h"
#include "operators/normalization.h"
#include "operators/reduce.h"
#include "operators/tensor_manip.h"
#include "parallel/sharded_tensor.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <unordered_map>
#include <unordered_set>

namespace braid::parallel {

namespace {

// ---------------------------------------------------------------------------------------------
// An operator as a loop nest over iteration dims.

struct OpDims {
    std::vector<std::string> iter_name;
    std::vector<size_t> iter_size;
    std::vector<std::vector<int>> in_map, out_map; //!< per tensor, per dim: iteration dim or -1
    std::vector<bool> splittable;
    std::vector<std::optional<ReduceOp>> reduction; //!< summed (max'd, min'd) iteration dims
    double flops = 0;

    int add(std::string name, size_t size, bool can_split = true) {
        iter_name.push_back(std::move(name));
        iter_size.push_back(size);
        splittable.push_back(can_split && size > 1);
        reduction.push_back(std::nullopt);
        return int(iter_name.size() - 1);
    }
};

std::vector<int> identity_map(size_t ndim, int first = 0) {
    std::vector<int> m(ndim);
    for (size_t d = 0; d < ndim; ++d) m[d] = first + int(d);
    return m;
}

//! An input aligned to the iteration dims of an output of `out` (numpy broadcasting).
std::vector<int> broadcast_map(const TensorShape& in, const TensorShape& out) {
    std::vector<int> m(in.ndim(), -1);
    size_t off = out.ndim() - std::min(out.ndim(), in.ndim());
    for (size_t d = 0; d < in.ndim() && off + d < out.ndim(); ++d)
        if (in[d] == out[off + d] && in[d] > 1) m[d] = int(off + d);
    return m;
}

OpDims over_output_dims(const OperatorNode& opr) {
    OpDims od;
    const TensorShape& out = opr.output(0)->shape();
    for (size_t d = 0; d < out.ndim(); ++d) od.add(fmt::format("i{}", d), out[d]);
    od.out_map.push_back(identity_map(out.ndim()));
    return od;
}

/*!
 * The major-dim correspondence of a reshape: dims of `in` and `out` grouped where their
 * products meet; the first dim above 1 of each group on one side maps to that of the other.
 */
std::vector<int> reshape_map(const TensorShape& in, const TensorShape& out) {
    std::vector<int> m(in.ndim(), -1);
    size_t i = 0, o = 0;
    while (i < in.ndim() && o < out.ndim()) {
        size_t gi = i, go = o, pi = in[i], po = out[o];
        while (pi != po) {
            if (pi < po) {
                if (++gi >= in.ndim()) return m;
                pi *= in[gi];
            } else {
                if (++go >= out.ndim()) return m;
                po *= out[go];
            }
        }
        size_t mi = i, mo = o;
        while (mi <= gi && in[mi] == 1) ++mi;
        while (mo <= go && out[mo] == 1) ++mo;
        if (mi <= gi && mo <= go) m[mi] = int(mo);
        i = gi + 1;
        o = go + 1;
    }
    return m;
}

bool is_source(const OperatorNode& opr) {
    std::string t = opr.type_name();
    return t == "Input" || t == "SharedParam" || t == "ImmutableTensor";
}

//! An operator whose outputs are known at build time (GetVarShape, arithmetic on constants):
//! planned and lowered as a constant of its global value, whatever its inputs' placements.
bool is_constant(const OperatorNode& opr) {
    if (is_source(opr) || opr.outputs().empty()) return false;
    for (auto* out : opr.outputs())
        if (!out->static_value()) return false;
    return true;
}

//! Inputs whose placement the operator does not care about: a ParamUpdate's inputs after the
//! parameter and its gradient only order it; a constant operator reads only shapes.
bool ignores_placement(const OperatorNode& opr, size_t k) {
    return (std::string(opr.type_name()) == "ParamUpdate" && k >= 2) || is_constant(opr);
}

//! Inputs that must be their producer's var itself: a ParamUpdate updates its SharedParam in
//! place, so the parameter's placement is the update's.
bool forbids_reshard(const OperatorNode& opr, size_t k) {
    return std::string(opr.type_name()) == "ParamUpdate" && k == 0;
}

//! The price of a forbidden resharding: the ILP never chooses it.
constexpr double FORBIDDEN_S = std::numeric_limits<double>::infinity();

std::optional<OpDims> op_dims(const OperatorNode& opr) {
    std::string type = opr.type_name();
    auto in_shape = [&](size_t k) -> const TensorShape& { return opr.input(k)->shape(); };
    for (auto* v : opr.inputs())
        if (!v->shape_known()) return std::nullopt;
    for (auto* v : opr.outputs())
        if (!v->shape_known()) return std::nullopt;

    if (type == "Input" || type == "SharedParam" || type == "ImmutableTensor") {
        return over_output_dims(opr);
    }
    if (type == "MatMul") {
        auto& p = static_cast<const opr::MatMul&>(opr).param();
        const TensorShape& out = opr.output(0)->shape();
        OpDims od;
        int m = od.add("m", out[0]), n = od.add("n", out[1]);
        int k = od.add("k", p.transpose_a ? in_shape(0)[0] : in_shape(0)[1]);
        od.reduction[k] = ReduceOp::SUM;
        od.in_map.push_back(p.transpose_a ? std::vector<int>{k, m} : std::vector<int>{m, k});
        od.in_map.push_back(p.transpose_b ? std::vector<int>{n, k} : std::vector<int>{k, n});
        od.out_map.push_back({m, n});
        od.flops = 2.0 * double(out[0]) * double(out[1]) * double(od.iter_size[k]);
        return od;
    }
    if (type == "BatchedMatMul") {
        auto& p = static_cast<const opr::BatchedMatMul&>(opr).param();
        const TensorShape& out = opr.output(0)->shape();
        size_t r = out.ndim();
        OpDims od;
        for (size_t d = 0; d + 2 < r; ++d) od.add(fmt::format("b{}", d), out[d]);
        int m = od.add("m", out[r - 2]), n = od.add("n", out[r - 1]);
        const TensorShape& a = in_shape(0);
        int k = od.add("k", p.transpose_a ? a[a.ndim() - 2] : a[a.ndim() - 1]);
        od.reduction[k] = ReduceOp::SUM;
        for (size_t t = 0; t < 2; ++t) {
            const TensorShape& s = in_shape(t);
            std::vector<int> map(s.ndim(), -1);
            size_t batch = s.ndim() - 2, off = (r - 2) - batch;
            for (size_t d = 0; d < batch; ++d)
                if (s[d] == out[off + d] && s[d] > 1) map[d] = int(off + d);
            bool tr = t == 0 ? p.transpose_a : p.transpose_b;
            int row = t == 0 ? m : k, col = t == 0 ? k : n;
            map[batch] = tr ? col : row;
            map[batch + 1] = tr ? row : col;
            od.in_map.push_back(std::move(map));
        }
        od.out_map.push_back(identity_map(r));
        od.flops = 2.0 * double(out.total_nr_elems()) * double(od.iter_size[k]);
        return od;
    }
    if (type == "Elemwise" || type == "TypeCvt") {
        OpDims od = over_output_dims(opr);
        for (size_t k = 0; k < opr.inputs().size(); ++k)
            od.in_map.push_back(broadcast_map(in_shape(k), opr.output(0)->shape()));
        od.flops = double(opr.output(0)->shape().total_nr_elems());
        return od;
    }
    if (type == "Dimshuffle") {
        auto& p = static_cast<const opr::Dimshuffle&>(opr).param();
        OpDims od = over_output_dims(opr);
        std::vector<int> map(in_shape(0).ndim(), -1);
        for (size_t i = 0; i < p.pattern.size(); ++i)
            if (p.pattern[i] >= 0) map[p.pattern[i]] = int(i);
        od.in_map.push_back(std::move(map));
        return od;
    }
    if (type == "Reshape" || type == "AxisAddRemove") {
        // A reshape to a static shape (given as params or as a shape input, which is then read
        // replicated and ignored by the lowering).
        OpDims od = over_output_dims(opr);
        auto map = reshape_map(in_shape(0), opr.output(0)->shape());
        std::vector<bool> mapped(od.iter_size.size(), false);
        for (int it : map)
            if (it >= 0) mapped[it] = true;
        for (size_t it = 0; it < mapped.size(); ++it)
            if (!mapped[it]) od.splittable[it] = false;
        od.in_map.push_back(std::move(map));
        for (size_t k = 1; k < opr.inputs().size(); ++k)
            od.in_map.push_back(std::vector<int>(in_shape(k).ndim(), -1));
        return od;
    }
    if (type == "Broadcast") {
        // To a static shape: the input aligned as numpy aligns it; a shape input is ignored by
        // the lowering, which broadcasts to the local shape.
        OpDims od = over_output_dims(opr);
        od.in_map.push_back(broadcast_map(in_shape(0), opr.output(0)->shape()));
        for (size_t k = 1; k < opr.inputs().size(); ++k)
            od.in_map.push_back(std::vector<int>(in_shape(k).ndim(), -1));
        od.flops = double(opr.output(0)->shape().total_nr_elems());
        return od;
    }
    if (type == "ParamUpdate") {
        // Elementwise over the parameter and its gradient; the inputs after them only order it.
        OpDims od = over_output_dims(opr);
        for (size_t k = 0; k < opr.inputs().size(); ++k)
            od.in_map.push_back(k < 2 ? identity_map(in_shape(k).ndim())
                                      : std::vector<int>(in_shape(k).ndim(), -1));
        od.flops = 4.0 * double(in_shape(0).total_nr_elems());
        return od;
    }
    if (type == "Reduce") {
        auto& p = static_cast<const opr::Reduce&>(opr).param();
        const TensorShape& in = in_shape(0);
        OpDims od;
        std::vector<bool> reduced(in.ndim(), p.axes.empty());
        for (int a : p.axes) reduced[a < 0 ? a + int(in.ndim()) : a] = true;
        // A mean over split dims is the sum of the ranks' means over their slices, each scaled
        // by the rank's share (the lowering scales it).
        std::optional<ReduceOp> op;
        if (p.mode == opr::ReduceMode::SUM || p.mode == opr::ReduceMode::SUM_SQR ||
            (p.mode == opr::ReduceMode::MEAN && opr.output(0)->dtype().is_float()))
            op = ReduceOp::SUM;
        if (p.mode == opr::ReduceMode::MAX) op = ReduceOp::MAX;
        if (p.mode == opr::ReduceMode::MIN) op = ReduceOp::MIN;
        std::vector<int> out_map;
        for (size_t d = 0; d < in.ndim(); ++d) {
            int it = od.add(fmt::format("i{}", d), in[d], !reduced[d] || op.has_value());
            if (reduced[d]) {
                od.reduction[it] = op;
                if (p.keepdims) out_map.push_back(-1);
            } else {
                out_map.push_back(it);
            }
        }
        od.in_map.push_back(identity_map(in.ndim()));
        od.out_map.push_back(std::move(out_map));
        od.flops = double(in.total_nr_elems());
        return od;
    }
    if (type == "Softmax") {
        auto& p = static_cast<const opr::Softmax&>(opr).param();
        OpDims od = over_output_dims(opr);
        int ndim = int(in_shape(0).ndim());
        od.splittable[p.axis < 0 ? p.axis + ndim : p.axis] = false;
        od.in_map.push_back(identity_map(size_t(ndim)));
        od.flops = 5.0 * double(in_shape(0).total_nr_elems());
        return od;
    }
    if (type == "LayerNorm" || type == "RMSNorm") {
        auto& p = static_cast<const opr::Normalization&>(opr).param();
        OpDims od = over_output_dims(opr);
        size_t ndim = in_shape(0).ndim();
        for (size_t d = ndim - p.normalized_ndim; d < ndim; ++d) od.splittable[d] = false;
        od.in_map.push_back(identity_map(ndim));
        for (size_t k = 1; k < opr.inputs().size(); ++k)
            od.in_map.push_back(identity_map(in_shape(k).ndim(), int(ndim - in_shape(k).ndim())));
        od.flops = 8.0 * double(in_shape(0).total_nr_elems());
        return od;
    }
    if (type == "Conv2d") {
        // x[N,C,H,W] * w[O,C/g,kh,kw] -> y[N,O,H',W']: batch, output channels and (ungrouped)
        // input channels, whose split sums partial products; spatial dims need halos: whole.
        auto& p = static_cast<const opr::Conv2d&>(opr).param();
        const TensorShape &x = in_shape(0), &w = in_shape(1), &y = opr.output(0)->shape();
        OpDims od;
        bool grouped = p.groups != 1;
        int n = od.add("n", y[0]), o = od.add("o", y[1], !grouped), c = od.add("c", x[1], !grouped),
            h = od.add("h", y[2], false), wd = od.add("w", y[3], false);
        od.reduction[c] = ReduceOp::SUM;
        od.in_map = {{n, c, -1, -1}, {grouped ? -1 : o, grouped ? -1 : c, -1, -1}};
        od.out_map = {{n, o, h, wd}};
        od.flops = 2.0 * double(y.total_nr_elems()) * double(w[1] * w[2] * w[3]);
        return od;
    }
    if (type == "Embedding") {
        // table[V,D] rows for ids[...] -> [..., D]: the ids' dims and D (a split of V would need
        // the rows masked by owner: the table is read whole along V).
        OpDims od = over_output_dims(opr);
        size_t r = opr.output(0)->shape().ndim();
        od.in_map = {{-1, int(r - 1)}, identity_map(r - 1)};
        return od;
    }
    if (type == "Attention") {
        const TensorShape &q = in_shape(0), &k = in_shape(1), &v = in_shape(2);
        OpDims od;
        int b = od.add("b", q[0]), h = od.add("h", q[1]), sq = od.add("sq", q[2], false),
            sk = od.add("sk", k[2], false), dk = od.add("d", q[3], false),
            dv = od.add("dv", v[3], false);
        auto bh = [&](const TensorShape& s, int third, int fourth) {
            return std::vector<int>{s[0] == q[0] ? b : -1, s[1] == q[1] ? h : -1, third, fourth};
        };
        od.in_map = {bh(q, sq, dk), bh(k, sk, dk), bh(v, sk, dv)};
        od.out_map = {{b, h, sq, dv}, {b, h, sq}};
        od.flops = 4.0 * double(q[0] * q[1] * q[2]) * double(k[2]) * double(q[3]);
        return od;
    }
    return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Candidates.

MeshPlacement placement_of(const std::vector<int>& map, const std::vector<int>& split,
                           const OpDims& od, bool is_output) {
    MeshPlacement p(split.size(), Replicate{});
    for (size_t a = 0; a < split.size(); ++a) {
        if (split[a] < 0) continue;
        auto it = std::find(map.begin(), map.end(), split[a]);
        if (it != map.end())
            p[a] = Shard{int(it - map.begin())};
        else if (is_output && od.reduction[split[a]])
            p[a] = Partial{*od.reduction[split[a]]};
    }
    return p;
}

std::vector<OperatorStrategy> enumerate_strategies(const OperatorNode& opr, const Mesh& mesh,
                                                   double full_time) {
    const auto& shape = mesh.shape();
    auto od = is_constant(opr) ? std::nullopt : op_dims(opr);
    auto replicated = [&] {
        OperatorStrategy s;
        s.name = "replicated";
        s.split.assign(mesh.ndim(), -1);
        for (size_t k = 0; k < opr.inputs().size(); ++k)
            s.inputs.push_back(replicated_placement(mesh.ndim()));
        for (size_t k = 0; k < opr.outputs().size(); ++k)
            s.outputs.push_back(replicated_placement(mesh.ndim()));
        s.compute_s = full_time;
        return s;
    };
    if (!od) return {replicated()};
    // Every output must carry each split dim, or be its reduction.
    std::vector<int> choices{-1};
    for (size_t it = 0; it < od->iter_size.size(); ++it) {
        if (!od->splittable[it]) continue;
        bool ok = true;
        for (auto& m : od->out_map)
            if (std::find(m.begin(), m.end(), int(it)) == m.end() && !od->reduction[it]) ok = false;
        if (ok) choices.push_back(int(it));
    }
    std::vector<OperatorStrategy> result;
    std::vector<size_t> pick(mesh.ndim(), 0);
    for (;;) {
        OperatorStrategy s;
        s.split.resize(mesh.ndim());
        double ways = 1;
        bool valid = true;
        for (size_t a = 0; a < mesh.ndim(); ++a) {
            s.split[a] = choices[pick[a]];
            if (s.split[a] >= 0) {
                if (shape[a] == 1) valid = false; // splitting over one rank is the same plan
                ways *= shape[a];
            }
        }
        for (size_t k = 0; valid && k < opr.inputs().size(); ++k) {
            s.inputs.push_back(placement_of(od->in_map[k], s.split, *od, false));
            valid = placement_fits(opr.input(k)->shape(), s.inputs.back(), shape);
        }
        for (size_t k = 0; valid && k < opr.outputs().size(); ++k) {
            s.outputs.push_back(placement_of(od->out_map[k], s.split, *od, true));
            valid = placement_fits(opr.output(k)->shape(), s.outputs.back(), shape);
        }
        if (valid) {
            s.compute_s = full_time / ways;
            std::vector<std::string> parts;
            for (size_t a = 0; a < mesh.ndim(); ++a)
                if (s.split[a] >= 0)
                    parts.push_back(od->iter_name[s.split[a]] + "@" + mesh.axis_names()[a]);
            s.name = parts.empty() ? "replicated" : fmt::format("{}", fmt::join(parts, " "));
            result.push_back(std::move(s));
        }
        size_t a = 0;
        while (a < pick.size() && ++pick[a] == choices.size()) pick[a++] = 0;
        if (a == pick.size()) break;
    }
    return result;
}

bool can_follow(const OperatorNode& opr) {
    std::string t = opr.type_name();
    return t == "Elemwise" || t == "TypeCvt" || t == "Dimshuffle" || t == "Reshape" ||
           t == "AxisAddRemove";
}

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
        if (ignores_placement(*oprs[v], k)) return 0;
        if (forbids_reshard(*oprs[v], k) && from != to) return FORBIDDEN_S;
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
            if (is_source(*oprs[v]) || type == "Reshape" || type == "AxisAddRemove") continue;
            double bytes = 0;
            for (auto* in : oprs[v]->inputs()) bytes += double(in->static_bytes());
            for (auto* out : oprs[v]->outputs()) bytes += double(out->static_bytes());
            auto od = op_dims(*oprs[v]);
            double flops = od ? od->flops : 0;
            t[v] = flops / options.flops_per_s + bytes / options.memory_bytes_per_s;
        }
        return t;
    }
    // Measured: run the analysed graph on one device, each operator's kernel time per run.
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
        if (merge && can_follow(*oprs[v]) && sink_outputs[v].empty()) {
            std::optional<size_t> from;
            size_t input_k = 0, computed = 0;
            for (size_t k = 0; k < producers[v].size(); ++k)
                if (!is_source(*oprs[producers[v][k].first])) {
                    ++computed;
                    from = producers[v][k].first;
                    input_k = k;
                }
            if (computed == 1 && consumers[*from].size() == 1 && sink_outputs[*from].empty() &&
                oprs[*from]->outputs().size() == 1) {
                Group& g = groups[group_of[*from]];
                size_t member_of_from =
                    std::find(g.members.begin(), g.members.end(), *from) - g.members.begin();
                for (auto& choice : g.member_choice) {
                    const MeshPlacement& given = cands[*from][choice[member_of_from]].outputs[0];
                    size_t best = 0;
                    double best_cost = std::numeric_limits<double>::infinity();
                    for (size_t j = 0; j < cands[v].size(); ++j) {
                        double c = cands[v][j].compute_s +
                                   edge_cost(v, input_k, given, cands[v][j].inputs[input_k]);
                        if (c < best_cost) {
                            best_cost = c;
                            best = j;
                        }
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

// ---------------------------------------------------------------------------------------------
// Lowering.

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
            } else if (is_constant(opr)) {
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
                    inputs.push_back(read(opr.input(k), ignores_placement(opr, k) ? MeshPlacement{}
                                                                                  : s.inputs[k]));
                if (type == "Reshape" || type == "AxisAddRemove" || type == "Broadcast") {
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
        SymbolVarArray results;
        for (auto& out : planner.outputs())
            results.push_back(read(out.node(), replicated_placement(mesh.ndim())));
        return results;
    };
}

} // namespace braid::parallel
