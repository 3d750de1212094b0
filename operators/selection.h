// Operators whose output size depends on their input values: NonZero, NonMaxSuppression, Unique.
//
// Their outputs have static shapes only when the inputs' values are known before the graph runs
// (constants, folded); otherwise the outputs are dynamic vars, allocated when the operator runs,
// and what depends on them is inferred then (graph/executable.cpp).
//
// NonZero: x (any dtype) -> int64 [rank, n], the coordinates of x's n nonzero elements in
// row-major order (ONNX NonZero, numpy.nonzero stacked); a scalar gives [0, n].
//
// NonMaxSuppression (ONNX NonMaxSuppression): boxes [B, N, 4] and scores [B, C, N] (float32),
// and optionally max_output_boxes_per_class (int64, one element; 0 or absent: none),
// iou_threshold and score_threshold (float32, one element) -> int64 [n, 3] of (batch, class,
// box) rows. Per batch and class, the boxes whose score is above score_threshold are taken in
// order of decreasing score (ties: the lower box index first), each kept when its IoU with every
// box kept before is at most iou_threshold, up to max_output_boxes_per_class boxes. A box is
// [y1, x1, y2, x2] with either diagonal pair of corners, or with `center_point_box`
// [x_center, y_center, width, height]. Its output is bound when it runs (the count is known only
// then).
//
// Unique (ONNX Unique, numpy.unique): x -> y, indices, inverse_indices, counts. Without an axis
// the elements of flattened x, with one the slices of x along it; y holds each distinct one once,
// in ascending (lexicographic) order with `sorted`, else in order of first occurrence; indices
// (int64) where each first occurs, inverse_indices (int64) which of y each element or slice of x
// is, counts (int64) how often each occurs. Its outputs are bound when it runs.
//
// None of them has a gradient (their outputs are indices). CPU only: on a CUDA comp node compiling
// fails, naming the operator ("no CUDA kernel").
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

#include <optional>

namespace braid::opr {

//! The coordinates of the nonzero elements of x.
class NonZero final : public OperatorNode {
public:
    NonZero(VarNode* x, const OperatorConfig& config);
    static SymbolVar make(SymbolVar x, const OperatorConfig& config = {});

    const char* type_name() const override { return "NonZero"; }
    void init_output_dtypes() override;
    bool shape_needs_value(size_t) const override { return true; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! The params of NonMaxSuppression.
struct NonMaxSuppressionParam {
    bool center_point_box = false; //!< boxes are [x_center, y_center, width, height]
    static constexpr auto fields() {
        return std::tuple{
            param_field("center_point_box", &NonMaxSuppressionParam::center_point_box)};
    }
};

//! Greedy non-maximum suppression per batch and class.
class NonMaxSuppression final : public ParamOperator<NonMaxSuppression, NonMaxSuppressionParam> {
public:
    //! `inputs`: boxes, scores, then optionally max_output_boxes_per_class, iou_threshold and
    //! score_threshold (in that order; a later one needs the earlier ones).
    NonMaxSuppression(const VarNodeArray& inputs, Param param, const OperatorConfig& config);
    //! Inserts the operator; throws GraphError for fewer than 2 or more than 5 inputs,
    //! DTypeError for inputs of other dtypes than the above, ShapeError (at shape inference) for
    //! boxes and scores that do not fit.
    static SymbolVar make(const SymbolVarArray& inputs, Param param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "NonMaxSuppression"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    ValueInference value_inference() const override { return ValueInference::NONE; }
    OutputMem output_mem(size_t) const override { return OutputMem::BOUND; }
    void execute(ExecCtx& ctx) override;
};

//! The params of Unique.
struct UniqueParam {
    std::optional<int> axis; //!< unset: the elements of flattened x
    bool sorted = true;      //!< ascending order, else order of first occurrence
    static constexpr auto fields() {
        return std::tuple{param_field("axis", &UniqueParam::axis),
                          param_field("sorted", &UniqueParam::sorted)};
    }
};

//! The distinct elements (or slices along an axis) of x.
class Unique final : public ParamOperator<Unique, UniqueParam> {
public:
    Unique(VarNode* x, Param param, const OperatorConfig& config);
    //! Inserts the operator: outputs y, indices, inverse_indices, counts. Throws ShapeError
    //! (at shape inference) for an axis out of range.
    static SymbolVarArray make(SymbolVar x, Param param, const OperatorConfig& config = {});

    const char* type_name() const override { return "Unique"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    ValueInference value_inference() const override { return ValueInference::NONE; }
    OutputMem output_mem(size_t) const override { return OutputMem::BOUND; }
    void execute(ExecCtx& ctx) override;
};

} // namespace braid::opr
