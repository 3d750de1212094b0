// Gradient rules of Reshape, Broadcast, TypeCvt, GetVarShape, Dimshuffle and AxisAddRemove.
#include "operators/grad_util.h"
#include "operators/tensor_manip.h"

namespace braid::opr {

VarNode* Reshape::grad_rule(OperatorNode& opr, size_t i, const VarNodeArray& out_grads) {
    SymbolVar g = out_grads[0];
    if (!g.valid() || i != 0) return nullptr; // the shape input has no gradient
    return reshape_to(g, opr.input(0)).node();
}

VarNode* Broadcast::grad_rule(OperatorNode& opr, size_t i, const VarNodeArray& out_grads) {
    SymbolVar g = out_grads[0];
    if (!g.valid() || i != 0) return nullptr;
    return reduce_sum_to_shape(g, opr.input(0)).node();
}

VarNode* TypeCvt::grad_rule(OperatorNode& opr, size_t, const VarNodeArray& out_grads) {
    SymbolVar g = out_grads[0];
    DType in = opr.input(0)->dtype();
    if (!g.valid() || !in.is_float() || !g.dtype().is_float()) return nullptr;
    return g.astype(in).node();
}

VarNode* Dimshuffle::grad_rule(OperatorNode& node, size_t, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Dimshuffle&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    // Drop the inserted unit axes, then permute the input axes back into place.
    const auto& pattern = opr.pattern();
    std::vector<int> new_axes, kept;
    for (size_t k = 0; k < pattern.size(); ++k) {
        if (pattern[k] < 0)
            new_axes.push_back(int(k));
        else
            kept.push_back(pattern[k]);
    }
    if (!new_axes.empty()) g = squeeze(g, new_axes);
    std::vector<int> inverse(kept.size());
    bool identity = true;
    for (size_t k = 0; k < kept.size(); ++k) {
        inverse[size_t(kept[k])] = int(k);
        identity &= kept[k] == int(k);
    }
    return (identity ? g : dimshuffle(g, inverse)).node();
}

VarNode* AxisAddRemove::grad_rule(OperatorNode& opr, size_t, const VarNodeArray& out_grads) {
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    return reshape_to(g, opr.input(0)).node();
}

} // namespace braid::opr
