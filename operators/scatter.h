// Scatter-adds by an int32 index tensor, the transposes of the indexing operators (they give
// the gradients of Gather, IndexingOneHot and Embedding):
//  - ScatterAdd: out = x, then out[.., index[p], ..] += value[p] along an axis for every
//    position p of index (torch.scatter_add; the transpose of Gather);
//  - IndexAdd: out = x, then slice index[i] of out along an axis += slice i of value
//    (torch.index_add; with axis 0 and a 2-D x, the transpose of Embedding).
//
// Repeated indices accumulate. Indices must lie in [0, size of the axis); an index outside is
// a ValueError at execution naming it, its position and the valid range. Dtypes: x and value
// share float32, float64 (added in double), float16, bfloat16 (added in float32, rounded once),
// int32 or int64. The output may overwrite x in place; large outputs split across the shared kernel
// pool over the positions that never write to the same element.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! The params of ScatterAdd.
struct ScatterAddParam {
    int axis = 0;
    static constexpr auto fields() {
        return std::tuple{param_field("axis", &ScatterAddParam::axis)};
    }
};

//! out = x with value scattered along `axis` by index: index and value share one shape, of
//! x's rank and x's dims on every axis but `axis`.
class ScatterAdd final : public ParamOperator<ScatterAdd, ScatterAddParam> {
public:
    ScatterAdd(VarNode* x, VarNode* index, VarNode* value, int axis, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for a bad axis or index/value shapes that do not
    //! fit x, DTypeError for an index that is not int32 or a value dtype other than x's.
    static SymbolVar make(SymbolVar x, SymbolVar index, SymbolVar value, int axis,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "ScatterAdd"; }
    //! The gradient rule (graph/grad.h), in operators/indexing_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    int axis() const { return m_param.axis; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    int inplace_input(size_t) const override { return 0; }
    void execute(ExecCtx& ctx) override;
};

//! The params of IndexAdd.
struct IndexAddParam {
    int axis = 0;
    static constexpr auto fields() { return std::tuple{param_field("axis", &IndexAddParam::axis)}; }
};

//! out = x with slice i of value added to slice index[i] of out along `axis`: index is 1-D
//! int32; value has x's dims except along `axis`, where it has index's length.
class IndexAdd final : public ParamOperator<IndexAdd, IndexAddParam> {
public:
    IndexAdd(VarNode* x, VarNode* index, VarNode* value, int axis, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for a bad axis, an index that is not 1-D or a
    //! value shape that does not fit, DTypeError for an index that is not int32 or a value
    //! dtype other than x's.
    static SymbolVar make(SymbolVar x, SymbolVar index, SymbolVar value, int axis,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "IndexAdd"; }
    //! The gradient rule (graph/grad.h), in operators/indexing_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    int axis() const { return m_param.axis; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    int inplace_input(size_t) const override { return 0; }
    void execute(ExecCtx& ctx) override;
};

//! x with value scatter-added along `axis` at index (the transpose of gather()).
SymbolVar scatter_add(SymbolVar x, SymbolVar index, SymbolVar value, int axis);
//! x with slice i of value added to slice index[i] along `axis`.
SymbolVar index_add(SymbolVar x, SymbolVar index, SymbolVar value, int axis);

} // namespace braid::opr
