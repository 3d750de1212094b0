// Gradient rules of BatchNorm (inference form): with r = 1/sqrt(var + eps) and x̂ = (x − mean)·r,
// y = x̂·scale + bias, so
//   dx = g·scale·r,            dscale = Σ g·x̂,           dbias = Σ g,
//   dmean = −Σ g · scale·r,    dvar = −½ Σ g·(x − mean) · scale·r³,
// the sums running over every axis but the channel axis (1). Statistics stored as float32
// under a float16/bfloat16 x are converted for the arithmetic and their gradients back.
#include "operators/batch_norm.h"
#include "operators/elemwise.h"
#include "operators/grad_util.h"
#include "operators/reduce.h"

namespace braid::opr {

VarNode* BatchNorm::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<BatchNorm&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    SymbolVar x = opr.input(0);
    const TensorShape& xs = static_shape(x.node(), "BatchNorm");
    // Statistics as [1, C, 1, ...] vars of x's dtype.
    std::vector<long> bshape(xs.ndim(), 1);
    bshape[1] = long(xs[1]);
    auto stat = [&](size_t k) {
        SymbolVar s = opr.input(k);
        if (s.shape().ndim() != xs.ndim()) s = s.reshape(bshape);
        return s.dtype() == x.dtype() ? s : s.astype(x.dtype());
    };
    std::vector<int> axes;
    for (size_t d = 0; d < xs.ndim(); ++d)
        if (d != 1) axes.push_back(int(d));
    auto channel_sum = [&](SymbolVar v) { return reduce_sum(v, axes, true); };
    // Back to the statistic's own shape and dtype.
    auto as_stat = [&](SymbolVar v, size_t k) {
        SymbolVar s = opr.input(k);
        v = reshape_to(v, s);
        return (v.dtype() == s.dtype() ? v : v.astype(s.dtype())).node();
    };
    SymbolVar scale = stat(1), mean = stat(3);
    SymbolVar rstd = rsqrt(stat(4) + double(opr.eps()));
    switch (i) {
    case 0:
        return (g * (scale * rstd)).node();
    case 1:
        return as_stat(channel_sum(g * (x - mean)) * rstd, 1);
    case 2:
        return as_stat(channel_sum(g), 2);
    case 3:
        return as_stat(-(channel_sum(g) * scale * rstd), 3);
    default:
        return as_stat(channel_sum(g * (x - mean)) * scale * (rstd * rstd * rstd) * -0.5, 4);
    }
}

} // namespace braid::opr
