// Helpers shared by the gradient rules (operators/*_grad.cpp) and their registration.
#pragma once

#include "graph/grad.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! Sums `g` over the axes along which a var of shape `target` was broadcast to g's shape,
//! and reshapes the result to `target`: the gradient of a numpy broadcast.
SymbolVar reduce_sum_to_shape(SymbolVar g, const TensorShape& target);
//! A var of `like`'s shape and dtype filled with `value`.
SymbolVar filled_like(SymbolVar like, double value);

//! Registers the gradient rules of each family (called by register_all_operators()).
void register_elemwise_grad();
void register_matmul_grad();
void register_reduce_grad();
void register_tensor_manip_grad();
void register_optimizer_grad();
//! Installs the arithmetic the autodiff walk needs (add, ones, zeros).
void register_grad_arith();

} // namespace braid::opr
