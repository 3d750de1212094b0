// Helpers shared by the gradient rules (operators/*_grad.cpp and the rules beside their
// operators); each family registers its rules in its own register_<family>_operators().
#pragma once

#include "graph/grad.h"
#include "graph/symbol_var.h"

#include <vector>

namespace braid::opr {

// Gradient rules build graphs that must stay right when the forward graph is fed another
// shape (a new batch size re-infers every var): every shape they produce follows a forward
// var symbolically (its symshape()), never a constant copy of today's static shape.

//! Sums `g` over the axes along which `like` was broadcast to g's shape, and reshapes the
//! result to like's shape: the gradient of a numpy broadcast. The axes are chosen from the
//! static shapes (a dim of 1 in `like` is a broadcast dim); the result's shape follows
//! `like` when shapes change later.
SymbolVar reduce_sum_to_shape(SymbolVar g, SymbolVar like);
//! A var of `like`'s shape (followed symbolically) and dtype filled with `value`.
SymbolVar filled_like(SymbolVar like, double value);
//! `filled_like(like, 0)`: an explicit zero gradient. A broadcast constant, so it reads
//! nothing of `like` at run time and keeps no forward var alive.
SymbolVar zeros_of(SymbolVar like);
//! `x` reshaped to `like`'s shape, followed symbolically (no operator when both static
//! shapes are equal).
SymbolVar reshape_to(SymbolVar x, SymbolVar like);
//! The number of elements of `x` along `axes` (all axes when empty), as a scalar of `dtype`
//! that follows x's shape: the divisor of a mean's gradient.
SymbolVar nr_elems_along(SymbolVar x, const std::vector<int>& axes, DType dtype);
//! The static shape of `var`; throws GraphError naming `who` when it is dynamic (gradient
//! rules that need static geometry).
const TensorShape& static_shape(VarNode* var, const char* who);

//! Installs the arithmetic the autodiff walk needs (add, ones, zeros).
void register_grad_arith();

} // namespace braid::opr
