// Reverse-mode automatic differentiation over the computing graph.
//
// grad(loss, wrt) inserts gradient operators into the loss's graph and returns the
// gradient vars. Each differentiable operator type registers a GradRule (written in
// operators/*_grad.cpp or next to the operator, registered by its family's register function);
// the rules build gradients from ordinary operators, so
// gradients of gradients work wherever those operators are differentiable too.
#pragma once

#include "graph/symbol_var.h"

#include <functional>
#include <string>

namespace braid {

class OperatorNode;

//! Options of grad().
struct GradOptions {
    //! A var the loss does not depend on gets an explicit zero gradient (true) or a
    //! GraphError (false, the default).
    bool zero_for_unreachable = false;
};

//! The gradient of the loss w.r.t. input `wrt_idx` of `opr`, given the gradient of each
//! output (nullptr for outputs the loss does not depend on). Returns nullptr when that input
//! gets no gradient. Must return a var of the input's shape and dtype.
using GradRule =
    std::function<VarNode*(OperatorNode& opr, size_t wrt_idx, const VarNodeArray& out_grads)>;

//! wrt_idx passed to a rule registered with `always_run`: the operator's outputs get a
//! gradient but none of its inputs needs one.
constexpr size_t GRAD_SIDE_EFFECT_ONLY = ~size_t(0);

/*!
 * Registers the gradient rule of an operator type (replacing any earlier one). With
 * `always_run`, the rule is also called (with wrt_idx = GRAD_SIDE_EFFECT_ONLY) when the
 * outputs get a gradient but no input needs one; the var it returns is attached to every
 * gradient grad() returns as an extra dependency, so it executes with them. Collectives use
 * this: every rank must take part in the gradient collective, whatever its own inputs.
 */
void register_grad_rule(const std::string& type_name, GradRule rule, bool always_run = false);
//! Declares an operator type not differentiable; grad() through it fails with `reason`.
void register_non_differentiable(const std::string& type_name, const std::string& reason);

//! The arithmetic the autodiff walk itself needs, provided by the operator library.
struct GradArith {
    std::function<VarNode*(VarNode*, VarNode*)> add; //!< elementwise sum, same shapes
    std::function<VarNode*(VarNode*)> ones_like;     //!< ones of the var's shape and dtype
    std::function<VarNode*(VarNode*)> zeros_like;    //!< zeros of the var's shape and dtype
};
//! Installs the walk's arithmetic (done by register_all_operators()).
void set_grad_arith(GradArith arith);

//! d loss / d wrt. The loss must be a statically shaped var with one element.
SymbolVar grad(SymbolVar loss, SymbolVar wrt, const GradOptions& options = {});
//! d loss / d wrt[i] for every i, sharing the backward operators.
SymbolVarArray grad(SymbolVar loss, const SymbolVarArray& wrt, const GradOptions& options = {});

} // namespace braid
