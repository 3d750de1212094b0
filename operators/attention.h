// Scaled dot-product attention with its log-sum-exp, the pair ring (context-parallel)
// attention merges across key blocks.
//
//     s[i, j]  = scale · q[i] · k[j]               (j visible to i)
//     lse[i]   = log Σ_j exp(s[i, j])              (natural log)
//     out[i]   = Σ_j exp(s[i, j] − lse[i]) · v[j]
//
// Shapes: q [B, H, Sq, D], k [B, H, Sk, D], v [B, H, Sk, Dv] → out [B, H, Sq, Dv] and
// lse [B, H, Sq]. Without causal masking every key is visible. With it, the last query aligns
// with the last key: query i sees key j iff j <= i + Sk − Sq. When Sq > Sk the first Sq − Sk
// queries see no key at all; such fully masked rows give out = 0 and lse = −inf, which is what
// merging blocks expects (a block with lse = −inf has zero weight).
//
// Merging two key blocks a and b of the same queries (their union is all keys):
//     lse = log(exp(lse_a) + exp(lse_b)),  out = exp(lse_a − lse) · out_a + exp(lse_b − lse) ·
//     out_b
//
// Dtypes: q, k, v share a float dtype; float16 and bfloat16 are computed in float32. out has
// q's dtype, lse is always float32. Kernel: blocks of queries run in parallel on the pool; per
// block, keys are visited in blocks with an online (running max) softmax: sgemm for the scores,
// a vectorised exp, sgemm with v. Memory: both outputs planned, never in place.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

#include <map>
#include <optional>

namespace braid::opr {

//! Masking and scaling of Attention.
struct AttentionParam {
    bool causal = false;
    //! Multiplies the scores; unset means 1 / sqrt(D). Must be finite.
    std::optional<float> scale;
    static constexpr auto fields() {
        return std::tuple{param_field("causal", &AttentionParam::causal),
                          param_field("scale", &AttentionParam::scale)};
    }
};

//! Scaled dot-product attention; outputs (out, lse). See the file comment for the maths.
class Attention final : public ParamOperator<Attention, AttentionParam> {
public:
    Attention(VarNode* q, VarNode* k, VarNode* v, Param param, const OperatorConfig& config);
    //! Returns {out, lse}. Throws ValueError for a non-finite scale, DTypeError unless q, k and
    //! v share a float dtype, and ShapeError (naming the shapes) for inputs that are not 4-D or
    //! disagree on batch, heads, head dim (q, k) or key count (k, v).
    static SymbolVarArray make(SymbolVar q, SymbolVar k, SymbolVar v, Param param = {},
                               const OperatorConfig& config = {});

    const char* type_name() const override { return "Attention"; }
    //! The gradient rule (graph/grad.h), in operators/attention_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
    //! {dq, dk, dv} from the gradients of out and lse (either may be invalid), on a CPU comp
    //! node: one AttentionGrad per pair, shared by the gradient rule's calls for q, k and v.
    SymbolVarArray backward(SymbolVar gout, SymbolVar glse);

private:
    std::map<std::pair<VarNode*, VarNode*>, SymbolVarArray> m_backward;
};

/*!
 * The gradients of Attention on CPU in one operator: inputs q, k, v, out, lse, dout [, dlse],
 * outputs {dq, dk, dv} in q's dtype. The probabilities are recomputed tile by tile from q, k
 * and the forward's lse (operators/attention_kernels.h), so nothing of size Sq × Sk is stored.
 * No CUDA kernel: on CUDA comp nodes the gradient rule builds the same maths from primitives.
 */
class AttentionGrad final : public ParamOperator<AttentionGrad, AttentionParam> {
public:
    AttentionGrad(const VarNodeArray& inputs, Param param, const OperatorConfig& config);
    static SymbolVarArray make(const SymbolVarArray& inputs, Param param,
                               const OperatorConfig& config = {});

    const char* type_name() const override { return "AttentionGrad"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! {out, lse} = attention(q, k, v) with optional causal mask and scale (default 1/sqrt(D)).
SymbolVarArray scaled_dot_product_attention(SymbolVar q, SymbolVar k, SymbolVar v,
                                            bool causal = false,
                                            std::optional<float> scale = std::nullopt);

} // namespace braid::opr
