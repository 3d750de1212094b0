// Indexing by an int32 index tensor: Gather (numpy take_along_axis), IndexingOneHot (one
// element per position along an axis) and Embedding (rows of a table).
//
// Indices must lie in [0, size); an index outside is a ValueError at execution that names the
// index, its position and the valid range. Outputs are contiguous; rows copy with memcpy and
// large outputs split across the shared kernel pool. x may have any dtype.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! The params of Gather.
struct GatherParam {
    int axis = 0;
    static constexpr auto fields() { return std::tuple{param_field("axis", &GatherParam::axis)}; }
};

//! out[..., j, ...] = x[..., index[..., j, ...], ...] along `axis`: index has x's rank and
//! x's dims except along `axis`; the output has index's shape.
class Gather final : public ParamOperator<Gather, GatherParam> {
public:
    Gather(VarNode* x, VarNode* index, int axis, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for a bad axis or index shape, DTypeError
    //! when index is not int32.
    static SymbolVar make(SymbolVar x, SymbolVar index, int axis,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "Gather"; }
    //! The gradient rule (graph/grad.h), in operators/indexing_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    int axis() const { return m_param.axis; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! The params of IndexingOneHot.
struct IndexingOneHotParam {
    int axis = 0;
    bool keepdims = false;
    static constexpr auto fields() {
        return std::tuple{param_field("axis", &IndexingOneHotParam::axis),
                          param_field("keepdims", &IndexingOneHotParam::keepdims)};
    }
};

//! out[p] = x[p with `axis` = index[p]]: index has x's shape without `axis`; so does the output
//! (with a unit axis kept when keepdims). Picks e.g. each row's label logit.
class IndexingOneHot final : public ParamOperator<IndexingOneHot, IndexingOneHotParam> {
public:
    IndexingOneHot(VarNode* x, VarNode* index, int axis, bool keepdims,
                   const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for a bad axis or index shape, DTypeError
    //! when index is not int32.
    static SymbolVar make(SymbolVar x, SymbolVar index, int axis, bool keepdims = false,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "IndexingOneHot"; }
    //! The gradient rule (graph/grad.h), in operators/indexing_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    int axis() const { return m_param.axis; }
    bool keepdims() const { return m_param.keepdims; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! Embedding lookup: table [V, D], ids (int32, any shape) -> ids.shape + [D].
class Embedding final : public OperatorNode {
public:
    Embedding(VarNode* table, VarNode* ids, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError when the table is not 2-D or the output rank
    //! exceeds the maximum, DTypeError when ids are not int32.
    static SymbolVar make(SymbolVar table, SymbolVar ids, const OperatorConfig& config = {});

    const char* type_name() const override { return "Embedding"; }
    //! The gradient rule (graph/grad.h), in operators/indexing_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! Gather along `axis` (take_along_axis).
SymbolVar gather(SymbolVar x, SymbolVar index, int axis);
//! One element per position along `axis`, chosen by index.
SymbolVar indexing_one_hot(SymbolVar x, SymbolVar index, int axis, bool keepdims = false);
//! Rows of `table` for each id.
SymbolVar embedding(SymbolVar table, SymbolVar ids);

} // namespace braid::opr
