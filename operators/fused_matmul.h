// FusedMatMul: a matrix product with its bias and activation applied while each tile of the
// result is still in cache, and the compile-time pass (graph/graph_pass.h) that forms it from
// MatMul/BatchedMatMul -> Elemwise(ADD) bias -> Elemwise activation chains.
//
// The pass rewrites only what one executable runs: the graph keeps its MatMul, Elemwise and
// their gradient rules, so training graphs build exactly as before. A chain is fused only where
// nothing else in the executable reads its intermediate results (a gradient that reads the
// product, say, keeps the chain unfused), on CPU comp nodes, in float32.
//
// Shapes: a [..., m, k] (or [k, m] with transpose_a, 2-D only), b [k, n] (or [n, k] with
// transpose_b), bias [n] or [1, .., 1, n] -> y [..., m, n]; a's leading dims fold into the rows
// of one GEMM. The epilogue computes the bias and activation with Elemwise's own kernels, so a
// fused result equals the unfused one.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"
#include "operators/elemwise.h"

namespace braid::opr {

//! Params of FusedMatMul.
struct FusedMatMulParam {
    bool transpose_a = false;
    bool transpose_b = false;
    bool has_bias = false;                //!< input 2 is a bias added along the last dim
    bool has_activation = false;          //!< `activation` is applied after the bias
    ElemMode activation = ElemMode::RELU; //!< RELU, SIGMOID, TANH, GELU or GELU_TANH
    static constexpr auto fields() {
        using P = FusedMatMulParam;
        return std::tuple{param_field("transpose_a", &P::transpose_a),
                          param_field("transpose_b", &P::transpose_b),
                          param_field("has_bias", &P::has_bias),
                          param_field("has_activation", &P::has_activation),
                          param_field("activation", &P::activation, elem_mode_name)};
    }
};

//! y = act(op(a) · op(b) + bias) in one kernel (float32, CPU). No gradient rule: it exists only
//! in compiled executables, where no gradient is taken through it.
class FusedMatMul final : public ParamOperator<FusedMatMul, FusedMatMulParam> {
public:
    FusedMatMul(const VarNodeArray& inputs, Param param, const OperatorConfig& config);
    //! Throws DTypeError unless every input is float32, ShapeError for shapes that do not fit
    //! the file comment, ValueError for an activation that is not one of the five.
    static SymbolVar make(SymbolVar a, SymbolVar b, SymbolVar bias, Param param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "FusedMatMul"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

} // namespace braid::opr
