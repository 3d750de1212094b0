// Tensor generators: Fill (a constant of a static shape or of the shape held by an int32
// shape var, e.g. another var's symshape()) and Arange (start, start + step, ... < stop).
//
// Both fold to constants at build time when their shape is static and small. Fill of a shape
// var needs the var's value for its shape, so its output shape is static exactly when that
// value is. The value converts to the dtype with the usual rules (float16/bfloat16 round to
// nearest even, integers truncate toward zero).
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! The params of Fill.
struct FillParam {
    double value = 0;
    DType dtype = dtype::Float32();
    std::optional<TensorShape> shape; //!< unset when the shape is the value of input 0
    static constexpr auto fields() {
        return std::tuple{param_field("value", &FillParam::value),
                          param_field("dtype", &FillParam::dtype),
                          param_field("shape", &FillParam::shape)};
    }
};

//! A tensor filled with one value: of a static shape (no input), or of the shape held by
//! input 0 (a 1-D integer shape var).
class Fill final : public ParamOperator<Fill, FillParam> {
public:
    Fill(VarNode* shape_var, const TensorShape& shape, double value, DType dtype,
         const OperatorConfig& config);
    //! A fill of a static shape on `config`'s comp node (default: the graph's).
    static SymbolVar make(ComputingGraph& graph, const TensorShape& shape, double value,
                          DType dtype, const OperatorConfig& config = {});
    //! A fill of the shape held by `shape_var`; throws DTypeError for a non-integer shape var.
    static SymbolVar make(SymbolVar shape_var, double value, DType dtype,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "Fill"; }
    //! The static shape (empty when the shape comes from the shape var input).
    TensorShape shape() const { return m_param.shape.value_or(TensorShape{}); }
    double value() const { return m_param.value; }
    DType dtype() const { return m_param.dtype; }
    void init_output_dtypes() override;
    bool shape_needs_value(size_t i) const override { return i == 0; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;
};

//! The params of Arange.
struct ArangeParam {
    double start = 0, stop = 0, step = 1;
    DType dtype = dtype::Float32();
    static constexpr auto fields() {
        return std::tuple{
            param_field("start", &ArangeParam::start), param_field("stop", &ArangeParam::stop),
            param_field("step", &ArangeParam::step), param_field("dtype", &ArangeParam::dtype)};
    }
};

//! The 1-D sequence start, start + step, ... (values < stop for step > 0, > stop for step
//! < 0), computed in double and stored in `dtype` (float or integer).
class Arange final : public ParamOperator<Arange, ArangeParam> {
public:
    Arange(double start, double stop, double step, DType dtype, const OperatorConfig& config);
    //! Inserts the operator; throws ValueError for a zero or non-finite step or bounds,
    //! DTypeError for a bool dtype, ShapeError for more than 2^48 elements.
    static SymbolVar make(ComputingGraph& graph, double start, double stop, double step = 1,
                          DType dtype = dtype::Float32(), const OperatorConfig& config = {});

    const char* type_name() const override { return "Arange"; }
    double start() const { return m_param.start; }
    double stop() const { return m_param.stop; }
    double step() const { return m_param.step; }
    DType dtype() const { return m_param.dtype; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! A tensor of `shape` filled with `value`.
SymbolVar fill(ComputingGraph& graph, const TensorShape& shape, double value,
               DType dtype = dtype::Float32());
//! Zeros of `shape`.
SymbolVar zeros(ComputingGraph& graph, const TensorShape& shape, DType dtype = dtype::Float32());
//! Ones of `shape`.
SymbolVar ones(ComputingGraph& graph, const TensorShape& shape, DType dtype = dtype::Float32());
//! `value` in x's shape and dtype (follows x's shape when it changes).
SymbolVar full_like(SymbolVar x, double value);
//! Zeros in x's shape and dtype.
SymbolVar zeros_like(SymbolVar x);
//! Ones in x's shape and dtype.
SymbolVar ones_like(SymbolVar x);
//! start, start + step, ... before stop.
SymbolVar arange(ComputingGraph& graph, double start, double stop, double step = 1,
                 DType dtype = dtype::Float32());

} // namespace braid::opr
