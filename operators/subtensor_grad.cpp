// Gradient rules of Subtensor (the slice's gradient placed into zeros), SetSubtensor (x gets
// the gradient with the overwritten slice zeroed, the value the slice's gradient) and
// IncrSubtensor (x gets the gradient, the value the slice's gradient). A value broadcast to
// the slice gets its gradient summed back.
#include "operators/elemwise.h"
#include "operators/grad_util.h"
#include "operators/subtensor.h"

namespace braid::opr {

VarNode* Subtensor::grad_rule(OperatorNode& node, size_t, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Subtensor&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    return incr_subtensor(zeros_of(opr.input(0)), g, opr.items()).node();
}

VarNode* SetSubtensor::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<SetSubtensor&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    bool set = std::string(opr.type_name()) == "SetSubtensor";
    if (i == 0) return set ? set_subtensor(g, scalar_like(g, 0.0), opr.items()).node() : g.node();
    static_shape(opr.input(1), opr.type_name()); // the broadcast axes come from it
    return reduce_sum_to_shape(subtensor(g, opr.items()), opr.input(1)).node();
}

} // namespace braid::opr
