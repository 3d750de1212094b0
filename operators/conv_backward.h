// The two halves of Conv2d's gradient, as operators of their own (the gradient rule of Conv2d
// inserts them; see operators/conv.h for the convolution and its geometry):
//  - Conv2dBackwardData(w, dy) → dx: the transposed convolution of dy with w, i.e. the
//    gradient of sum(conv2d(x, w) · dy) w.r.t. x;
//  - Conv2dBackwardFilter(x, dy) → dw: the gradient of the same w.r.t. w.
// Both take Conv2d's params (stride, padding, dilation, groups) and the spatial size of the
// operand they produce, which the output shape alone does not determine (strides floor).
//
// Dtypes: float32, float16, bfloat16 (computed in float32). Kernels: GEMMs through OpenBLAS
// with col2im (data) / im2col (filter) over blocks of output pixels, as Conv2d's forward; the
// data gradient runs (batch item, group) tasks in parallel, the filter gradient accumulates
// over the batch with GEMMs split across the pool.
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"
#include "operators/conv.h"

namespace braid::opr {

//! The params of Conv2dBackwardData: Conv2d's geometry and the spatial size of x.
struct Conv2dBackwardDataParam {
    Conv2dParam conv;
    uint32_t in_h = 0, in_w = 0;
    static constexpr auto fields() {
        using P = Conv2dBackwardDataParam;
        return std::tuple{param_field("conv", &P::conv), param_field("in_h", &P::in_h),
                          param_field("in_w", &P::in_w)};
    }
};

//! dx [N, C, in_h, in_w] from w [O, C/groups, KH, KW] and dy [N, O, OH, OW].
class Conv2dBackwardData final : public ParamOperator<Conv2dBackwardData, Conv2dBackwardDataParam> {
public:
    Conv2dBackwardData(VarNode* w, VarNode* dy, Param param, const OperatorConfig& config);
    //! Throws ValueError for bad params, DTypeError unless w and dy share a float dtype, and
    //! ShapeError when the shapes do not fit a convolution of an in_h x in_w input.
    static SymbolVar make(SymbolVar w, SymbolVar dy, Param param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "Conv2dBackwardData"; }
    //! The gradient rule (graph/grad.h), in operators/conv_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    size_t workspace_bytes() const override;
    void execute(ExecCtx& ctx) override;
};

//! The params of Conv2dBackwardFilter: Conv2d's geometry and the kernel size.
struct Conv2dBackwardFilterParam {
    Conv2dParam conv;
    uint32_t kernel_h = 0, kernel_w = 0;
    static constexpr auto fields() {
        using P = Conv2dBackwardFilterParam;
        return std::tuple{param_field("conv", &P::conv), param_field("kernel_h", &P::kernel_h),
                          param_field("kernel_w", &P::kernel_w)};
    }
};

//! dw [O, C/groups, kernel_h, kernel_w] from x [N, C, H, W] and dy [N, O, OH, OW].
class Conv2dBackwardFilter final
    : public ParamOperator<Conv2dBackwardFilter, Conv2dBackwardFilterParam> {
public:
    Conv2dBackwardFilter(VarNode* x, VarNode* dy, Param param, const OperatorConfig& config);
    //! Throws ValueError for bad params, DTypeError unless x and dy share a float dtype, and
    //! ShapeError when the shapes do not fit a convolution with that kernel size.
    static SymbolVar make(SymbolVar x, SymbolVar dy, Param param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "Conv2dBackwardFilter"; }
    //! The gradient rule (graph/grad.h), in operators/conv_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! The input gradient of conv2d(x, w) for an x of spatial size in_h x in_w (each below 2^32,
//! else ValueError).
SymbolVar conv2d_backward_data(SymbolVar w, SymbolVar dy, const Conv2dParam& param, size_t in_h,
                               size_t in_w);
//! The weight gradient of conv2d(x, w) for a kernel of kernel_h x kernel_w (each below 2^32,
//! else ValueError).
SymbolVar conv2d_backward_filter(SymbolVar x, SymbolVar dy, const Conv2dParam& param,
                                 size_t kernel_h, size_t kernel_w);

} // namespace braid::opr
