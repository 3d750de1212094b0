// Gradient rules of Reduce (every mode) and ArgReduce (not differentiable).
//
// MAX / MIN route the gradient to the elements equal to the result and split it evenly among
// ties (each of k equal extremes gets g / k). PROD uses the product of the other elements,
// computed without dividing by zero: an element that is the only zero of its group gets the
// product of the rest, every element of a group with two or more zeros gets 0.
#include "base/error.h"
#include "operators/elemwise.h"
#include "operators/grad_util.h"
#include "operators/reduce.h"
#include "operators/tensor_manip.h"

namespace braid::opr {

VarNode* Reduce::grad_rule(OperatorNode& node, size_t, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Reduce&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    SymbolVar x = opr.input(0);
    const TensorShape& in = static_shape(opr.input(0), opr.describe().c_str());
    // g with the reduced axes kept as 1 (unit axes inserted where keepdims dropped them), so it
    // broadcasts back over them; shapes follow x symbolically.
    std::vector<bool> reduced(in.ndim(), opr.param().axes.empty());
    for (int a : opr.param().axes) reduced[size_t(a < 0 ? a + int(in.ndim()) : a)] = true;
    std::vector<int> axes;
    for (size_t d = 0; d < in.ndim(); ++d)
        if (reduced[d]) axes.push_back(int(d));
    auto keep = [&](SymbolVar v) {
        return v.shape().ndim() == in.ndim() ? v : expand_dims(v, axes);
    };
    SymbolVar gk = keep(g);
    switch (opr.param().mode) {
    case ReduceMode::SUM:
        return gk.broadcast(x.symshape()).node();
    case ReduceMode::MEAN:
        return (gk.broadcast(x.symshape()) / nr_elems_along(x, axes, g.dtype())).node();
    case ReduceMode::SUM_SQR:
        return (gk * x * 2.0).node();
    case ReduceMode::MAX:
    case ReduceMode::MIN: {
        SymbolVar hit = equal(x, keep(opr.output(0))).astype(x.dtype());
        SymbolVar ties = reduce_sum(hit, axes, true);
        return (hit * (gk / ties)).node();
    }
    case ReduceMode::PROD: {
        SymbolVar zero = scalar_like(x, 0.0);
        SymbolVar is_zero = equal(x, zero);
        SymbolVar x_nz = where(is_zero, scalar_like(x, 1.0), x);
        SymbolVar prod_nz = reduce_prod(x_nz, axes, true);
        SymbolVar zeros = reduce_sum(is_zero.astype(x.dtype()), axes, true);
        SymbolVar none = equal(zeros, zero).astype(x.dtype());
        SymbolVar one = equal(zeros, scalar_like(x, 1.0)).astype(x.dtype());
        SymbolVar others = where(is_zero, prod_nz * one, prod_nz / x_nz * none);
        return (gk * others).node();
    }
    }
    BRAID_THROW(GraphError, "grad(): {} has no gradient rule for mode {}", opr.describe(),
                reduce_mode_name(opr.param().mode));
}

} // namespace braid::opr
