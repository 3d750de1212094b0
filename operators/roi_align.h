// RoiAlign: a fixed-size feature map per region of interest, each bin the average (or maximum)
// of bilinearly sampled points (ONNX RoiAlign, Mask R-CNN).
//
// x [N, C, H, W] (float32, float64, float16, bfloat16), rois [R, 4] (x1, y1, x2, y2 in input
// coordinates, scaled by spatial_scale; x's float dtype) and batch_indices [R] (int64 or int32:
// the image of each roi) -> [R, C, output_height, output_width] in x's dtype. Each output bin
// samples a grid of sampling_ratio x sampling_ratio points (0: ceil(roi size / output size) per
// side); a point more than one pixel outside the image counts as 0. With `half_pixel` the roi's
// corners move by -0.5 pixel (ONNX's default coordinate mode since opset 16), without it rois
// are at least one pixel wide (the earlier "output_half_pixel" mode). MAX takes, per point, the
// largest of the four weighted neighbours, and the largest of those per bin, as ONNX Runtime and
// ONNX's reference do. Computed in float32 (float64 in double). No gradient rule yet. CPU only.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"
#include "operators/pooling.h"

namespace braid::opr {

//! The params of RoiAlign.
struct RoiAlignParam {
    PoolMode mode = PoolMode::AVERAGE;
    int output_height = 1, output_width = 1;
    int sampling_ratio = 0; //!< points per bin side; 0: adaptive
    float spatial_scale = 1.f;
    bool half_pixel = true;
    static constexpr auto fields() {
        using P = RoiAlignParam;
        return std::tuple{param_field("mode", &P::mode, pool_mode_name),
                          param_field("output_height", &P::output_height),
                          param_field("output_width", &P::output_width),
                          param_field("sampling_ratio", &P::sampling_ratio),
                          param_field("spatial_scale", &P::spatial_scale),
                          param_field("half_pixel", &P::half_pixel)};
    }
};

//! Features of each region of interest, pooled to a fixed size.
class RoiAlign final : public ParamOperator<RoiAlign, RoiAlignParam> {
public:
    RoiAlign(VarNode* x, VarNode* rois, VarNode* batch_indices, Param param,
             const OperatorConfig& config);
    //! Inserts the operator; throws ValueError for output sizes below 1 or a negative sampling
    //! ratio, DTypeError and ShapeError (at shape inference) for inputs that do not fit.
    static SymbolVar make(SymbolVar x, SymbolVar rois, SymbolVar batch_indices, Param param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "RoiAlign"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

} // namespace braid::opr
