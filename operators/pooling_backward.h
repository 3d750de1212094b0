// The gradient of Pooling as an operator of its own (the gradient rule of Pooling inserts it):
// PoolingBackward(x, dy) → dx, dx having x's shape.
//  - MAX: each output's gradient goes to the element its window picked: the first largest
//    in row-major window order (the first NaN when the window holds one), padded positions
//    never; windows that overlap add up.
//  - AVERAGE: each output's gradient is spread over its window's input elements, divided by
//    the same count the forward divided by (see count_include_pad).
// Dtypes: float32, float16, bfloat16 (computed in float32). Planes run in parallel.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"
#include "operators/pooling.h"

namespace braid::opr {

//! dx from the pooled input x [N, C, H, W] and the output gradient dy [N, C, OH, OW].
class PoolingBackward final : public ParamOperator<PoolingBackward, PoolingParam> {
public:
    PoolingBackward(VarNode* x, VarNode* dy, Param param, const OperatorConfig& config);
    //! Throws ValueError for bad params, DTypeError unless x and dy share a float dtype, and
    //! ShapeError when dy is not the pooling output shape of x.
    static SymbolVar make(SymbolVar x, SymbolVar dy, Param param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "PoolingBackward"; }
    //! The gradient rule (graph/grad.h), in operators/pooling_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! The input gradient of a pooling of x with `param`, given the output gradient dy.
SymbolVar pooling_backward(SymbolVar x, SymbolVar dy, const PoolingParam& param);

} // namespace braid::opr
