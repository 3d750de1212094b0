// Normalization blocks: Softmax (and log-softmax) over one axis, LayerNorm and RMSNorm over
// the last k dims with optional elementwise weight and bias.
//
// All take float32, float16 and bfloat16 and compute in float32; float64 is a DTypeError
// (it has no kernel here and is never narrowed to float32). Softmax subtracts the
// maximum before exponentiating, so large inputs neither overflow nor lose the small terms.
// Row statistics accumulate in float32 lanes combined in double; rows run in parallel on the
// shared kernel pool when the tensor is large. The output may reuse the input's memory.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! The params of Softmax.
struct SoftmaxParam {
    int axis = -1;    //!< negative counts from the end
    bool log = false; //!< log-softmax
    static constexpr auto fields() {
        return std::tuple{param_field("axis", &SoftmaxParam::axis),
                          param_field("log", &SoftmaxParam::log)};
    }
};

//! softmax(x)_i = e^{x_i - m} / sum_j e^{x_j - m} along `axis`, m the maximum; with `log`,
//! log-softmax: x_i - m - log(sum_j e^{x_j - m}).
class Softmax final : public ParamOperator<Softmax, SoftmaxParam> {
public:
    Softmax(VarNode* x, Param param, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for a bad axis, DTypeError for non-float input.
    static SymbolVar make(SymbolVar x, Param param, const OperatorConfig& config = {});

    const char* type_name() const override { return "Softmax"; }
    //! The gradient rule (graph/grad.h), in operators/normalization_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    int inplace_input(size_t) const override { return 0; }
    void execute(ExecCtx& ctx) override;
};

//! Layer norm (centred) or RMS norm.
enum class NormalizationKind : uint8_t { LAYER, RMS };

//! The params of LayerNorm and RMSNorm: the variant, the normalized dims and epsilon.
struct NormalizationParam {
    NormalizationKind kind = NormalizationKind::LAYER; //!< not a field: the type name says it
    size_t normalized_ndim = 1;                        //!< trailing dims normalized together
    float eps = 1e-5f;       //!< added to the variance (mean square) before the root
    bool has_weight = false; //!< set by make() from the inputs given
    bool has_bias = false;   //!< set by make() from the inputs given
    static constexpr auto fields() {
        using P = NormalizationParam;
        return std::tuple{param_field("normalized_ndim", &P::normalized_ndim),
                          param_field("eps", &P::eps), param_field("has_weight", &P::has_weight),
                          param_field("has_bias", &P::has_bias)};
    }
};

//! Layer or RMS normalization over the trailing `normalized_ndim` dims of x:
//!   LAYER: y = (x - mean) / sqrt(var + eps) * weight + bias (var is the biased variance);
//!   RMS:   y = x / sqrt(mean(x^2) + eps) * weight + bias.
//! weight and bias are optional inputs with shape x.shape[-normalized_ndim:] and x's dtype.
class Normalization final : public ParamOperator<Normalization, NormalizationParam> {
public:
    using Kind = NormalizationKind;
    Normalization(VarNode* x, VarNode* weight, VarNode* bias, Param param,
                  const OperatorConfig& config);
    //! Inserts the operator; `weight` and `bias` may be invalid (absent) SymbolVars. Throws
    //! ShapeError when normalized_ndim exceeds x's rank or weight/bias have the wrong shape,
    //! DTypeError for non-float inputs or a weight/bias dtype other than x's.
    static SymbolVar make(SymbolVar x, SymbolVar weight, SymbolVar bias, Param param,
                          const OperatorConfig& config = {});

    const char* type_name() const override {
        return m_param.kind == Kind::LAYER ? "LayerNorm" : "RMSNorm";
    }
    //! The gradient rule (graph/grad.h), in operators/normalization_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    int inplace_input(size_t) const override { return 0; }
    void execute(ExecCtx& ctx) override;
};

//! Softmax along `axis`.
SymbolVar softmax(SymbolVar x, int axis = -1);
//! Log-softmax along `axis`.
SymbolVar log_softmax(SymbolVar x, int axis = -1);
//! Layer norm over the last `normalized_ndim` dims; weight and bias may be omitted ({}).
SymbolVar layer_norm(SymbolVar x, SymbolVar weight = {}, SymbolVar bias = {},
                     size_t normalized_ndim = 1, float eps = 1e-5f);
//! RMS norm over the last `normalized_ndim` dims; weight and bias may be omitted ({}).
SymbolVar rms_norm(SymbolVar x, SymbolVar weight = {}, SymbolVar bias = {},
                   size_t normalized_ndim = 1, float eps = 1e-6f);

} // namespace braid::opr
