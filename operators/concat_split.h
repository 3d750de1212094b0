// Concat (join tensors along an axis) and Split (cut one along an axis into given sizes or
// N equal parts; one output per part).
//
// Concat copies each input's block with memcpy, in parallel for large outputs. Split's
// outputs are read-only views of its input: free along the first non-unit axis, and
// consumers that need packed memory get a contiguous copy from the executor.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! The params of Concat.
struct ConcatParam {
    int axis = 0;
    static constexpr auto fields() { return std::tuple{param_field("axis", &ConcatParam::axis)}; }
};

//! Joins inputs of one dtype and rank whose dims agree except along `axis`.
class Concat final : public ParamOperator<Concat, ConcatParam> {
public:
    Concat(const VarNodeArray& inputs, int axis, const OperatorConfig& config);
    //! Inserts the operator; throws GraphError for no inputs, ShapeError for a bad axis or
    //! mismatched shapes (naming both), DTypeError for mixed dtypes.
    static SymbolVar make(const SymbolVarArray& inputs, int axis,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "Concat"; }
    //! The gradient rule (graph/grad.h), in operators/concat_split_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    int axis() const { return m_param.axis; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! The params of Split.
struct SplitParam {
    int axis = 0;              //!< negative counts from the end
    std::vector<size_t> sizes; //!< explicit part sizes; empty: use nr_parts
    size_t nr_parts = 0;       //!< equal parts when sizes is empty
    static constexpr auto fields() {
        return std::tuple{param_field("axis", &SplitParam::axis),
                          param_field("sizes", &SplitParam::sizes),
                          param_field("nr_parts", &SplitParam::nr_parts)};
    }
};

//! Cuts x along `axis` into parts of the given sizes (summing to the axis length), or into
//! `nr_parts` equal parts (the length must divide). Output k is part k, a view of x.
class Split final : public ParamOperator<Split, SplitParam> {
public:
    Split(VarNode* x, Param param, const OperatorConfig& config);
    //! Inserts the operator and returns its outputs; throws ShapeError for a bad axis, sizes
    //! that do not sum to the axis length, or a length nr_parts does not divide.
    static SymbolVarArray make(SymbolVar x, Param param, const OperatorConfig& config = {});

    const char* type_name() const override { return "Split"; }
    //! The gradient rule (graph/grad.h), in operators/concat_split_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    OutputMem output_mem(size_t) const override { return OutputMem::READONLY_FORWARD; }
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;

private:
    //! The part sizes for an axis of length `len`; throws ShapeError when they do not fit.
    std::vector<size_t> part_sizes(const TensorShape& shape, size_t axis) const;
};

//! Concatenates `inputs` along `axis`.
SymbolVar concat(const SymbolVarArray& inputs, int axis);
//! Splits x along `axis` into parts of `sizes`.
SymbolVarArray split(SymbolVar x, int axis, std::vector<size_t> sizes);
//! Splits x along `axis` into `nr_parts` equal parts.
SymbolVarArray split(SymbolVar x, int axis, size_t nr_parts);

} // namespace braid::opr

// ---- serialization helpers shared with other files of the family (graph/param_io.h)
namespace braid {
class ParamWriter;
struct OprLoadContext;
} // namespace braid

namespace braid::opr {
//! The most parts a loaded Split may have (each part is an output var).
constexpr size_t MAX_LOADED_SPLIT_PARTS = size_t(1) << 16;
} // namespace braid::opr
