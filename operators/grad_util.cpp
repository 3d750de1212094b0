#include "operators/grad_util.h"

#include "base/error.h"
#include "graph/operator_node.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/reduce.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

namespace braid::opr {

SymbolVar reduce_sum_to_shape(SymbolVar g, SymbolVar like) {
    const TensorShape& from = g.shape();
    const TensorShape& target = like.shape();
    if (from == target) return g;
    BRAID_ASSERT(from.ndim() >= target.ndim(), "cannot reduce {} to {}", from.to_string(),
                 target.to_string());
    size_t lead = from.ndim() - target.ndim();
    std::vector<int> axes;
    for (size_t d = 0; d < from.ndim(); ++d)
        if (d < lead || (target[d - lead] == 1 && from[d] != 1)) axes.push_back(int(d));
    SymbolVar r = axes.empty() ? g : reduce_sum(g, axes, true);
    return reshape_to(r, like);
}

SymbolVar filled_like(SymbolVar like, double value) {
    SymbolVar s = scalar_like(like, value);
    if (like.node()->shape_known() && like.shape().is_scalar()) return s;
    return s.broadcast(like.symshape());
}

SymbolVar zeros_of(SymbolVar like) {
    return filled_like(like, 0.0);
}

SymbolVar reshape_to(SymbolVar x, SymbolVar like) {
    if (x.node()->shape_known() && like.node()->shape_known() && x.shape() == like.shape())
        return x;
    return x.reshape(like.symshape());
}

SymbolVar nr_elems_along(SymbolVar x, const std::vector<int>& axes, DType dtype) {
    SymbolVar shape = x.symshape();
    size_t ndim = static_shape(x.node(), "a mean").ndim();
    std::vector<int> picked = axes;
    if (picked.empty())
        for (size_t d = 0; d < ndim; ++d) picked.push_back(int(d));
    SymbolVar count;
    for (int a : picked) {
        long d = a < 0 ? long(a) + long(ndim) : long(a);
        SymbolVar dim = subtensor(shape, {AxisIndex::index(0, d)});
        count = count.valid() ? count * dim : dim;
    }
    if (!count.valid()) return scalar_like(x, 1.0).astype(dtype);
    return count.astype(dtype);
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
