// Gradient rules of Softmax (and log-softmax), LayerNorm and RMSNorm.
//
//   softmax:     dx = y · (g − Σ g·y)                  (sums along the softmax axis)
//   log-softmax: dx = g − exp(y) · Σ g
//   LayerNorm:   x̂ = (x − μ)·r, r = 1/sqrt(var + eps), ĝ = g·weight (or g):
//                dx = r · (ĝ − mean(ĝ) − x̂ · mean(ĝ·x̂)),  dweight = Σ g·x̂,  dbias = Σ g
//   RMSNorm:     x̂ = x·r, r = 1/sqrt(mean(x²) + eps):  dx = r · (ĝ − x̂ · mean(ĝ·x̂))
// (means over the normalized dims, weight and bias sums over the leading ones). The statistics
// are recomputed from x; the rules of different inputs share them through deduplication.
#include "operators/elemwise.h"
#include "operators/grad_util.h"
#include "operators/normalization.h"
#include "operators/reduce.h"

namespace braid::opr {

VarNode* Softmax::grad_rule(OperatorNode& node, size_t, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Softmax&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    SymbolVar y = opr.output(0);
    int axis = opr.param().axis;
    if (opr.param().log) return (g - exp(y) * reduce_sum(g, {axis}, true)).node();
    return (y * (g - reduce_sum(g * y, {axis}, true))).node();
}

VarNode* Normalization::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Normalization&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    const auto& p = opr.param();
    SymbolVar x = opr.input(0);
    SymbolVar weight = p.has_weight ? SymbolVar(opr.input(1)) : SymbolVar();
    size_t bias_idx = p.has_weight ? 2 : 1;
    std::vector<int> axes;
    for (size_t k = 0; k < p.normalized_ndim; ++k) axes.push_back(-int(k) - 1);

    bool layer = p.kind == Normalization::Kind::LAYER;
    SymbolVar centred = layer ? x - reduce_mean(x, axes, true) : x;
    SymbolVar rstd = rsqrt(reduce_mean(centred * centred, axes, true) + double(p.eps));
    SymbolVar xhat = centred * rstd;
    if (i == bias_idx && p.has_bias) return reduce_sum_to_shape(g, opr.input(i)).node();
    if (i == 1 && p.has_weight) return reduce_sum_to_shape(g * xhat, weight).node();

    SymbolVar gh = p.has_weight ? g * weight : g;
    SymbolVar inner = gh - xhat * reduce_mean(gh * xhat, axes, true);
    if (layer) inner = inner - reduce_mean(gh, axes, true);
    return (rstd * inner).node();
}

} // namespace braid::opr
