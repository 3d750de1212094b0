#include "parallel/shard_strategies.h"

#include "operators/attention.h"
#include "operators/conv.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/matmul.h"
#include "operators/normalization.h"
#include "operators/reduce.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

#include <algorithm>

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

} // namespace

bool is_source_operator(const OperatorNode& opr) {
    std::string t = opr.type_name();
    return t == "Input" || t == "SharedParam" || t == "ImmutableTensor";
}

//! An operator whose outputs are known at build time (GetVarShape, arithmetic on constants):
//! planned and lowered as a constant of its global value, whatever its inputs' placements.
bool is_constant_operator(const OperatorNode& opr) {
    if (is_source_operator(opr) || opr.outputs().empty()) return false;
    for (auto* out : opr.outputs())
        if (!out->static_value()) return false;
    return true;
}

//! Inputs whose placement the operator does not care about: a ParamUpdate's inputs after the
//! parameter and its gradient only order it; a constant operator reads only shapes.
bool ignores_input_placement(const OperatorNode& opr, size_t k) {
    return (std::string(opr.type_name()) == "ParamUpdate" && k >= 2) || is_constant_operator(opr);
}

//! Inputs that must be their producer's var itself: a ParamUpdate updates its SharedParam in
//! place, so the parameter's placement is the update's.
bool forbids_input_reshard(const OperatorNode& opr, size_t k) {
    return std::string(opr.type_name()) == "ParamUpdate" && k == 0;
}

double operator_flops(const OperatorNode& opr) {
    auto od = op_dims(opr);
    return od ? od->flops : 0;
}

std::vector<OperatorStrategy> enumerate_strategies(const OperatorNode& opr, const Mesh& mesh,
                                                   double full_time) {
    const auto& shape = mesh.shape();
    auto od = is_constant_operator(opr) ? std::nullopt : op_dims(opr);
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
    if (std::string(opr.type_name()) == "RemoteRecv") {
        // What a transfer from another stage brings: received by the mesh's first rank, zeros
        // on the others, so a partial sum of the ranks (its readers' all-reduce spreads it).
        OperatorStrategy s = replicated();
        s.name = "received by rank 0";
        s.outputs[0].assign(mesh.ndim(), Partial{ReduceOp::SUM});
        return {s};
    }
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

bool follows_its_input(const OperatorNode& opr) {
    std::string t = opr.type_name();
    return t == "Elemwise" || t == "TypeCvt" || t == "Dimshuffle" || t == "Reshape" ||
           t == "AxisAddRemove";
}

} // namespace braid::parallel
