// The sequence layouts of context parallelism: which positions of a sequence each of N ranks
// holds, and helpers that lay a tensor out that way and restore it, on the host and in a graph.
//
// Balanced (zigzag, or head-tail): the sequence is cut into 2N equal chunks and rank r holds
// chunk r followed by chunk 2N−1−r, so that under a causal mask every rank has the same work.
//     S = 8,  N = 2:  rank 0 holds 0 1 6 7,  rank 1 holds 2 3 4 5
//     S = 16, N = 4:  0 1 14 15 | 2 3 12 13 | 4 5 10 11 | 6 7 8 9
// Unbalanced: N equal chunks, rank r holds chunk r.
//
// A sequence that does not split into whole chunks (S % 2N ≠ 0 balanced, S % N ≠ 0 otherwise)
// is a ShapeError naming S, N and the chunk count: balancing is never turned off silently.
// Ring attention (collective/ring_attention.h) expects its q, k and v in these layouts.
#pragma once

#include "graph/symbol_var.h"
#include "memory/tensor.h"

#include <vector>

namespace braid::parallel {

//! The global positions rank `rank` holds, in its local order.
std::vector<size_t> sequence_positions(size_t seq_len, uint32_t nranks, uint32_t rank,
                                       bool load_balance);

//! Every rank's shard of `x` along `dim` (negative counts from the end), in rank order.
std::vector<Tensor> shard_sequence(const Tensor& x, int dim, uint32_t nranks, bool load_balance);
//! The sequence the shards of shard_sequence() came from.
Tensor restore_sequence(const std::vector<Tensor>& shards, int dim, bool load_balance);

//! In a graph: rank `rank`'s shard of `x` along `dim` (static slices of x).
SymbolVar sequence_shard(SymbolVar x, int dim, uint32_t nranks, uint32_t rank, bool load_balance);
//! In a graph: `x` holding every rank's shard, concatenated along `dim` in rank order (what an
//! all-gather of the shards gives), put back in sequence order.
SymbolVar sequence_restore(SymbolVar x, int dim, uint32_t nranks, bool load_balance);
//! The inverse of sequence_restore(): `x` in sequence order, its shards concatenated along
//! `dim` in rank order (block r of N is rank r's shard, as a scatter hands it out).
SymbolVar sequence_layout(SymbolVar x, int dim, uint32_t nranks, bool load_balance);

} // namespace braid::parallel
