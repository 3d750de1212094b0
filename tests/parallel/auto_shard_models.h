// Models for the automatic sharding tests and benchmark, and the hand-written plans they are
// compared with, as placements per operator (AutoSharder::plan_where):
//  - data parallelism (parallel::data_parallel_placement): every activation split by rows over
//    every mesh axis, parameters replicated; for training, the gradients' partial sums;
//  - Megatron-LM (parallel/tensor_parallel.h) over the "tp" axis, data parallelism over the
//    "dp" axis: column-parallel Wq, Wk, Wv and W1 (and their biases), row-parallel Wo and W2
//    whose partial products are summed before their replicated bias.
// Parameter names say which is which: "*.q.*", "*.k.*", "*.v.*", "*fc1.*" are column-parallel,
// "*.out.*" and "*fc2.*" row-parallel.
#pragma once

#include "parallel/auto_shard.h"

#include <functional>

namespace braid::test {

struct AutoShardModel {
    SymbolVarArray outputs;
};

//! gelu(x W1 + b1) W2 + b2 for x {tokens, d}, W1 {d, d_ff}.
AutoShardModel build_auto_shard_mlp(ComputingGraph& graph, size_t tokens, size_t d, size_t d_ff);
//! A pre-norm transformer block on x {batch * seq, d}: causal attention over each sequence
//! with `heads` heads, then the MLP, each with a residual. `prefix` names its parameters; `x`
//! (invalid: a new Input "x") chains blocks.
AutoShardModel build_auto_shard_transformer(ComputingGraph& graph, size_t batch, size_t seq,
                                            size_t d, size_t heads, size_t d_ff,
                                            const std::string& prefix = "", SymbolVar x = {});

using PlacementRule = std::function<parallel::MeshPlacement(const OperatorNode&)>;
//! Pure data parallelism over every axis: parallel::data_parallel_placement().
using parallel::data_parallel_placement;
//! Data-parallel training on a batch of `rows` rows: activations (dim 0 of `rows`) split over
//! every axis, weight and bias gradients partial sums, parameters and their updates replicated.
PlacementRule data_parallel_training_placement(const parallel::Mesh& mesh, size_t rows);
//! One SGD training step of a model: the updates of every parameter and the loss mean(y * y).
SymbolVarArray training_step(ComputingGraph& graph, const AutoShardModel& model, float lr);
//! Megatron's annotations for AutoSharder::plan_propagated(): the parameters split over
//! `tp_axis` (column- and row-parallel by name), the inputs split by rows over `dp_axis`; the
//! rest (the backward pass and the updates included) propagates.
std::function<std::optional<parallel::MeshPlacement>(const OperatorNode&)>
megatron_annotations(const parallel::Mesh& mesh, const std::string& dp_axis,
                     const std::string& tp_axis);
//! Megatron over `tp_axis`, data parallelism over `dp_axis`. Call the rule on the operators in
//! execution order (it follows the placements it gave their inputs).
PlacementRule megatron_placement(const parallel::Mesh& mesh, const std::string& dp_axis,
                                 const std::string& tp_axis);

} // namespace braid::test
