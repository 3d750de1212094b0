// Tensor parallelism (Megatron-LM): a transformer's MLP and attention blocks with their
// weights split over one mesh axis, as sharding specs, so that each block needs one
// all-reduce forward and none backward besides the input's.
//
// A column-parallel linear layer y = x W + b holds W {in, out} split by columns (and b by
// its one dim): rank c of the axis computes the c-th slice of y's last dim from the
// replicated x, without communication. A row-parallel layer holds W split by rows: its input
// is the previous layer's column slice, each rank computes a partial y, and the partials are
// summed over the axis (Megatron's g: all-reduce forward, identity backward, since every rank
// already holds the whole output gradient); b is replicated and added once, after the sum.
//
//   MLP:        y = gelu(x W1 + b1) W2 + b2    W1, b1 column-parallel; W2 row-parallel
//   attention:  q, k, v = x Wq + bq, ...       column-parallel, whole heads per rank
//               y = attention(q, k, v) Wo + bo Wo row-parallel
//
// The gradients of the weights come out as their shards (dW1 split like W1, ...). The
// gradient of the block's input x on one rank is partial (its heads' or its columns' part):
// psum it over the axis for the whole gradient (Megatron's f in the backward pass).
#pragma once

#include "graph/symbol_var.h"
#include "parallel/mesh.h"
#include "parallel/sharding_spec.h"

#include <string>

namespace braid::parallel {

//! The spec of a weight split by its last dim over `axis` (column-parallel W, or its bias
//! with ndim 1), replicated over the other mesh axes.
ShardingSpec column_parallel_spec(const Mesh& mesh, const std::string& axis, size_t ndim = 2);
//! The spec of a weight split by its first dim over `axis` (row-parallel W).
ShardingSpec row_parallel_spec(const Mesh& mesh, const std::string& axis, size_t ndim = 2);
//! The spec of a value every rank holds whole.
ShardingSpec replicated_spec(const Mesh& mesh, size_t ndim);

//! Megatron's g: the sum over this rank's sub-group of `axis` whose backward is the identity.
SymbolVar reduce_from_tensor_parallel(SymbolVar partial, MeshGroups& groups,
                                      const std::string& axis);

//! x W + b with W's columns split over the axis: this rank's column slice of the output. `b`
//! may be invalid (no bias).
SymbolVar column_parallel_linear(SymbolVar x, SymbolVar w, SymbolVar b);
//! The whole x W + b from this rank's column slice x of the input and its rows of W; `b`
//! (replicated) may be invalid.
SymbolVar row_parallel_linear(SymbolVar x, SymbolVar w, SymbolVar b, MeshGroups& groups,
                              const std::string& axis);

//! One rank's MLP weights: w1 {d, f/n}, b1 {f/n}, w2 {f/n, d}, b2 {d} (replicated).
struct TensorParallelMlp {
    SymbolVar w1, b1, w2, b2;
};
//! gelu(x W1 + b1) W2 + b2 for a replicated x {tokens, d}; the result is replicated.
SymbolVar tensor_parallel_mlp(SymbolVar x, const TensorParallelMlp& w, MeshGroups& groups,
                              const std::string& axis);

//! One rank's attention weights: wq, wk, wv {d, d/n} and their biases {d/n} (the columns of
//! heads c*H/n .. (c+1)*H/n - 1), wo {d/n, d}, bo {d} (replicated).
struct TensorParallelAttention {
    SymbolVar wq, bq, wk, bk, wv, bv, wo, bo;
};
/*!
 * Multi-head self-attention over a replicated x {seq, d} with `nr_heads` heads in all, nr_heads
 * / n of them on each rank (n = the axis size); the result {seq, d} is replicated. Throws
 * ValueError when the heads do not divide by n or d by the heads.
 */
SymbolVar tensor_parallel_attention(SymbolVar x, const TensorParallelAttention& w, size_t nr_heads,
                                    bool causal, MeshGroups& groups, const std::string& axis);

} // namespace braid::parallel
