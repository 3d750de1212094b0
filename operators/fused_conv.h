// FusedConv2d: a convolution with its channel bias, inference batch norm, activation and an
// elementwise chain applied to each block of output while it is still in cache, and the
// compile-time passes (graph/graph_pass.h) that form it: one from Conv2d -> [Elemwise(ADD)
// bias] -> [BatchNorm] -> [activation] chains (at least one of the three), and one, after the
// elementwise chains are formed, that folds an ElemwiseChain reading a convolution's result
// and otherwise single values into that convolution, where the chain runs as one loop
// (ChainRunner: HardSwish and HardSigmoid as exporters write them, a scale and shift). The chain
// computes what ElemwiseChain computes, bit for bit, on each block of the convolution's output
// while it is in cache.
//
// The batch norm is folded into one multiply-add per element, y = (conv + bias[c]) · a[c] + b[c]
// with a = scale / sqrt(var + eps) and b = shift − mean · a, computed per run from the
// statistics (C values), exactly as BatchNorm computes them. Where oneDNN runs the convolution
// (operators/dnnl_kernels.h), a[c] is folded into the weights instead, (bias[c] · a[c] + b[c])
// becomes the convolution's bias and RELU its post-op; the results agree with the unfused
// chain to float32 rounding. The graph keeps its operators
// (gradients, serialization); a chain fuses only where nothing else in the executable reads its
// intermediate results, on CPU comp nodes, in float32.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"
#include "operators/conv.h"
#include "operators/elemwise.h"
#include "operators/elemwise_chain.h"

namespace braid::opr {

//! Params of FusedConv2d: the convolution's geometry and what follows it.
struct FusedConv2dParam {
    Conv2dParam conv;
    bool has_bias = false;       //!< an input [O] (any shape of O elements) added per channel
    bool has_batch_norm = false; //!< four inputs scale, shift, mean, var of O elements each
    float eps = 1e-5f;
    bool has_activation = false;
    ElemMode activation = ElemMode::RELU; //!< RELU, SIGMOID, TANH, GELU or GELU_TANH
    //! An elementwise chain after the activation (no steps: none). Its input 0 is the result
    //! so far; inputs 1 .. chain_scalars are the operator's last inputs, one element each.
    ElemwiseChainParam chain;
    int32_t chain_scalars = 0;
    static constexpr auto fields() {
        using P = FusedConv2dParam;
        return std::tuple{param_field("conv", &P::conv),
                          param_field("has_bias", &P::has_bias),
                          param_field("has_batch_norm", &P::has_batch_norm),
                          param_field("eps", &P::eps),
                          param_field("has_activation", &P::has_activation),
                          param_field("activation", &P::activation, elem_mode_name),
                          param_field("chain", &P::chain),
                          param_field("chain_scalars", &P::chain_scalars)};
    }
};

//! y = chain(act(batch_norm(conv2d(x, w) + bias))) in one kernel (float32, CPU); inputs x, w,
//! then the bias when has_bias, then scale, shift, mean, var when has_batch_norm, then the
//! chain's scalars. No gradient rule: it exists only in compiled executables, where no gradient
//! is taken through it.
class FusedConv2d final : public ParamOperator<FusedConv2d, FusedConv2dParam> {
public:
    FusedConv2d(const VarNodeArray& inputs, Param param, const OperatorConfig& config);
    //! Throws DTypeError unless every input is float32, ShapeError for a wrong input count,
    //! inputs that are not 4-D, or per-channel inputs without O elements. The geometry is
    //! taken as checked by the Conv2d it replaces.
    static SymbolVar make(const SymbolVarArray& inputs, Param param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "FusedConv2d"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    size_t workspace_bytes() const override;
    void execute(ExecCtx& ctx) override;

private:
    //! The oneDNN kernel's weights (batch norm folded in), kept while they are constants.
    std::shared_ptr<kern::DnnlConstantWeights> m_constant_weights;
};

} // namespace braid::opr
