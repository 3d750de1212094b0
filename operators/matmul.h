// Matrix multiplication through OpenBLAS: MatMul (2-D) and BatchedMatMul (N-D with numpy
// broadcasting of the batch dims).
//
// Dtypes: both inputs share one float dtype; float32 runs natively, float16 and bfloat16 are
// computed in float32 and rounded once on store. Memory: the output is planned memory and
// never aliases an input (a GEMM reads its inputs while writing). Threading: see
// operators/dense_kernels.h (OpenBLAS single-threaded, braid's pool splits the work).
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! Transpose flags of MatMul and BatchedMatMul (they apply to the last two dims).
struct MatMulParam {
    bool transpose_a = false;
    bool transpose_b = false;
};

//! y[m, n] = op(a) · op(b) for 2-D a and b, where op transposes when the flag is set.
class MatMul final : public OperatorNode {
public:
    using Param = MatMulParam;
    MatMul(VarNode* a, VarNode* b, Param param, const OperatorConfig& config);
    //! Throws DTypeError unless a and b share a float dtype, ShapeError unless both are 2-D
    //! with matching inner dims.
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

/*!
 * Batched matrix product [..., m, k] × [..., k, n] → [..., m, n] (before the transposes, which
 * swap the last two dims of their input). The batch dims (all but the last two) broadcast with
 * numpy rules, so a [b, m, k] × [k, n] product reuses one right-hand matrix for every batch
 * item. Both inputs need at least 2 dims.
 */
class BatchedMatMul final : public OperatorNode {
public:
    using Param = MatMulParam;
    BatchedMatMul(VarNode* a, VarNode* b, Param param, const OperatorConfig& config);
    //! Throws DTypeError unless a and b share a float dtype, ShapeError for inputs of rank < 2,
    //! mismatched inner dims or batch dims that do not broadcast.
    static SymbolVar make(SymbolVar a, SymbolVar b, Param param = {},
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "BatchedMatMul"; }
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

//! matmul(a, b) of 2-D vars with optional transposes.
SymbolVar matmul(SymbolVar a, SymbolVar b, bool transpose_a = false, bool transpose_b = false);
//! Batched matmul of vars of rank >= 2 with broadcast batch dims and optional transposes.
SymbolVar batched_matmul(SymbolVar a, SymbolVar b, bool transpose_a = false,
                         bool transpose_b = false);

} // namespace braid::opr
