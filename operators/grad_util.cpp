#include "operators/grad_util.h"

#include "base/error.h"
#include "graph/operator_node.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/reduce.h"
#include "operators/tensor_manip.h"

namespace braid::opr {

SymbolVar reduce_sum_to_shape(SymbolVar g, const TensorShape& target) {
    const TensorShape& from = g.shape();
    if (from == target) return g;
    BRAID_ASSERT(from.ndim() >= target.ndim(), "cannot reduce {} to {}", from.to_string(),
                 target.to_string());
    size_t lead = from.ndim() - target.ndim();
    std::vector<int> axes;
    for (size_t d = 0; d < from.ndim(); ++d)
        if (d < lead || (target[d - lead] == 1 && from[d] != 1)) axes.push_back(int(d));
    SymbolVar r = axes.empty() ? g : reduce_sum(g, axes, true);
    return reshape_to(r, target);
}

SymbolVar filled_like(SymbolVar like, double value) {
    SymbolVar s = scalar_like(like, value);
    if (like.shape().is_scalar()) return s;
    return s.broadcast(like.shape());
}

SymbolVar zeros_of(SymbolVar like) {
    return filled_like(like, 0.0);
}

std::vector<long> shape_dims(const TensorShape& shape) {
    std::vector<long> dims;
    for (size_t d : shape.dims()) dims.push_back(long(d));
    return dims;
}

SymbolVar reshape_to(SymbolVar x, const TensorShape& target) {
    return x.shape() == target ? x : x.reshape(shape_dims(target));
}

const TensorShape& static_shape(VarNode* var, const char* who) {
    if (!var->shape_known())
        BRAID_THROW(GraphError,
                    "grad(): the gradient of {} needs the static shape of \"{}\", which is "
                    "dynamic",
                    who, var->name());
    return var->shape();
}

void register_grad_arith() {
    set_grad_arith({
        [](VarNode* a, VarNode* b) { return add(a, b).node(); },
        [](VarNode* v) { return filled_like(v, 1.0).node(); },
        [](VarNode* v) { return filled_like(v, 0.0).node(); },
    });
}

} // namespace braid::opr
