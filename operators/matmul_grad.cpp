// Gradient rules of MatMul and BatchedMatMul: for y = op(A) op(B), d op(A) = g op(B)^T and
// d op(B) = op(A)^T g, transposed back when the operand itself was transposed. A batched
// operand that was broadcast over batch dims gets its gradient summed over them; a 2-D right
// operand shared by a whole batch gets it as one GEMM over the flattened batch.
#include "operators/grad_util.h"
#include "operators/matmul.h"

namespace braid::opr {

VarNode* MatMul::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<MatMul&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    SymbolVar a = opr.input(0), b = opr.input(1);
    bool ta = opr.param().transpose_a, tb = opr.param().transpose_b;
    if (i == 0) return (ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb)).node();
    return (tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false)).node();
}

VarNode* BatchedMatMul::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<BatchedMatMul&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    SymbolVar a = opr.input(0), b = opr.input(1);
    bool ta = opr.param().transpose_a, tb = opr.param().transpose_b;
    const char* who = "BatchedMatMul";
    const TensorShape& as = static_shape(a.node(), who);
    const TensorShape& bs = static_shape(b.node(), who);
    if (i == 0)
        return reduce_sum_to_shape(
                   ta ? batched_matmul(b, g, tb, true) : batched_matmul(g, b, false, !tb), a)
            .node();
    if (bs.ndim() == 2 && as.ndim() > 2 && !ta) {
        // [..., m, k] x [k, n]: sum over the batch = one [k, B·m] x [B·m, n] product.
        SymbolVar a2 = a.reshape({-1, long(as[as.ndim() - 1])});
        SymbolVar g2 = g.reshape({-1, long(g.shape()[g.shape().ndim() - 1])});
        return (tb ? matmul(g2, a2, true, false) : matmul(a2, g2, true, false)).node();
    }
    return reduce_sum_to_shape(
               tb ? batched_matmul(g, a, true, ta) : batched_matmul(a, g, !ta, false), b)
        .node();
}

} // namespace braid::opr
