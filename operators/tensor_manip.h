// Shape manipulation: Reshape (a view), GetVarShape (a shape as a value), Broadcast, TypeCvt,
// Dimshuffle (transpose / new axes) and AxisAddRemove (expand_dims / squeeze).
//
// Views: Reshape of a contiguous input, AxisAddRemove, and a Dimshuffle that keeps the input
// axes in order are read-only views of their input (no copy). A Dimshuffle that really
// permutes axes writes a contiguous copy (tiled, so both sides stay in cache): every consumer
// then reads packed memory instead of copying the strided view on its own.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

#include <optional>

namespace braid::opr {

//! The params of Reshape.
struct ReshapeParam {
    //! The target dims (one may be -1); unset when the target is the value of input 1.
    std::optional<std::vector<long>> target;
    static constexpr auto fields() {
        return std::tuple{param_field("target", &ReshapeParam::target)};
    }
};

//! Reshape to a target given as params (one dim may be -1) or as the value of an int32
//! shape var (input 1). Read-only view of the input when it is contiguous.
class Reshape final : public ParamOperator<Reshape, ReshapeParam> {
public:
    Reshape(VarNode* x, VarNode* shape_var, std::vector<long> target, const OperatorConfig& config);
    static SymbolVar make(SymbolVar x, const std::vector<long>& target,
                          const OperatorConfig& config = {});
    static SymbolVar make(SymbolVar x, SymbolVar shape_var, const OperatorConfig& config = {});

    const char* type_name() const override { return "Reshape"; }
    //! The gradient rule (graph/grad.h), in operators/tensor_manip_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool shape_needs_value(size_t i) const override { return i == 1; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    OutputMem output_mem(size_t) const override { return OutputMem::READONLY_FORWARD; }
    bool forward_keeps_layout(size_t) const override { return true; }
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;
    //! The target dims; empty when the target comes from input 1.
    const std::vector<long>& target() const;
};

//! The shape of its input as a 1-D int32 tensor; known statically whenever the shape is.
class GetVarShape final : public OperatorNode {
public:
    GetVarShape(VarNode* x, const OperatorConfig& config);
    static SymbolVar make(SymbolVar x, const OperatorConfig& config = {});

    const char* type_name() const override { return "GetVarShape"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    ValueInference value_inference() const override { return ValueInference::FROM_SHAPES; }
    void infer_value(const InferCtx& ctx, Tensor* out) const override;
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;
};

//! The params of Broadcast.
struct BroadcastParam {
    std::optional<TensorShape> target; //!< unset when the target is the value of input 1
    static constexpr auto fields() {
        return std::tuple{param_field("target", &BroadcastParam::target)};
    }
};

//! Numpy broadcast of the input to a target shape (params, or the value of input 1).
class Broadcast final : public ParamOperator<Broadcast, BroadcastParam> {
public:
    Broadcast(VarNode* x, VarNode* shape_var, const TensorShape& target,
              const OperatorConfig& config);
    static SymbolVar make(SymbolVar x, const TensorShape& target,
                          const OperatorConfig& config = {});
    static SymbolVar make(SymbolVar x, SymbolVar shape_var, const OperatorConfig& config = {});

    const char* type_name() const override { return "Broadcast"; }
    //! The gradient rule (graph/grad.h), in operators/tensor_manip_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool shape_needs_value(size_t i) const override { return i == 1; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;
    //! The static target (an empty shape when it comes from input 1).
    TensorShape target() const { return m_param.target.value_or(TensorShape{}); }
};

//! The params of TypeCvt.
struct TypeCvtParam {
    DType dtype = dtype::Float32();
    static constexpr auto fields() {
        return std::tuple{param_field("dtype", &TypeCvtParam::dtype)};
    }
};

//! Element type conversion (float16/bfloat16 round to nearest even; float to int truncates).
class TypeCvt final : public ParamOperator<TypeCvt, TypeCvtParam> {
public:
    TypeCvt(VarNode* x, DType dtype, const OperatorConfig& config);
    static SymbolVar make(SymbolVar x, DType dtype, const OperatorConfig& config = {});

