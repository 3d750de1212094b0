// Gradient rules of Reduce.
#include "base/error.h"
#include "operators/elemwise.h"
#include "operators/grad_util.h"
#include "operators/reduce.h"

namespace braid::opr {

namespace {

VarNode* reduce_grad(OperatorNode& node, size_t, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Reduce&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    const TensorShape& in = opr.input(0)->shape();
    // The output shape with the reduced axes kept as 1, so g broadcasts back over them.
    std::vector<long> kept;
    std::vector<bool> reduced(in.ndim(), opr.param().axes.empty());
    for (int a : opr.param().axes) reduced[size_t(a < 0 ? a + int(in.ndim()) : a)] = true;
    size_t count = 1;
    for (size_t d = 0; d < in.ndim(); ++d) {
        kept.push_back(reduced[d] ? 1 : long(in[d]));
        if (reduced[d]) count *= in[d];
    }
    SymbolVar gk = g.shape().ndim() == kept.size() ? g : g.reshape(kept);
    switch (opr.param().mode) {
    case ReduceMode::SUM:
        return gk.broadcast(in).node();
    case ReduceMode::MEAN:
        return (gk.broadcast(in) * (1.0 / double(count))).node();
    default:
        BRAID_THROW(GraphError, "grad(): {} has no gradient rule for mode {}", opr.describe(),
                    reduce_mode_name(opr.param().mode));
    }
}

} // namespace

void register_reduce_grad() {
    register_grad_rule("Reduce", reduce_grad);
}

} // namespace braid::opr
