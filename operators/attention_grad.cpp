// Gradient rule of Attention. On CPU comp nodes it is one AttentionGrad operator (the tiled
// kernel of operators/attention_kernels.h); elsewhere (CUDA) it is built from differentiable
// primitives. Both recompute the probabilities from q, k and the forward's lse (no second
// softmax pass):
//   s = scale · q kᵀ,  p = exp(s − lse) on visible keys, 0 on masked ones,
//   dv = pᵀ · dout,    dp = dout · vᵀ,
//   ds = p · (dp − Σ_j dout·out + dlse)          (per query row),
//   dq = scale · ds · k,   dk = scale · dsᵀ · q.
// The lse output is differentiable too (d lse_i / d s_ij = p_ij), so dlse costs one term.
// Fully masked query rows (lse = −inf) have p = 0 and pass no gradient.
#include "operators/attention.h"
#include "operators/attention_kernels.h"
#include "operators/dense_kernels.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/grad_util.h"
#include "operators/matmul.h"
#include "operators/reduce.h"
#include "operators/tensor_manip.h"

#include <algorithm>
#include <cmath>

namespace braid::opr {

VarNode* Attention::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Attention&>(node);
    SymbolVar gout = out_grads[0], glse = out_grads[1];
    if (!gout.valid() && !glse.valid()) return nullptr;
    if (i == 2 && !gout.valid()) return nullptr; // lse does not depend on v
    if (opr.comp_node().device().kind == Device::Kind::CPU)
        return opr.backward(gout, glse)[i].node();
    SymbolVar q = opr.input(0), k = opr.input(1), v = opr.input(2);
    SymbolVar out = opr.output(0), lse = opr.output(1);
    const TensorShape& qs = static_shape(q.node(), "Attention");
    const TensorShape& ks = static_shape(k.node(), "Attention");
    size_t sq = qs[2], sk = ks[2];
    if (sq == 0 || sk == 0) return zeros_of(opr.input(i)).node();
    double scale = opr.param().scale ? double(*opr.param().scale) : 1.0 / std::sqrt(double(qs[3]));
    DType dt = q.dtype();

    SymbolVar s = batched_matmul(q, k, false, true) * scale;
    SymbolVar lse_col = expand_dims(lse.dtype() == dt ? lse : lse.astype(dt), {-1});
    SymbolVar p = exp(s - lse_col);
    if (opr.param().causal) {
        // Query i sees key j iff j <= i + sk - sq.
        auto cfg = OperatorConfig::on(q.comp_node());
        SymbolVar rows = Arange::make(q.graph(), 0, double(sq), 1, dtype::Int32(), cfg);
        SymbolVar cols = Arange::make(q.graph(), 0, double(sk), 1, dtype::Int32(), cfg);
        SymbolVar visible = less_equal(cols.reshape({1, long(sk)}),
                                       rows.reshape({long(sq), 1}) + (double(sk) - double(sq)));
        p = where(visible, p, scalar_like(p, 0.0));
    }
    if (i == 2) return batched_matmul(p, gout, true, false).node();

    SymbolVar row_term;
    if (gout.valid()) row_term = -reduce_sum(gout * out, {-1}, true);
    if (glse.valid()) {
        SymbolVar gl = expand_dims(glse.dtype() == dt ? glse : glse.astype(dt), {-1});
        row_term = row_term.valid() ? row_term + gl : gl;
    }
    SymbolVar inner = gout.valid() ? batched_matmul(gout, v, false, true) + row_term : row_term;
    SymbolVar ds = p * inner;
    if (i == 0) return (batched_matmul(ds, k) * scale).node();
    return (batched_matmul(ds, q, true, false) * scale).node();
}

SymbolVarArray Attention::backward(SymbolVar gout, SymbolVar glse) {
    auto key = std::make_pair(gout.node(), glse.node());
    auto it = m_backward.find(key);
    if (it != m_backward.end()) return it->second;
    SymbolVar out = output(0);
    SymbolVarArray inputs{input(0), input(1),  input(2),
                          out,      output(1), gout.valid() ? gout : zeros_of(out)};
    if (glse.valid()) inputs.push_back(glse);
    return m_backward[key] = AttentionGrad::make(inputs, m_param, OperatorConfig::on(comp_node()));
}