    const char* type_name() const override { return "TypeCvt"; }
    //! The gradient rule (graph/grad.h), in operators/tensor_manip_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
    DType target_dtype() const { return m_param.dtype; }
};

//! The params of Dimshuffle.
struct DimshuffleParam {
    std::vector<int> pattern; //!< input axis of each output dim; -1 for a new unit axis
    static constexpr auto fields() {
        return std::tuple{param_field("pattern", &DimshuffleParam::pattern)};
    }
};

//! Permutes axes and inserts unit axes: output dim i is input dim pattern[i], or a new axis of
//! size 1 where pattern[i] is -1. Every input axis appears exactly once.
class Dimshuffle final : public ParamOperator<Dimshuffle, DimshuffleParam> {
public:
    Dimshuffle(VarNode* x, std::vector<int> pattern, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for a pattern that misses or repeats an axis.
    static SymbolVar make(SymbolVar x, std::vector<int> pattern, const OperatorConfig& config = {});

    const char* type_name() const override { return "Dimshuffle"; }
    //! The gradient rule (graph/grad.h), in operators/tensor_manip_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    const std::vector<int>& pattern() const { return m_param.pattern; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    //! A view when the input axes keep their order, else a contiguous copy.
    OutputMem output_mem(size_t) const override {
        return m_is_view ? OutputMem::READONLY_FORWARD : OutputMem::PLANNED;
    }
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;

private:
    //! The output layout as a view of `x`; throws ShapeError for a bad pattern.
    TensorLayout view_layout(const TensorLayout& x) const;
    bool m_is_view;
};

//! Insert unit axes or remove them.
enum class AxisAddRemoveKind : uint8_t { ADD, REMOVE };
//! "ADD" or "REMOVE".
const char* axis_add_remove_kind_name(AxisAddRemoveKind kind);

//! The params of AxisAddRemove.
struct AxisAddRemoveParam {
    AxisAddRemoveKind kind = AxisAddRemoveKind::ADD;
    std::vector<int> axes;
    static constexpr auto fields() {
        using P = AxisAddRemoveParam;
        return std::tuple{param_field("kind", &P::kind, axis_add_remove_kind_name),
                          param_field("axes", &P::axes)};
    }
};

//! Inserts unit axes (ADD: `axes` index the output) or removes axes of size 1 (REMOVE;
//! `axes` index the input, empty removes every unit axis). Always a view of the input.
class AxisAddRemove final : public ParamOperator<AxisAddRemove, AxisAddRemoveParam> {
public:
    using Kind = AxisAddRemoveKind;
    AxisAddRemove(VarNode* x, Kind kind, std::vector<int> axes, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for a bad axis or removing a dim that is not 1.
    static SymbolVar make(SymbolVar x, Kind kind, std::vector<int> axes,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "AxisAddRemove"; }
    //! The gradient rule (graph/grad.h), in operators/tensor_manip_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    Kind kind() const { return m_param.kind; }
    const std::vector<int>& axes() const { return m_param.axes; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    OutputMem output_mem(size_t) const override { return OutputMem::READONLY_FORWARD; }
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;

private:
    TensorLayout view_layout(const TensorLayout& x) const;
};

//! Dimshuffle: output dim i is input dim pattern[i], -1 inserts a unit axis.
SymbolVar dimshuffle(SymbolVar x, std::vector<int> pattern);
//! Permutes axes by `perm` (negative axes count from the end; empty reverses the axes).
SymbolVar transpose(SymbolVar x, std::vector<int> perm = {});
//! Inserts unit axes at `axes` of the output (negative counts from the output's end).
SymbolVar expand_dims(SymbolVar x, std::vector<int> axes);
//! Removes the unit axes `axes` (empty: every unit axis).
SymbolVar squeeze(SymbolVar x, std::vector<int> axes = {});

//! Reads a 1-D int32/int64 shape tensor; throws ShapeError naming `who` for bad values.
std::vector<long> shape_value_to_dims(const Tensor& value, const std::string& who);

} // namespace braid::opr
