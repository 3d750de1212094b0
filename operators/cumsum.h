// CumSum: the running sum along one axis (ONNX CumSum, numpy.cumsum).
//
// y[..., i, ...] = x[..., 0, ...] + ... + x[..., i, ...] along `axis`; `exclusive` leaves out
// x[i] itself (y[0] = 0), `reverse` sums from the end instead. Dtypes: float32, float64, float16,
// bfloat16 (summed in float32 and rounded once), int32 and int64 (summed exactly, wrapping like
// the integer type). The output has the input's shape and dtype. Gradient: the CumSum of the
// output gradient in the other direction. CPU only: on a CUDA comp node compiling fails,
// naming the operator ("no CUDA kernel").
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! The params of CumSum.
struct CumSumParam {
    int axis = 0;           //!< negative counts from the end
    bool exclusive = false; //!< leave each element itself out of its sum
    bool reverse = false;   //!< sum from the last element towards the first
    static constexpr auto fields() {
        return std::tuple{param_field("axis", &CumSumParam::axis),
                          param_field("exclusive", &CumSumParam::exclusive),
                          param_field("reverse", &CumSumParam::reverse)};
    }
};

//! Running sums of x along one axis.
class CumSum final : public ParamOperator<CumSum, CumSumParam> {
public:
    CumSum(VarNode* x, Param param, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for an axis out of range, DTypeError for a
    //! dtype other than float32, float64, float16, bfloat16, int32 or int64.
    static SymbolVar make(SymbolVar x, Param param, const OperatorConfig& config = {});

    const char* type_name() const override { return "CumSum"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! Inclusive running sums of x along `axis` (numpy.cumsum).
SymbolVar cumsum(SymbolVar x, int axis);

} // namespace braid::opr
