// Matrix multiplication through OpenBLAS: MatMul (2-D) and BatchedMatMul (N-D with numpy
// broadcasting of the batch dims).
//
// Dtypes: both inputs share one float dtype; float32 runs natively, float16 and bfloat16 are
// computed in float32 and rounded once on store, float64 runs in double (cblas_dgemm). Memory: the
// output is planned memory and never aliases an input (a GEMM reads its inputs while writing).
// Threading: see operators/dense_kernels.h (OpenBLAS single-threaded, braid's pool splits the
// work).
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! Transpose flags of MatMul and BatchedMatMul (they apply to the last two dims).
struct MatMulParam {
    bool transpose_a = false;
    bool transpose_b = false;
    static constexpr auto fields() {
        return std::tuple{param_field("transpose_a", &MatMulParam::transpose_a),
                          param_field("transpose_b", &MatMulParam::transpose_b)};
    }
};

//! y[m, n] = op(a) · op(b) for 2-D a and b, where op transposes when the flag is set.
class MatMul final : public ParamOperator<MatMul, MatMulParam> {
public:
    MatMul(VarNode* a, VarNode* b, Param param, const OperatorConfig& config);
    //! Throws DTypeError unless a and b share a float dtype, ShapeError unless both are 2-D
    //! with matching inner dims.
    static SymbolVar make(SymbolVar a, SymbolVar b, Param param = {},
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "MatMul"; }
    //! The gradient rule (graph/grad.h), in operators/matmul_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

/*!
 * Batched matrix product [..., m, k] × [..., k, n] → [..., m, n] (before the transposes, which
 * swap the last two dims of their input). The batch dims (all but the last two) broadcast with
 * numpy rules, so a [b, m, k] × [k, n] product reuses one right-hand matrix for every batch
 * item. Both inputs need at least 2 dims.
 */
class BatchedMatMul final : public ParamOperator<BatchedMatMul, MatMulParam> {
public:
    BatchedMatMul(VarNode* a, VarNode* b, Param param, const OperatorConfig& config);
    //! Throws DTypeError unless a and b share a float dtype, ShapeError for inputs of rank < 2,
    //! mismatched inner dims or batch dims that do not broadcast.
    static SymbolVar make(SymbolVar a, SymbolVar b, Param param = {},
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "BatchedMatMul"; }
    //! The gradient rule (graph/grad.h), in operators/matmul_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;

private:
    //! execute() for float64 inputs: dgemm per batch item.
    void execute_f64(ExecCtx& ctx);
};

//! matmul(a, b) of 2-D vars with optional transposes.
SymbolVar matmul(SymbolVar a, SymbolVar b, bool transpose_a = false, bool transpose_b = false);
//! Batched matmul of vars of rank >= 2 with broadcast batch dims and optional transposes.
SymbolVar batched_matmul(SymbolVar a, SymbolVar b, bool transpose_a = false,
                         bool transpose_b = false);

} // namespace braid::opr
