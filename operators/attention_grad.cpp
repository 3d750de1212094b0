// Gradient rule of Attention, built from differentiable primitives. The probabilities are
// recomputed from q, k and the forward's lse (no second softmax pass):
//   s = scale · q kᵀ,  p = exp(s − lse) on visible keys, 0 on masked ones,
//   dv = pᵀ · dout,    dp = dout · vᵀ,
//   ds = p · (dp − Σ_j dout·out + dlse)          (per query row),
//   dq = scale · ds · k,   dk = scale · dsᵀ · q.
// The lse output is differentiable too (d lse_i / d s_ij = p_ij), so dlse costs one term.
// Fully masked query rows (lse = −inf) have p = 0 and pass no gradient.
#include "operators/attention.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/grad_util.h"
#include "operators/matmul.h"
#include "operators/reduce.h"
#include "operators/tensor_manip.h"

#include <cmath>

namespace braid::opr {

namespace {

VarNode* attention_grad(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Attention&>(node);
    SymbolVar gout = out_grads[0], glse = out_grads[1];
    if (!gout.valid() && !glse.valid()) return nullptr;
    if (i == 2 && !gout.valid()) return nullptr; // lse does not depend on v
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

} // namespace

void register_attention_grad() {
    register_grad_rule("Attention", attention_grad);
}

} // namespace braid::opr
