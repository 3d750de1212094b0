// Gradient rules of Pooling (through PoolingBackward) and of PoolingBackward itself, which is
// linear in dy: for AVERAGE its transpose is the pooling again; for MAX the second-order
// gradient w.r.t. dy (a gather at the picked positions) is not supported. Neither mode's
// backward depends on x differentiably (MAX picks are piecewise constant), so x gets zeros.
#include "base/error.h"
#include "operators/grad_util.h"
#include "operators/pooling.h"
#include "operators/pooling_backward.h"

namespace braid::opr {

VarNode* Pooling::grad_rule(OperatorNode& node, size_t, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Pooling&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    return pooling_backward(opr.input(0), g, opr.param()).node();
}

VarNode* PoolingBackward::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<PoolingBackward&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    if (i == 0) return zeros_of(opr.input(0)).node();
    if (opr.param().mode == PoolMode::MAX)
        BRAID_THROW(GraphError,
                    "grad(): {}: second-order gradients of max pooling are not supported",
                    opr.describe());
    return Pooling::make(g, opr.param()).node();
}

} // namespace braid::opr
