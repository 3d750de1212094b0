// Control flow: If, an operator that runs one of two subgraphs (its branches) chosen by a
// condition read at run time, and Loop, which runs its body subgraph while a trip count and a
// condition allow (ONNX Loop; ONNX Scan is imported as a Loop).
//
//     auto y = opr::cond(pred, {x, w},
//                        [](ComputingGraph&, const SymbolVarArray& in) { return
//                        SymbolVarArray{in[0] * in[1]}; },
//                        [](ComputingGraph&, const SymbolVarArray& in) { return
//                        SymbolVarArray{in[0]}; });
//
// A subgraph is a graph of its own whose Input operators stand for the values the operator
// passes in (a branch's captured values; a body's iteration number, condition, loop-carried
// and captured values); it reads them without a copy. A subgraph is compiled once per
// concurrent run and its executables are reused, each with its own memory plan; only the taken
// branch runs. Subgraphs run on "cpu:default", inline in the thread that runs the operator, under
// the run's cancellation and deadline.
//
// An If whose condition is known when it is built (a constant) is no If: the taken branch's
// operators are copied into the enclosing graph (graph/graph_copy.h; once
// register_all_operators() has run), so it costs what the branch written by hand would. Otherwise
// its output shapes: the taken branch's when the condition becomes known statically; otherwise both
// branches are inferred for the captured shapes, and when they agree the outputs are static, else
// dynamic (inferred when the If runs, from the taken branch). A shape error in a branch is raised
// at build time only when that branch is known to be taken; otherwise when it runs. Output dtypes
// must agree between the branches. Errors inside a subgraph name its operator (and its ONNX node)
// and the operator around it.
//
// If's gradient is the taken branch's: another If on the same condition whose branches are
// copies of the forward ones (graph/graph_copy.h: the forward branch graphs keep their own fed
// shapes) followed by their gradients, fed the captured values and the output gradients; a
// captured value a branch does not read gets zeros. A Loop's gradient (see loop()) needs a
// static trip count and no early exit (otherwise a GraphError naming it). CPU only (a CUDA comp
// node fails to compile, naming the operator). Serialized with their subgraphs inside the model
// file.
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

#include <array>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace braid::opr {

//! A branch of an If or the body of a Loop: a graph of its own and the vars that connect it to
//! the operator.
struct Subgraph {
    std::shared_ptr<ComputingGraph> graph;
    //! For each value the operator passes in (an If's captured inputs 1..n; a Loop's iteration,
    //! condition, carried and captured values), the subgraph's Input var that stands for it, or
    //! null when the subgraph does not read it.
    VarNodeArray inputs;
    //! The subgraph's results (a branch: one per output of the If).
    VarNodeArray outputs;
    //! Set (and graph null) for a branch that could not be built for the shapes the If was
    //! built at (an imported branch a model takes only at other shapes): taking it at run time
    //! raises this error; the If's outputs follow the other branch.
    std::exception_ptr error;
};

namespace detail {
class ExecutablePool;
}

//! An Input of a subgraph: its name, dtype and shape (the shape follows the operator's input
//! when it infers shapes).
struct SubgraphInput {
    std::string name;
    DType dtype;
    TensorShape shape;
};
//! A new subgraph (the options of `like`, on "cpu:default") with one Input per entry of `inputs`
//! (names made unique with "#k"), and its outputs from `build`, which must be vars of it.
Subgraph
make_subgraph(ComputingGraph& like, const std::vector<SubgraphInput>& inputs,
              const std::function<SymbolVarArray(ComputingGraph&, const SymbolVarArray&)>& build);

//! A branch that raises `error` when taken (see Subgraph::error).
Subgraph failed_branch(std::exception_ptr error, size_t nr_captured);

//! Builds a branch's outputs in `branch` (its graph) from the Input vars that stand for the
//! captured values.
using BranchBuilder =
    std::function<SymbolVarArray(ComputingGraph& branch, const SymbolVarArray& inputs)>;

//! A new branch graph (the options of `like`'s graph, on "cpu:default") with one Input per
//! captured var (its name, dtype and static shape; a captured var of dynamic shape gets the
//! shape {0} until the If infers it), and its outputs from `build`.
Subgraph make_branch(ComputingGraph& like, const SymbolVarArray& captured,
                     const BranchBuilder& build);

//! Runs `then_branch` when the one-element `cond` is nonzero, else `else_branch`.
class If final : public OperatorNode {
public:
    If(VarNode* cond, const VarNodeArray& captured, Subgraph then_branch, Subgraph else_branch,
       const OperatorConfig& config);
    //! Inserts the operator; throws GraphError when a branch's inputs do not match `captured`
    //! or the branches have different output counts, DTypeError when their output dtypes
    //! differ.
    static SymbolVarArray make(SymbolVar cond, const SymbolVarArray& captured, Subgraph then_branch,
                               Subgraph else_branch, const OperatorConfig& config = {});

