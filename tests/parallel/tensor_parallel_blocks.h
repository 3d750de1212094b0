// The Megatron MLP and attention blocks of the deterministic tensor-parallel tests, shared by
// the local-backend tests (tests/parallel) and the gloo tests (tests/comm/gloo, one rank per
// process): each block's arguments on a 1-D "tp" mesh of n ranks, the per-rank function, and
// the one-device graph with the same split (the row-parallel product's row blocks multiplied
// one by one and added in rank order), which deterministic mode must match bitwise
// (docs/determinism.md).
#pragma once

#include "parallel/pmap.h"

#include <string>
#include <vector>

namespace braid::test {

struct TensorParallelBlock {
    std::string name;
    uint32_t nr_ranks = 1;
    std::vector<parallel::PmapArg> args; //!< args[0] is x {tokens, d}, replicated
    parallel::SpmdFunction fn;           //!< returns {y}, replicated
    //! The one-device graph of the same split, on inputs named as the args.
    std::function<SymbolVar(const SymbolVarArray& in)> same_split;
};

//! gelu(x W1 + b1) W2 + b2, W1 split by columns over n ranks, W2 by rows.
TensorParallelBlock deterministic_tp_mlp(uint32_t n);
//! Causal self-attention with 2n heads (2 per rank) of 4, Wq/Wk/Wv split by columns, Wo by rows.
TensorParallelBlock deterministic_tp_attention(uint32_t n);

//! Random global values of the block's args, from `seed`.
std::vector<Tensor> tp_block_values(const TensorParallelBlock& block, unsigned seed);
//! The block's output on one device (its same-split graph) in deterministic mode.
Tensor tp_block_same_split(const TensorParallelBlock& block, const std::vector<Tensor>& values);
//! "" when `got` has the bits of `want`, else what differs (the first element and both values).
std::string bitwise_difference(const Tensor& got, const Tensor& want);

} // namespace braid::test
