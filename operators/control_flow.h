// Control flow: If, an operator that runs one of two subgraphs (its branches) chosen by a
// condition read at run time.
//
//     auto y = opr::cond(pred, {x, w},
//                        [](ComputingGraph&, const SymbolVarArray& in) { return
//                        SymbolVarArray{in[0] * in[1]}; },
//                        [](ComputingGraph&, const SymbolVarArray& in) { return
//                        SymbolVarArray{in[0]}; });
//
// Each branch is a graph of its own (a Branch) whose Input operators stand for the values the
// If passes in (its captured inputs, in order); the branch reads them without a copy. A branch is
// compiled once per concurrent run and its executables are reused, each with its own memory
// plan; only the taken branch runs. The branches run on "cpu:default", inline in the thread that
// runs the If.
//
// Output shapes: the taken branch's when the condition is known statically; otherwise both
// branches are inferred for the captured shapes, and when they agree the outputs are static,
// else dynamic (inferred when the If runs, from the taken branch). A shape error in a branch is
// raised at build time only when that branch is known to be taken; otherwise when it runs.
// Output dtypes must agree between the branches. Errors inside a branch name the branch's
// operator (and its ONNX node) and the If around it. No gradient rule yet: differentiating
// through an If is a GraphError naming it. CPU only (a CUDA comp node fails to compile, naming
// the operator). Serialized with both branches inside the model file.
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

#include <array>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

namespace braid::opr {

//! One branch of an If: a graph of its own and the vars that connect it to the If.
struct Branch {
    std::shared_ptr<ComputingGraph> graph;
    //! For each captured input of the If (its inputs 1..n, in order), the branch's Input var
    //! that stands for it, or null when the branch does not read it.
    VarNodeArray inputs;
    //! The branch's results, one per output of the If.
    VarNodeArray outputs;
    //! Set (and graph null) for a branch that could not be built for the shapes the If was
    //! built at (an imported branch a model takes only at other shapes): taking it at run time
    //! raises this error; the If's outputs follow the other branch.
    std::exception_ptr error;
};

//! A branch that raises `error` when taken (see Branch::error).
Branch failed_branch(std::exception_ptr error, size_t nr_captured);

//! Builds a branch's outputs in `branch` (its graph) from the Input vars that stand for the
//! captured values.
using BranchBuilder =
    std::function<SymbolVarArray(ComputingGraph& branch, const SymbolVarArray& inputs)>;

//! A new branch graph (the options of `like`'s graph, on "cpu:default") with one Input per
//! captured var (named `names[i]`, or the var's name when `names` is empty; its dtype and static
//! shape; a captured var of dynamic shape gets the shape {0} until the If infers it), and its
//! outputs from `build`.
Branch make_branch(ComputingGraph& like, const SymbolVarArray& captured, const BranchBuilder& build,
                   const std::vector<std::string>& names = {});

//! Runs `then_branch` when the one-element `cond` is nonzero, else `else_branch`.
class If final : public OperatorNode {
public:
    If(VarNode* cond, const VarNodeArray& captured, Branch then_branch, Branch else_branch,
       const OperatorConfig& config);
    ~If() override;
    //! Inserts the operator; throws GraphError when a branch's inputs do not match `captured`
    //! or the branches have different output counts, DTypeError when their output dtypes
    //! differ.
    static SymbolVarArray make(SymbolVar cond, const SymbolVarArray& captured, Branch then_branch,
                               Branch else_branch, const OperatorConfig& config = {});

    const char* type_name() const override { return "If"; }
    bool allow_dedup() const override { return false; }
    void init_output_dtypes() override;
    bool shape_needs_value(size_t input_idx) const override { return input_idx == 0; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    ValueInference value_inference() const override { return ValueInference::NONE; }
    void execute(ExecCtx& ctx) override;

    //! Branch 0 is taken when the condition is nonzero (then), branch 1 otherwise (else).
    const Branch& branch(size_t i) const { return m_branches.at(i); }

private:
    //! The branch's output shapes for the captured shapes in `ctx`; false when one is unknown.
    bool infer_branch(size_t b, const InferCtx& ctx, TensorShape* out) const;
    //! Throws the error of a branch that could not be built, naming the If.
    [[noreturn]] void raise_branch_error(size_t b) const;

    std::array<Branch, 2> m_branches;
    //! Compiled branches not running now, per branch; a run takes one or compiles a new one.
    struct Pool;
    std::unique_ptr<Pool> m_pool;
};

//! cond ? then_fn(captured) : else_fn(captured), as an If whose branches `then_fn` and
//! `else_fn` build from Input vars standing for `captured`.
SymbolVarArray cond(SymbolVar cond, const SymbolVarArray& captured, const BranchBuilder& then_fn,
                    const BranchBuilder& else_fn, const OperatorConfig& config = {});

} // namespace braid::opr
