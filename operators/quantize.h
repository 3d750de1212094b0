// DynamicQuantizeLinear: uint8 quantization of a float32 tensor with a scale and zero point
// taken from its own range (ONNX DynamicQuantizeLinear), as dynamically quantized models
// requantize every activation before an integer convolution or product.
//
// x (float32, any shape) -> y (uint8, x's shape), scale (float32, []), zero point (uint8, []):
//   lo = min(min(x), 0), hi = max(max(x), 0)
//   scale = (hi == lo ? 1 : hi - lo) / 255            (ONNX's reference; ONNX Runtime gives 1)
//   zero point = saturate(round(-lo / scale))
//   y = saturate(round(x / scale) + zero point)
// in float32 operations one by one (a division, not a product with 1/scale), rounding half to
// even and saturating to [0, 255]. A NaN in x makes lo, hi and scale NaN, and y and the zero
// point 0 (a NaN converts to integer 0, docs/dtypes). Two passes over x (its range, then y),
// each split over the pool's threads; no gradient. CPU only: the ONNX importer composes the
// same arithmetic of elementwise operators and reductions for other devices.
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! {y, scale, zero point}; see the file comment.
class DynamicQuantizeLinear final : public OperatorNode {
public:
    DynamicQuantizeLinear(VarNode* x, const OperatorConfig& config);
    //! Inserts the operator; throws DTypeError unless x is float32.
    static SymbolVarArray make(SymbolVar x, const OperatorConfig& config = {});

    const char* type_name() const override { return "DynamicQuantizeLinear"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

} // namespace braid::opr
