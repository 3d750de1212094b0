// Basic indexing: Subtensor (x[start:stop:step, i, ...] as a view) and SetSubtensor /
// IncrSubtensor (a copy of x with that slice replaced by, or incremented by, a value).
//
// Slices follow Python: negative start/stop count from the end, out-of-range bounds clamp,
// a negative step walks backwards, an omitted bound means "from the first / to the last
// element in the step's direction". A single index removes its axis; out of range it is a
// ShapeError. Subtensor is a read-only strided view of its input (consumers that need packed
// memory get a contiguous copy from the executor); SetSubtensor/IncrSubtensor write their
// output in place of x when x dies there.
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

#include <optional>

namespace braid::opr {

//! One indexing item on one axis: a slice start:stop:step, or a single index.
struct AxisIndex {
    int axis = 0; //!< negative counts from the end
    std::optional<long>
        start;                //!< first position (the index itself when is_index); nullopt: omitted
    std::optional<long> stop; //!< end position, excluded; nullopt: omitted
    long step = 1;            //!< nonzero; negative walks backwards
    bool is_index = false;    //!< a single position (in `start`); the axis disappears

    //! x[start:stop:step] on `axis`; std::nullopt bounds are omitted ones.
    static AxisIndex slice(int axis, std::optional<long> start, std::optional<long> stop,
                           long step = 1) {
        return {axis, start, stop, step, false};
    }
    //! x[index] on `axis` (negative counts from the end).
    static AxisIndex index(int axis, long index) { return {axis, index, std::nullopt, 1, true}; }
    //! Same axis, bounds, step and kind.
    bool operator==(const AxisIndex& rhs) const = default;
};

//! A view of x through a list of AxisIndex items (each axis at most once).
class Subtensor final : public OperatorNode {
public:
    Subtensor(VarNode* x, std::vector<AxisIndex> items, const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for a bad axis, a zero step, an index out of
    //! range or an axis indexed twice.
    static SymbolVar make(SymbolVar x, std::vector<AxisIndex> items,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "Subtensor"; }
    //! The gradient rule (graph/grad.h), in operators/subtensor_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    const std::vector<AxisIndex>& items() const { return m_items; }
    void hash_params(Hasher& h) const override;
    bool params_equal(const OperatorNode& rhs) const override;
    std::string param_string() const override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    OutputMem output_mem(size_t) const override { return OutputMem::READONLY_FORWARD; }
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;

private:
    std::vector<AxisIndex> m_items;
};

//! output = x with x[items] = value (SET) or x[items] += value (INCR); value broadcasts
//! (numpy rules) to the slice's shape and has x's dtype.
class SetSubtensor final : public OperatorNode {
public:
    //! Replace the slice or add to it.
    enum class Kind : uint8_t { SET, INCR };
    SetSubtensor(VarNode* x, VarNode* value, Kind kind, std::vector<AxisIndex> items,
                 const OperatorConfig& config);
    //! Inserts the operator; throws ShapeError for bad items or a value that does not
    //! broadcast to the slice, DTypeError when value's dtype is not x's.
    static SymbolVar make(SymbolVar x, SymbolVar value, Kind kind, std::vector<AxisIndex> items,
                          const OperatorConfig& config = {});

    const char* type_name() const override {
        return m_kind == Kind::SET ? "SetSubtensor" : "IncrSubtensor";
    }
    //! The gradient rule (graph/grad.h), in operators/subtensor_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    Kind kind() const { return m_kind; }
    const std::vector<AxisIndex>& items() const { return m_items; }
    void hash_params(Hasher& h) const override;
    bool params_equal(const OperatorNode& rhs) const override;
    std::string param_string() const override;
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    int inplace_input(size_t) const override { return 0; }
    void execute(ExecCtx& ctx) override;

private:
    Kind m_kind;
    std::vector<AxisIndex> m_items;
};

//! x[items] as a view.
SymbolVar subtensor(SymbolVar x, std::vector<AxisIndex> items);
//! The tensor x[items] as a view of `x` (host or device memory; nothing is copied), as
//! Subtensor computes it; throws ShapeError naming `who` for bad items. For device kernels.
Tensor subtensor_view(const Tensor& x, const std::vector<AxisIndex>& items, const std::string& who);
//! x with x[items] = value.
SymbolVar set_subtensor(SymbolVar x, SymbolVar value, std::vector<AxisIndex> items);
//! x with x[items] += value.
SymbolVar incr_subtensor(SymbolVar x, SymbolVar value, std::vector<AxisIndex> items);

} // namespace braid::opr
