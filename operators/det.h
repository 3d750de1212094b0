// Det: the determinant of each square matrix in the last two dims (ONNX Det, numpy.linalg.det).
//
// x [..., M, M] -> y [...]: LU factorisation with partial pivoting, computed in double for
// every dtype and rounded once to x's dtype (float32, float64, float16, bfloat16). A singular
// matrix gives 0 (or a tiny value, as rounding leaves it), M = 0 gives 1. No params. No
// gradient rule yet (differentiating through it is a GraphError naming the operator). CPU
// only: on a CUDA comp node compiling fails, naming the operator ("no CUDA kernel").
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! The determinants of the square matrices in x's last two dims.
class Det final : public OperatorNode {
public:
    Det(VarNode* x, const OperatorConfig& config);
    //! Inserts the operator; throws DTypeError for a dtype other than float32, float64, float16
    //! or bfloat16, ShapeError (at shape inference) for a rank below 2 or a non-square matrix.
    static SymbolVar make(SymbolVar x, const OperatorConfig& config = {});

    const char* type_name() const override { return "Det"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! det(x) over the last two dims.
SymbolVar det(SymbolVar x);

} // namespace braid::opr
