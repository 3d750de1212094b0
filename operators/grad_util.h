// Helpers shared by the gradient rules (operators/*_grad.cpp) and their registration.
#pragma once

#include "graph/grad.h"
#include "graph/symbol_var.h"

#include <vector>

namespace braid::opr {

//! Sums `g` over the axes along which a var of shape `target` was broadcast to g's shape,
//! and reshapes the result to `target`: the gradient of a numpy broadcast.
SymbolVar reduce_sum_to_shape(SymbolVar g, const TensorShape& target);
//! A var of `like`'s shape and dtype filled with `value`.
SymbolVar filled_like(SymbolVar like, double value);
//! `filled_like(like, 0)`: an explicit zero gradient. A broadcast constant, so it reads
//! nothing of `like` at run time and keeps no forward var alive.
SymbolVar zeros_of(SymbolVar like);
//! The dims of a static shape as a reshape target.
std::vector<long> shape_dims(const TensorShape& shape);
//! `x` reshaped to `target` (no operator when it already has that shape).
SymbolVar reshape_to(SymbolVar x, const TensorShape& target);
//! The static shape of `var`; throws GraphError naming `who` when it is dynamic (gradient
//! rules that need static geometry).
const TensorShape& static_shape(VarNode* var, const char* who);

//! Registers the gradient rules of each family (called by register_all_operators()).
void register_elemwise_grad();
void register_matmul_grad();
void register_reduce_grad();
void register_tensor_manip_grad();
void register_optimizer_grad();
void register_normalization_grad();
void register_concat_split_grad();
void register_subtensor_grad();
void register_indexing_grad();
void register_conv_grad();
void register_pooling_grad();
void register_batch_norm_grad();
void register_attention_grad();
void register_fill_grad();
//! Installs the arithmetic the autodiff walk needs (add, ones, zeros).
void register_grad_arith();

} // namespace braid::opr