    const char* type_name() const override { return "If"; }
    bool allow_dedup() const override { return false; }
    void init_output_dtypes() override;
    bool shape_needs_value(size_t input_idx) const override { return input_idx == 0; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    ValueInference value_inference() const override { return ValueInference::NONE; }
    void execute(ExecCtx& ctx) override;

    //! Branch 0 is taken when the condition is nonzero (then), branch 1 otherwise (else).
    const Subgraph& branch(size_t i) const { return m_branches.at(i); }

    //! The gradients of the captured inputs for these output gradients (nullptr for an
    //! output the loss does not depend on): one If, built once per set of output gradients.
    const SymbolVarArray& backward(const VarNodeArray& out_grads);

private:
    //! The branch's output shapes for the captured shapes in `ctx`; false when one is unknown.
    bool infer_branch(size_t b, const InferCtx& ctx, TensorShape* out) const;
    //! Throws the error of a branch that could not be built, naming the If.
    [[noreturn]] void raise_branch_error(size_t b) const;

    std::array<Subgraph, 2> m_branches;
    std::array<std::shared_ptr<detail::ExecutablePool>, 2> m_pools;
    std::map<VarNodeArray, SymbolVarArray> m_backward;
};

//! cond ? then_fn(captured) : else_fn(captured), as an If whose branches `then_fn` and
//! `else_fn` build from Input vars standing for `captured`.
SymbolVarArray cond(SymbolVar cond, const SymbolVarArray& captured, const BranchBuilder& then_fn,
                    const BranchBuilder& else_fn, const OperatorConfig& config = {});

/*!
 * Runs its body while the iteration number is below `max_trip` (when given) and the
 * condition holds (ONNX Loop). The body's inputs: the iteration number (int64 {}), the
 * condition (bool {}), the loop-carried values, then the captured values; its outputs: the
 * condition for the next iteration, the carried values (same dtypes), then one scan value per
 * iteration. The Loop's outputs: the carried values after the last iteration (the initial ones
 * after none), then each scan value stacked along a new axis 0.
 *
 * The output shapes are static when the body keeps the carried shapes and, where there are
 * scan outputs, the trip count is known statically and no condition can end the loop early
 * (no condition input or a static true one, and a body condition that passes its input through
 * or is statically true). Otherwise they are dynamic, made by the Loop when it runs. Scan
 * values must have the same shape in every iteration (ShapeError naming the Loop). A
 * body output that does not alias what the body was fed becomes the next iteration's input
 * without a copy (two executables of the body take turns); one that does is copied.
 */
class Loop final : public OperatorNode {
public:
    //! Null `max_trip` or `cond`: not given (no limit; always true at the start).
    Loop(VarNode* max_trip, VarNode* cond, const VarNodeArray& carried,
         const VarNodeArray& captured, Subgraph body, const OperatorConfig& config);
    //! Inserts the operator; throws GraphError when the body's inputs or outputs do not match,
    //! DTypeError when a carried value changes dtype or the trip count is not an integer.
    static SymbolVarArray make(SymbolVar max_trip, SymbolVar cond, const SymbolVarArray& carried,
                               const SymbolVarArray& captured, Subgraph body,
                               const OperatorConfig& config = {});

    const char* type_name() const override { return "Loop"; }
    bool allow_dedup() const override { return false; }
    void init_output_dtypes() override;
    bool shape_needs_value(size_t input_idx) const override {
        return input_idx < size_t(m_has_trip) + size_t(m_has_cond);
    }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    ValueInference value_inference() const override { return ValueInference::NONE; }
    OutputMem output_mem(size_t) const override { return OutputMem::BOUND; }
    void execute(ExecCtx& ctx) override;

    const Subgraph& body() const { return m_body; }
    bool has_max_trip() const { return m_has_trip; }
    bool has_cond() const { return m_has_cond; }
    size_t nr_carried() const { return m_nr_carried; }

    //! The gradients of the carried and captured inputs (in input order, after the trip count
    //! and condition) for these output gradients: two Loops built once per set of output
    //! gradients (see loop()). GraphError unless the trip count is static and nothing can end
    //! the loop early.
    const SymbolVarArray& backward(const VarNodeArray& out_grads);

private:
    //! The trip count when it is known statically and nothing can end the loop early.
    std::optional<int64_t> static_trip_count(const InferCtx& ctx) const;

    bool m_has_trip, m_has_cond;
    size_t m_nr_carried, m_nr_captured;
    Subgraph m_body;
    std::shared_ptr<detail::ExecutablePool> m_pool;
    std::map<VarNodeArray, SymbolVarArray> m_backward;
};

//! Builds a loop body's outputs {condition, carried..., scans...} in `body` from its Inputs.
using LoopBodyBuilder =
    std::function<SymbolVarArray(ComputingGraph& body, SymbolVar iteration, SymbolVar cond,
                                 const SymbolVarArray& carried, const SymbolVarArray& captured)>;
//! A Loop whose body `build` makes; invalid `max_trip` or `cond`: not given.
//!
//! Differentiable when the trip count is static and nothing can end the loop early: the
//! gradient runs the loop again recording each iteration's carried values (a copy of the body
//! with them as extra scan outputs), then a second Loop runs the body's gradient from the last
//! iteration to the first (a copy of the body per step, fed the recorded values), carrying the
//! carried values' gradients and summing the captured values'.
SymbolVarArray loop(SymbolVar max_trip, SymbolVar cond, const SymbolVarArray& carried,
                    const SymbolVarArray& captured, const LoopBodyBuilder& build,
                    const OperatorConfig& config = {});

} // namespace braid::opr
