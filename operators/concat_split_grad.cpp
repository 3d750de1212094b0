// Gradient rules of Concat (each input gets its slice of the output gradient) and Split (the
// input gets the output gradients concatenated; an output the loss does not use contributes
// zeros).
#include "operators/concat_split.h"
#include "operators/grad_util.h"
#include "operators/kernel_utils.h"
#include "operators/subtensor.h"

namespace braid::opr {

VarNode* Concat::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Concat&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    const TensorShape& out = static_shape(opr.output(0), "Concat");
    size_t axis = normalize_axis(opr.axis(), out.ndim(), opr.describe());
    long begin = 0;
    for (size_t k = 0; k < i; ++k) begin += long(static_shape(opr.input(k), "Concat")[axis]);
    long len = long(static_shape(opr.input(i), "Concat")[axis]);
    if (opr.inputs().size() == 1) return g.node();
    return subtensor(g, {AxisIndex::slice(int(axis), begin, begin + len)}).node();
}

VarNode* Split::grad_rule(OperatorNode& node, size_t, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Split&>(node);
    SymbolVarArray parts;
    for (size_t k = 0; k < opr.outputs().size(); ++k)
        parts.push_back(out_grads[k] ? SymbolVar(out_grads[k]) : zeros_of(opr.output(k)));
    if (parts.size() == 1) return parts[0].node();
    return concat(parts, opr.param().axis).node();
}

} // namespace braid::opr
