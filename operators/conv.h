// 2-D convolution (cross-correlation, as in every deep-learning framework) of NCHW inputs with
// OIHW weights, with stride, padding, dilation and groups.
//
// Shapes: x [N, C, H, W], w [O, C/groups, KH, KW] → y [N, O, OH, OW] with
// OH = (H + 2·pad_h − dilation_h·(KH − 1) − 1) / stride_h + 1 (floor), OW likewise. There is
// no bias input: add one with an elementwise op (y + b.reshape({1, O, 1, 1})).
// Dtypes: x and w share one float dtype; float16 and bfloat16 are computed in float32.
// Kernels: oneDNN's JIT convolutions where braid is built with oneDNN and it has one for the
// case (operators/dnnl_kernels.h: Winograd for 3x3 stride 1 on AVX-512, direct blocked kernels
// otherwise); else, and for pointwise, one-input-channel and 1xK / Kx1 kernels, braid's own:
// for stride 1, dilation 1 and one group the direct kernel of operators/conv_direct.h (no
// im2col matrix; AVX2 or AVX-512); otherwise im2col + sgemm, cut into (batch item, group, block
// of output pixels) tasks that the pool runs in parallel, a block's im2col columns in cache for
// its GEMM, and 1x1 kernels with stride 1 and no padding without im2col. Memory: planned output,
// never in place.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

#include <functional>
#include <optional>

namespace braid::opr {

namespace kern {
class DnnlConstantWeights; // operators/dnnl_kernels.h
struct DnnlConvFusion;
} // namespace kern

//! Geometry of Conv2d. Strides and dilations must be >= 1, paddings >= 0 (zero padding),
//! groups >= 1 and must divide both the input and the output channels.
struct Conv2dParam {
    int stride_h = 1, stride_w = 1;
    int pad_h = 0, pad_w = 0;
    int dilation_h = 1, dilation_w = 1;
    int groups = 1;
    //! Set (true) when the inputs hold integers whose products must sum exactly (the ONNX
    //! integer convolutions): no algorithm that rounds otherwise than a sum of products
    //! (Winograd) is used. Unset (absent from model files) is false.
    std::optional<bool> exact = std::nullopt;
    static constexpr auto fields() {
        using P = Conv2dParam;
        return std::tuple{
            param_field("stride_h", &P::stride_h),     param_field("stride_w", &P::stride_w),
            param_field("pad_h", &P::pad_h),           param_field("pad_w", &P::pad_w),
            param_field("dilation_h", &P::dilation_h), param_field("dilation_w", &P::dilation_w),
            param_field("groups", &P::groups),         param_field("exact", &P::exact)};
    }
};

//! y = conv2d(x, w) for NCHW x and OIHW w; see the file comment for the shape rule.
class Conv2d final : public ParamOperator<Conv2d, Conv2dParam> {
public:
    Conv2d(VarNode* x, VarNode* w, Param param, const OperatorConfig& config);
    //! Throws ValueError for bad params, DTypeError unless x and w share a float dtype, and
    //! ShapeError for inputs that are not 4-D, channel counts that disagree with the weight
    //! and groups, or a dilated kernel larger than the padded input.
    static SymbolVar make(SymbolVar x, SymbolVar w, Param param = {},
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "Conv2d"; }
    //! The gradient rule (graph/grad.h), in operators/conv_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    size_t workspace_bytes() const override;
    void execute(ExecCtx& ctx) override;

private:
    //! The oneDNN kernel's weights, kept while they are constants.
    std::shared_ptr<kern::DnnlConstantWeights> m_constant_weights;
};

/*!
 * Called by conv2d_forward() for each finished block of the output: channels [o0, o0 + rows) of
 * one batch item, `cols` pixels starting at `y` (row stride `ld`), on the thread that computed
 * them while they are in its cache.
 */
using ConvEpilogue = std::function<void(float* y, size_t o0, size_t rows, size_t cols, size_t ld)>;
//! Conv2d's CPU kernel on float32 tensors (y allocated with the output shape), with an optional
//! epilogue per block (fused bias, batch norm and activation; operators/fused_conv.h); the
//! direct kernel where it applies, else im2col and a GEMM with the columns in `workspace`.
void conv2d_forward(const Conv2dParam& param, const Tensor& x, const Tensor& w, Tensor& y,
                    const ConvEpilogue* epilogue, Workspace& workspace);
//! The workspace bytes conv2d_forward() asks for on x and w of these shapes: im2col's columns,
//! a block per task that may run at once (0 for the direct kernel and pointwise GEMMs).
size_t conv2d_forward_workspace(const Conv2dParam& param, const TensorShape& x,
                                const TensorShape& w);
//! The workspace the CPU convolution asks for with `fusion` (see kern::DnnlConvFusion):
//! oneDNN's where it runs the case, else conv2d_forward()'s. What the convolution operators'
//! workspace_bytes() return.
size_t conv2d_workspace(const Conv2dParam& param, const TensorShape& x, const TensorShape& w,
                        const kern::DnnlConvFusion& fusion);

//! Conv2d's CPU kernel on float32 tensors: oneDNN's where it runs the case (its buffers in
//! `workspace`), else conv2d_forward(). `constant_weights` as DnnlConvFusion::constant_weights
//! (may be null).
void conv2d_float32(const Conv2dParam& param, const Tensor& x, const Tensor& w, Tensor& y,
                    Workspace& workspace, kern::DnnlConstantWeights* constant_weights = nullptr);

//! Throws ValueError naming `who` for strides, dilations or groups below 1 or negative paddings.
void check_conv2d_param(const Conv2dParam& param, const std::string& who);
//! The output shape of x [N, C, H, W] convolved with w [O, C/groups, KH, KW] (see the file
//! comment); throws ShapeError naming `who` for inputs that do not fit the geometry.
TensorShape conv2d_output_shape(const Conv2dParam& param, const TensorShape& x,
                                const TensorShape& w, const std::string& who);

//! conv2d with the same stride, padding and dilation along both spatial dims.
SymbolVar conv2d(SymbolVar x, SymbolVar w, int stride = 1, int padding = 0, int dilation = 1,
                 int groups = 1);

} // namespace braid::opr
