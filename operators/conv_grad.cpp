// Gradient rules of Conv2d and of its two backward operators (so second-order gradients work):
//   y = conv2d(x, w):              dx = backward_data(w, g),  dw = backward_filter(x, g)
//   dx = backward_data(w, dy):     dw = backward_filter(g, dy), ddy = conv2d(g, w)
//   dw = backward_filter(x, dy):   dx = backward_data(g, dy),   ddy = conv2d(x, g)
// (all three are bilinear forms of one pairing, sum(conv2d(x, w) · dy)).
#include "operators/conv.h"
#include "operators/conv_backward.h"
#include "operators/grad_util.h"

namespace braid::opr {

VarNode* Conv2d::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Conv2d&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    const TensorShape& xs = static_shape(opr.input(0), "Conv2d");
    const TensorShape& ws = static_shape(opr.input(1), "Conv2d");
    if (i == 0) return conv2d_backward_data(opr.input(1), g, opr.param(), xs[2], xs[3]).node();
    return conv2d_backward_filter(opr.input(0), g, opr.param(), ws[2], ws[3]).node();
}

VarNode* Conv2dBackwardData::grad_rule(OperatorNode& node, size_t i,
                                       const VarNodeArray& out_grads) {
    auto& opr = static_cast<Conv2dBackwardData&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    const auto& p = opr.param();
    SymbolVar w = opr.input(0), dy = opr.input(1);
    if (i == 0) {
        const TensorShape& ws = static_shape(w.node(), "Conv2dBackwardData");
        return conv2d_backward_filter(g, dy, p.conv, ws[2], ws[3]).node();
    }
    return Conv2d::make(g, w, p.conv).node();
}

VarNode* Conv2dBackwardFilter::grad_rule(OperatorNode& node, size_t i,
                                         const VarNodeArray& out_grads) {
    auto& opr = static_cast<Conv2dBackwardFilter&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    const auto& p = opr.param();
    SymbolVar x = opr.input(0), dy = opr.input(1);
    if (i == 0) {
        const TensorShape& xs = static_shape(x.node(), "Conv2dBackwardFilter");
        return conv2d_backward_data(g, dy, p.conv, xs[2], xs[3]).node();
    }
    return Conv2d::make(x, g, p.conv).node();
}

} // namespace braid::opr
