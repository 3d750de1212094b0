// Gradient rules of Fill and Arange: generators whose values do not depend on any input (a
// Fill's only input is a shape), so no input gets a gradient.
#include "operators/grad_util.h"

namespace braid::opr {

void register_fill_grad() {
    auto none = [](OperatorNode&, size_t, const VarNodeArray&) -> VarNode* { return nullptr; };
    register_grad_rule("Fill", none);
    register_grad_rule("Arange", none);
}

} // namespace braid::opr
