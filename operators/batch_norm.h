// Batch normalization for inference: per-channel affine normalization with given statistics.
//
//     y = (x − mean[c]) / sqrt(var[c] + eps) · scale[c] + bias[c],   c = index along axis 1
//
// Shapes: x [N, C, ...] (rank >= 2); scale, bias, mean and var each [C] or [1, C, 1, ...] of
// x's rank; y has x's shape. Dtypes: x float32, float16 or bfloat16; each statistic x's dtype
// or float32; y x's dtype (computed in float32). Memory: y may overwrite x in place.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! The params of BatchNorm.
struct BatchNormParam {
    float eps = 1e-5f;
    static constexpr auto fields() { return std::tuple{param_field("eps", &BatchNormParam::eps)}; }
};

//! Inference-mode batch normalization over axis 1 (no statistics are computed or updated).
class BatchNorm final : public ParamOperator<BatchNorm, BatchNormParam> {
public:
    BatchNorm(const VarNodeArray& inputs, float eps, const OperatorConfig& config);
    //! Throws ValueError for a negative or non-finite eps, DTypeError for unsupported dtypes
    //! and ShapeError for an x of rank < 2 or statistics whose shape is not [C] or [1, C, 1..].
    static SymbolVar make(SymbolVar x, SymbolVar scale, SymbolVar bias, SymbolVar mean,
                          SymbolVar var, float eps = 1e-5f, const OperatorConfig& config = {});

    const char* type_name() const override { return "BatchNorm"; }
    //! The gradient rule (graph/grad.h), in operators/batch_norm_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    float eps() const { return m_param.eps; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    int inplace_input(size_t) const override { return 0; }
    void execute(ExecCtx& ctx) override;
};

//! Inference batch norm of x with per-channel scale, bias, running mean and variance.
SymbolVar batch_norm(SymbolVar x, SymbolVar scale, SymbolVar bias, SymbolVar mean, SymbolVar var,
                     float eps = 1e-5f);

} // namespace braid::opr