AttentionGrad::AttentionGrad(const VarNodeArray& inputs, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    if (inputs.size() != 6 && inputs.size() != 7)
        BRAID_THROW(GraphError,
                    "AttentionGrad: expected inputs q, k, v, out, lse, dout [, dlse], got {}",
                    inputs.size());
    for (auto* in : inputs) add_input(in);
    add_output("dq");
    add_output("dk");
    add_output("dv");
}

SymbolVarArray AttentionGrad::make(const SymbolVarArray& inputs, Param param,
                                   const OperatorConfig& config) {
    VarNodeArray nodes;
    for (auto& in : inputs) nodes.push_back(in.node());
    auto* opr =
        inputs.at(0).graph().insert_opr(std::make_unique<AttentionGrad>(nodes, param, config));
    return {opr->output(0), opr->output(1), opr->output(2)};
}

void AttentionGrad::init_output_dtypes() {
    DType dt = input(0)->dtype();
    for (size_t i : {1, 2, 3, 5})
        if (input(i)->dtype() != dt)
            BRAID_THROW(DTypeError, "{}: input {} \"{}\" is {}, q is {}", describe(), i,
                        input(i)->name(), input(i)->dtype().name(), dt.name());
    for (size_t i = 0; i < 3; ++i) output(i)->set_dtype(dt);
}

bool AttentionGrad::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    for (size_t i = 0; i < inputs().size(); ++i)
        if (!ctx.shape(i)) return false;
    const auto &q = *ctx.shape(0), &k = *ctx.shape(1), &v = *ctx.shape(2);
    TensorShape expect_out{q[0], q[1], q[2], v[3]}, expect_lse{q[0], q[1], q[2]};
    if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4 || *ctx.shape(3) != expect_out ||
        *ctx.shape(5) != expect_out || *ctx.shape(4) != expect_lse ||
        (inputs().size() > 6 && *ctx.shape(6) != expect_lse))
        BRAID_THROW(ShapeError, "{}: inputs q {}, k {}, v {}, out {}, lse {}, dout {} disagree",
                    describe(), q.to_string(), k.to_string(), v.to_string(),
                    ctx.shape(3)->to_string(), ctx.shape(4)->to_string(),
                    ctx.shape(5)->to_string());
    out[0] = q;
    out[1] = k;
    out[2] = v;
    return true;
}

void AttentionGrad::execute(ExecCtx& ctx) {
    Tensor q = kern::as_float32(ctx.input(0)), k = kern::as_float32(ctx.input(1)),
           v = kern::as_float32(ctx.input(2)), out = kern::as_float32(ctx.input(3)),
           lse = ctx.input(4).contiguous(), dout = kern::as_float32(ctx.input(5));
    Tensor dlse = inputs().size() > 6 ? ctx.input(6).contiguous() : Tensor();
    const auto &qs = q.shape(), &ks = k.shape(), &vs = v.shape();
    kern::AttentionGeometry g{qs[2], ks[2], qs[3], vs[3], 0.f, m_param.causal};
    g.scale = m_param.scale ? *m_param.scale : 1.f / std::sqrt(float(g.d));
    size_t heads = qs[0] * qs[1];
    Tensor dq = kern::float32_target(ctx.output(0)), dk = kern::float32_target(ctx.output(1)),
           dv = kern::float32_target(ctx.output(2));
    for (Tensor* t : {&dq, &dk, &dv})
        std::fill(t->ptr<float>(), t->ptr<float>() + t->shape().total_nr_elems(), 0.f);
    std::vector<float> delta(heads * g.sq);
    kern::attention_delta(heads, g.sq, g.dv, out.ptr<float>(), dout.ptr<float>(),
                          dlse.empty() ? nullptr : dlse.ptr<float>(), delta.data());
    kern::attention_backward(g, heads, kern::HeadStrides::contiguous(g), q.ptr<float>(),
                             k.ptr<float>(), v.ptr<float>(), lse.ptr<float>(), dout.ptr<float>(),
                             delta.data(), dq.ptr<float>(), dk.ptr<float>(), dv.ptr<float>());
    kern::store_float32(dq, ctx.output(0));
    kern::store_float32(dk, ctx.output(1));
    kern::store_float32(dv, ctx.output(2));
}

} // namespace braid::opr
