// Copy: moves a var to another comp node, across devices (host <-> CUDA device, device <->
// device) or within one.
//
// The graph inserts Copy operators by itself: when an operator reads a var that lives on
// another device than the operator's comp node, ComputingGraph::insert_opr routes that input
// through Copy::make(var, reader's comp node) (the rule is installed by
// register_all_operators()). Inserting one by hand is only needed to choose where a value
// crosses. The Copy runs on the target comp node: a host-to-device copy is enqueued on the
// target's stream, a device-to-host copy into a CPU comp node completes before the Copy ends.
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! y = x on comp node `target` (same shape and dtype).
class Copy final : public OperatorNode {
public:
    Copy(VarNode* x, const OperatorConfig& config);
    //! A copy of `x` on `target`; returns `x` itself when it already lives on `target`.
    static SymbolVar make(SymbolVar x, CompNode target, const OperatorConfig& config = {});

    const char* type_name() const override { return "Copy"; }
    std::string param_string() const override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;
};

} // namespace braid::opr
