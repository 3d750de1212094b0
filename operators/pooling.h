// 2-D max and average pooling of NCHW inputs with window, stride and zero padding.
//
// Shapes: x [N, C, H, W] → y [N, C, OH, OW] with OH = (H + 2·pad_h − window_h) / stride_h + 1
// (floor), OW likewise; H and W must be non-zero. Padding must be smaller than the window, so
// every window holds at least one input element. Max pooling ignores padded positions and
// propagates NaN; average pooling divides by window_h·window_w when count_include_pad is set
// (padded positions count as zeros), else by the number of input elements the window covers.
// Dtypes: float32; float16 and bfloat16 computed in float32. Memory: planned output.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! What a pooling window computes.
enum class PoolMode : uint8_t {
    MAX,     //!< the largest element
    AVERAGE, //!< the mean (see count_include_pad)
};

//! Name of a mode, e.g. "MAX".
const char* pool_mode_name(PoolMode mode);

//! Geometry of Pooling: windows and strides >= 1, paddings in [0, window).
struct PoolingParam {
    PoolMode mode = PoolMode::MAX;
    int window_h = 2, window_w = 2;
    int stride_h = 2, stride_w = 2;
    int pad_h = 0, pad_w = 0;
    //! AVERAGE only: divide by the full window size (true) or by the in-bounds count (false).
    bool count_include_pad = true;

    bool operator==(const PoolingParam&) const = default;
    static constexpr auto fields() {
        using P = PoolingParam;
        return std::tuple{param_field("mode", &P::mode, pool_mode_name),
                          param_field("window_h", &P::window_h),
                          param_field("window_w", &P::window_w),
                          param_field("stride_h", &P::stride_h),
                          param_field("stride_w", &P::stride_w),
                          param_field("pad_h", &P::pad_h),
                          param_field("pad_w", &P::pad_w),
                          param_field("count_include_pad", &P::count_include_pad)};
    }
};

//! Max or average pooling over the spatial dims of an NCHW tensor.
class Pooling final : public ParamOperator<Pooling, PoolingParam> {
public:
    Pooling(VarNode* x, Param param, const OperatorConfig& config);
    //! Throws ValueError for bad params, DTypeError for non-float inputs and ShapeError for an
    //! input that is not 4-D or smaller than the window after padding.
    static SymbolVar make(SymbolVar x, Param param, const OperatorConfig& config = {});

    const char* type_name() const override { return "Pooling"; }
    //! The gradient rule (graph/grad.h), in operators/pooling_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! Max pooling with a square window and stride = window.
SymbolVar max_pool2d(SymbolVar x, int window);
//! Max pooling with a square window, stride and padding.
SymbolVar max_pool2d(SymbolVar x, int window, int stride, int padding = 0);
//! Average pooling with a square window and stride = window.
SymbolVar avg_pool2d(SymbolVar x, int window);
//! Average pooling with a square window, stride and padding.
SymbolVar avg_pool2d(SymbolVar x, int window, int stride, int padding = 0,
                     bool count_include_pad = true);

} // namespace braid::opr
