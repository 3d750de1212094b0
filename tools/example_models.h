// The example models that make_example_models writes into examples/models/, one builder
// function per model, also used by the serialization tests and the fuzzer's seed corpus.
#pragma once

#include "braid.h"
#include "serialization/serializer.h"

#include <functional>
#include <string>
#include <vector>

namespace braid::examples {

//! One example model file.
struct ExampleModel {
    std::string name;        //!< file stem: "mlp" -> mlp.braid
    std::string description; //!< one line
    //! Builds the model in `graph` and returns its outputs; null while the model needs
    //! operators this build does not have (see `pending`).
    std::function<SymbolVarArray(ComputingGraph& graph)> build;
    //! Open input dims, metadata.
    DumpOptions dump_options;
    //! Why `build` is null.
    std::string pending;
};

//! Every example model, buildable or not, in a fixed order.
std::vector<ExampleModel> example_models();

//! The examples/mlp network: input "x" {batch, in}, relu(x·w1 + b1)·w2 + b2 as "logits";
//! weights uniform in ±0.05 from a fixed seed (the same values as examples/mlp).
SymbolVarArray build_mlp(ComputingGraph& graph, size_t batch = 64, size_t in = 784,
                         size_t hidden = 256, size_t out = 10);

/*!
 * For build_transformer_block(): the block split over `nranks` ranks along the
 * sequence (context parallelism): every rank reads the whole input "x", keeps its share in the
 * load-balanced (zigzag) layout (an all-to-all of the laid-out input hands each rank its block),
 * runs the per-token layers on it and ring attention across the ranks, then all-gathers the
 * shares and restores sequence order, so every rank's "y" is the whole block's output. Same
 * weights as the single-rank block. Keys "<key>:..." with the group manager of `client`.
 */
struct ContextParallelPlan {
    uint32_t nranks = 1;
    uint32_t rank = 0;
    std::shared_ptr<comm::GroupClient> client;
    std::string backend = "local";
    opr::RingRotation rotation = opr::RingRotation::RING;
    std::string key = "cp";
};

//! One pre-norm transformer block on input "x" {seq, d_model} (the sequence dim may change
//! at load time): x1 = x + attn(layer_norm(x)), y = x1 + mlp(layer_norm(x1)) as "y", where
//! attn projects q, k, v (d_model x d_model matmuls with bias), splits them into heads
//! [1, heads, seq, d_model / heads], runs causal scaled dot-product attention, merges the
//! heads and projects the result, and mlp is d_model -> d_ff -> d_model with gelu. Weights
//! from a fixed seed.
SymbolVarArray build_transformer_block(ComputingGraph& graph, size_t seq = 128,
                                       size_t d_model = 256, size_t nr_heads = 4,
                                       size_t d_ff = 1024,
                                       const ContextParallelPlan* context_parallel = nullptr);

//! One data-parallel training step of a small classifier on input "x" float32 {batch, in} and
//! "label" int32 {batch}: logits = relu(x·w1 + b1)·w2 + b2, loss = mean cross-entropy; outputs
//! "loss", "grad_w1", "grad_b1", "grad_w2" and "grad_b2", each summed over the ranks of
//! `group` with ALL_REDUCE_SUM (keys "<prefix>:loss", "<prefix>:grad_w1", ...). Weights
//! uniform in ±0.25 from a fixed seed, so every rank starts from the same ones.
SymbolVarArray build_dp_allreduce(ComputingGraph& graph, const opr::Group& group, size_t batch = 8,
                                  size_t in = 16, size_t hidden = 32, size_t classes = 10);

//! A small graph that uses every operator type in this build: input "x" float32 {4, 6}. Its
//! RemoteSend/RemoteRecv pair (cpu0 to cpu1) is left out without `point_to_point`: the two
//! sides of a transfer cannot share one comp node.
SymbolVarArray build_every_operator(ComputingGraph& graph, bool point_to_point = true);

//! Small models for the fuzzer's seed corpus: (file stem, bytes).
std::vector<std::pair<std::string, std::vector<uint8_t>>> fuzz_seed_models();

} // namespace braid::examples
