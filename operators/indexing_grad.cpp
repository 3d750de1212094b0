// Gradient rules of the index-driven operators. Indices get no gradient.
//   Gather:          dx = scatter_add(0, index, g, axis)
//   IndexingOneHot:  dx = scatter_add(0, index with the axis kept, g with the axis kept, axis)
//   Embedding:       dtable = index_add(0, ids flattened, g as [ids, dim], 0)
//   ScatterAdd:      dx = g, dvalue = gather(g, index, axis)
//   IndexAdd:        dx = g, dvalue = g's slices at index (a gather with the index broadcast)
#include "operators/grad_util.h"
#include "operators/indexing.h"
#include "operators/kernel_utils.h"
#include "operators/scatter.h"
#include "operators/tensor_manip.h"

namespace braid::opr {

VarNode* Gather::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Gather&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid() || i != 0) return nullptr;
    return scatter_add(zeros_of(opr.input(0)), opr.input(1), g, opr.axis()).node();
}

VarNode* IndexingOneHot::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<IndexingOneHot&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid() || i != 0) return nullptr;
    const TensorShape& xs = static_shape(opr.input(0), "IndexingOneHot");
    int axis = int(normalize_axis(opr.axis(), xs.ndim(), opr.describe()));
    SymbolVar index = expand_dims(opr.input(1), {axis});
    if (!opr.keepdims()) g = expand_dims(g, {axis});
    return scatter_add(zeros_of(opr.input(0)), index, g, axis).node();
}

VarNode* Embedding::grad_rule(OperatorNode& opr, size_t i, const VarNodeArray& out_grads) {
    SymbolVar g = out_grads[0];
    if (!g.valid() || i != 0) return nullptr;
    const TensorShape& ts = static_shape(opr.input(0), "Embedding");
    SymbolVar ids = SymbolVar(opr.input(1)).reshape({-1});
    return index_add(zeros_of(opr.input(0)), ids, g.reshape({-1, long(ts[1])}), 0).node();
}

VarNode* ScatterAdd::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<ScatterAdd&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid() || i == 1) return nullptr;
    if (i == 0) return g.node();
    return gather(g, opr.input(1), opr.axis()).node();
}

VarNode* IndexAdd::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<IndexAdd&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid() || i == 1) return nullptr;
    if (i == 0) return g.node();
    const TensorShape& vs = static_shape(opr.input(2), "IndexAdd");
    size_t axis = normalize_axis(opr.axis(), vs.ndim(), opr.describe());
    // The 1-D index along `axis`, with unit axes around it, broadcast to the values' shape.
    std::vector<int> unit_axes;
    for (size_t d = 0; d < vs.ndim(); ++d)
        if (d != axis) unit_axes.push_back(int(d));
    SymbolVar index = SymbolVar(opr.input(1));
    if (!unit_axes.empty()) index = expand_dims(index, unit_axes);
    index = index.broadcast(SymbolVar(opr.input(2)).symshape());
    return gather(g, index, int(axis)).node();
}

} // namespace braid::opr
