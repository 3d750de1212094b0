// Matrix multiplication of 2-D float32 tensors through OpenBLAS (cblas_sgemm).
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! Transpose flags of MatMul.
struct MatMulParam {
    bool transpose_a = false;
    bool transpose_b = false;
};

//! y = op(a) · op(b) where op transposes when the flag is set. Float32; float16 and bfloat16
//! are computed in float32.
class MatMul final : public OperatorNode {
public:
    using Param = MatMulParam;
    MatMul(VarNode* a, VarNode* b, Param param, const OperatorConfig& config);
    static SymbolVar make(SymbolVar a, SymbolVar b, Param param = {},
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "MatMul"; }
    const Param& param() const { return m_param; }
    void hash_params(Hasher& h) const override;
    bool params_equal(const OperatorNode& rhs) const override;
    std::string param_string() const override;
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;

private:
    Param m_param;
};

//! matmul(a, b) with optional transposes.
SymbolVar matmul(SymbolVar a, SymbolVar b, bool transpose_a = false, bool transpose_b = false);

} // namespace braid::opr

// ---- serialization: params dump and load (serialization/params.h), one pair per type,
// registered in register_all_operators().
namespace braid {
class ParamWriter;
struct OprLoadContext;
} // namespace braid

namespace braid::opr {
//! Writes MatMul's params into a model.
void dump_matmul(const OperatorNode& opr, ParamWriter& w);
//! Rebuilds a MatMul from a model.
SymbolVarArray load_matmul(const OprLoadContext& ctx);
} // namespace braid::opr
