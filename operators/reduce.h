// Reductions: Reduce (sum, mean, max, min, prod, sum of squares over a set of axes, with
// keepdims) and ArgReduce (argmax / argmin along one axis, int32 indices).
//
// Accumulation: float32/float16/bfloat16 accumulate in float32 within blocks of at most a few
// hundred elements and combine the blocks in double, so a sum of n elements errs by O(eps)
// rather than O(n eps); PROD accumulates in double. float64 accumulates in double throughout
// (never in float32). int32 and int64 accumulate in int64 (SUM, PROD,
// SUM_SQR and MEAN wrap on overflow; MEAN divides truncating toward zero). MAX and MIN
// propagate NaN. float16/bfloat16 are computed in float32 and rounded on store.
// Kernels: one reduced run of axes is a contiguous (outer, n, inner) reduction, over the last
// axis (inner = 1) or a middle one; several separate runs are first gathered into one.
// Large inputs are split across the shared kernel pool, along n when outer * inner is small.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! What Reduce computes over the reduced elements.
enum class ReduceMode : uint8_t {
    SUM,     //!< sum (0 over no elements)
    MEAN,    //!< sum / count (NaN over no elements for floats, 0 for integers)
    MAX,     //!< largest (an empty reduced axis is a ShapeError)
    MIN,     //!< smallest (an empty reduced axis is a ShapeError)
    PROD,    //!< product (1 over no elements)
    SUM_SQR, //!< sum of squares
};

//! Name of a mode, e.g. "SUM".
const char* reduce_mode_name(ReduceMode mode);

//! The params of Reduce.
struct ReduceParam {
    ReduceMode mode = ReduceMode::SUM; //!< the reduction
    std::vector<int> axes;             //!< empty: all axes
    bool keepdims = false;             //!< keep reduced axes as size 1
    static constexpr auto fields() {
        return std::tuple{param_field("mode", &ReduceParam::mode, reduce_mode_name),
                          param_field("axes", &ReduceParam::axes),
                          param_field("keepdims", &ReduceParam::keepdims)};
    }
};

//! Reduces `axes` (negative counts from the end; empty = every axis). Without keepdims the
//! reduced axes disappear (reducing every axis gives a scalar); with keepdims they become 1.
class Reduce final : public ParamOperator<Reduce, ReduceParam> {
public:
    Reduce(VarNode* x, Param param, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for an axis out of range or given twice.
    static SymbolVar make(SymbolVar x, Param param, const OperatorConfig& config = {});

    const char* type_name() const override { return "Reduce"; }
    //! The gradient rule (graph/grad.h), in operators/reduce_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;

private:
    //! The sorted, non-negative axes for an input of rank `ndim`; throws for bad axes.
    std::vector<size_t> normalized_axes(size_t ndim) const;
};

//! Sum over `axes` (empty: all).
SymbolVar reduce_sum(SymbolVar x, std::vector<int> axes = {}, bool keepdims = false);
//! Mean over `axes` (empty: all).
SymbolVar reduce_mean(SymbolVar x, std::vector<int> axes = {}, bool keepdims = false);
//! Maximum over `axes` (empty: all).
SymbolVar reduce_max(SymbolVar x, std::vector<int> axes = {}, bool keepdims = false);
//! Minimum over `axes` (empty: all).
SymbolVar reduce_min(SymbolVar x, std::vector<int> axes = {}, bool keepdims = false);
//! Product over `axes` (empty: all).
SymbolVar reduce_prod(SymbolVar x, std::vector<int> axes = {}, bool keepdims = false);
//! Sum of squares over `axes` (empty: all).
SymbolVar reduce_sum_sqr(SymbolVar x, std::vector<int> axes = {}, bool keepdims = false);

//! Which index ArgReduce returns.
enum class ArgReduceMode : uint8_t {
    ARGMAX, //!< index of the largest element (the first NaN counts as largest)
    ARGMIN, //!< index of the smallest element (the first NaN counts as smallest)
};

//! Name of a mode, e.g. "ARGMAX".
const char* arg_reduce_mode_name(ArgReduceMode mode);

//! The params of ArgReduce.
struct ArgReduceParam {
    ArgReduceMode mode = ArgReduceMode::ARGMAX; //!< argmax or argmin
    int axis = -1;                              //!< negative counts from the end
    bool keepdims = false;                      //!< keep the axis as size 1
    static constexpr auto fields() {
        return std::tuple{param_field("mode", &ArgReduceParam::mode, arg_reduce_mode_name),
                          param_field("axis", &ArgReduceParam::axis),
                          param_field("keepdims", &ArgReduceParam::keepdims)};
    }
};

//! The int32 index of the largest / smallest element along one axis; ties give the first.
//! The axis disappears from the shape unless keepdims. An empty axis is a ShapeError.
class ArgReduce final : public ParamOperator<ArgReduce, ArgReduceParam> {
public:
    ArgReduce(VarNode* x, Param param, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for a bad or empty axis, DTypeError for bool.
    static SymbolVar make(SymbolVar x, Param param, const OperatorConfig& config = {});

    const char* type_name() const override { return "ArgReduce"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! Index of the largest element along `axis` (int32).
SymbolVar argmax(SymbolVar x, int axis = -1, bool keepdims = false);
//! Index of the smallest element along `axis` (int32).
SymbolVar argmin(SymbolVar x, int axis = -1, bool keepdims = false);

} // namespace braid::opr
