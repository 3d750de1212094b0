// Gradient rules of Reshape, Broadcast, TypeCvt and GetVarShape.
#include "operators/grad_util.h"
#include "operators/tensor_manip.h"

namespace braid::opr {

namespace {

VarNode* reshape_grad(OperatorNode& opr, size_t i, const VarNodeArray& out_grads) {
    SymbolVar g = out_grads[0];
    if (!g.valid() || i != 0) return nullptr; // the shape input has no gradient
    SymbolVar x = opr.input(0);
    if (x.node()->shape_known()) {
        std::vector<long> dims;
        for (size_t d : x.shape().dims()) dims.push_back(long(d));
        return g.reshape(dims).node();
    }
    return g.reshape(x.symshape()).node();
}

VarNode* broadcast_grad(OperatorNode& opr, size_t i, const VarNodeArray& out_grads) {
    SymbolVar g = out_grads[0];
    if (!g.valid() || i != 0) return nullptr;
    return reduce_sum_to_shape(g, opr.input(0)->shape()).node();
}

VarNode* typecvt_grad(OperatorNode& opr, size_t, const VarNodeArray& out_grads) {
    SymbolVar g = out_grads[0];
    DType in = opr.input(0)->dtype();
    if (!g.valid() || !in.is_float() || !g.dtype().is_float()) return nullptr;
    return g.astype(in).node();
}

} // namespace

void register_tensor_manip_grad() {
    register_grad_rule("Reshape", reshape_grad);
    register_grad_rule("Broadcast", broadcast_grad);
    register_grad_rule("TypeCvt", typecvt_grad);
    register_grad_rule("GetVarShape",
                       [](OperatorNode&, size_t, const VarNodeArray&) { return nullptr; });
}

} // namespace braid::opr
