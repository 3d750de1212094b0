// Gradient rules of MatMul: for y = op(A) op(B), d op(A) = g op(B)^T and d op(B) = op(A)^T g,
// transposed back when the operand itself was transposed.
#include "operators/grad_util.h"
#include "operators/matmul.h"

namespace braid::opr {

namespace {

VarNode* matmul_grad(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<MatMul&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    SymbolVar a = opr.input(0), b = opr.input(1);
    bool ta = opr.param().transpose_a, tb = opr.param().transpose_b;
    if (i == 0) return (ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb)).node();
    return (tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false)).node();
}

} // namespace

void register_matmul_grad() {
    register_grad_rule("MatMul", matmul_grad);
}

} // namespace braid::opr
