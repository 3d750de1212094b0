// Gradient rules of Elemwise.
#include "base/error.h"
#include "operators/elemwise.h"
#include "operators/grad_util.h"

namespace braid::opr {

namespace {

VarNode* elemwise_grad(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Elemwise&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    SymbolVar x = opr.input(0), y = opr.output(0);
    SymbolVar other = opr.inputs().size() > 1 ? SymbolVar(opr.input(1 - i)) : SymbolVar();
    const TensorShape& in_shape = opr.input(i)->shape();
    SymbolVar r;
    switch (opr.mode()) {
    case ElemMode::ADD:
        r = g;
        break;
    case ElemMode::SUB:
        r = i == 0 ? g : -g;
        break;
    case ElemMode::MUL:
        r = g * other;
        break;
    case ElemMode::TRUE_DIV:
        if (i == 0)
            r = g / SymbolVar(opr.input(1));
        else
            r = -(g * x) / (SymbolVar(opr.input(1)) * SymbolVar(opr.input(1)));
        break;
    case ElemMode::NEG:
        r = -g;
        break;
    case ElemMode::EXP:
        r = g * y;
        break;
    case ElemMode::LOG:
        r = g / x;
        break;
    case ElemMode::TANH:
        r = g * (1.0 - y * y);
        break;
    case ElemMode::SIGMOID:
        r = g * y * (1.0 - y);
        break;
    default:
        BRAID_THROW(GraphError, "grad(): {} has no gradient rule for mode {}", opr.describe(),
                    elem_mode_name(opr.mode()));
    }
    return reduce_sum_to_shape(r, in_shape).node();
}

} // namespace

void register_elemwise_grad() {
    register_grad_rule("Elemwise", elemwise_grad);
}

} // namespace braid::opr
