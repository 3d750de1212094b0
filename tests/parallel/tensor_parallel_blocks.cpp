#include "tensor_parallel_blocks.h"

#include "checker.h"
#include "parallel/tensor_parallel.h"

#include "braid.h"

#include <fmt/format.h>

#include <cstring>
#include <random>

namespace braid::test {
namespace {

using parallel::column_parallel_spec;
using parallel::Mesh;
using parallel::PmapArg;
using parallel::replicated_spec;
using parallel::row_parallel_spec;

//! Rank r's block of `chunk` along `axis`.
SymbolVar block_of(SymbolVar t, int axis, long chunk, uint32_t r) {
    return opr::subtensor(t, {opr::AxisIndex::slice(axis, r * chunk, (r + 1) * chunk)});
}

//! sum over r of (h's r-th column block) (w's r-th row block), added in rank order.
SymbolVar row_blocks_in_rank_order(SymbolVar h, SymbolVar w, uint32_t n) {
    long chunk = long(w.node()->shape()[0] / n);
    SymbolVar y;
    for (uint32_t r = 0; r < n; ++r) {
        auto part = opr::matmul(block_of(h, 1, chunk, r), block_of(w, 0, chunk, r));
        y = r == 0 ? part : y + part;
    }
    return y;
}

} // namespace

TensorParallelBlock deterministic_tp_mlp(uint32_t n) {
    const size_t tokens = 8, d = 16, f = 12 * n;
    Mesh mesh({n}, {"tp"});
    TensorParallelBlock b;
    b.name = "mlp";
    b.nr_ranks = n;
    b.args = {{"x", {tokens, d}, dtype::Float32(), replicated_spec(mesh, 2)},
              {"w1", {d, f}, dtype::Float32(), column_parallel_spec(mesh, "tp", 2)},
              {"b1", {f}, dtype::Float32(), column_parallel_spec(mesh, "tp", 1)},
              {"w2", {f, d}, dtype::Float32(), row_parallel_spec(mesh, "tp", 2)},
              {"b2", {d}, dtype::Float32(), replicated_spec(mesh, 1)}};
    b.fn = [](parallel::SpmdContext& ctx, const SymbolVarArray& in) {
        return SymbolVarArray{
            parallel::tensor_parallel_mlp(in[0], {in[1], in[2], in[3], in[4]}, ctx.groups(), "tp")};
    };
    b.same_split = [n](const SymbolVarArray& in) {
        auto h = opr::gelu(opr::matmul(in[0], in[1]) + in[2]);
        return row_blocks_in_rank_order(h, in[3], n) + in[4];
    };
    return b;
}

TensorParallelBlock deterministic_tp_attention(uint32_t n) {
    const long tokens = 8, heads = 2 * long(n), d_head = 4, d = heads * d_head;
    Mesh mesh({n}, {"tp"});
    TensorParallelBlock b;
    b.name = "attention";
    b.nr_ranks = n;
    TensorShape wshape{size_t(d), size_t(d)}, bshape{size_t(d)};
    b.args = {{"x", {size_t(tokens), size_t(d)}, dtype::Float32(), replicated_spec(mesh, 2)}};
    for (const char* w : {"q", "k", "v"}) {
        b.args.push_back(
            {fmt::format("w{}", w), wshape, dtype::Float32(), column_parallel_spec(mesh, "tp", 2)});
        b.args.push_back(
            {fmt::format("b{}", w), bshape, dtype::Float32(), column_parallel_spec(mesh, "tp", 1)});
    }
    b.args.push_back({"wo", wshape, dtype::Float32(), row_parallel_spec(mesh, "tp", 2)});
    b.args.push_back({"bo", bshape, dtype::Float32(), replicated_spec(mesh, 1)});
    b.fn = [heads](parallel::SpmdContext& ctx, const SymbolVarArray& in) {
        parallel::TensorParallelAttention w{in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8]};
        return SymbolVarArray{parallel::tensor_parallel_attention(in[0], w, size_t(heads),
                                                                  /*causal=*/true, ctx.groups(),
                                                                  "tp")};
    };
    b.same_split = [=](const SymbolVarArray& in) {
        auto split_heads = [&](SymbolVar t) {
            return opr::dimshuffle(t.reshape(std::vector<long>{1, -1, heads, d_head}),
                                   {0, 2, 1, 3});
        };
        auto q = split_heads(opr::matmul(in[0], in[1]) + in[2]);
        auto k = split_heads(opr::matmul(in[0], in[3]) + in[4]);
        auto v = split_heads(opr::matmul(in[0], in[5]) + in[6]);
        auto ctx = opr::scaled_dot_product_attention(q, k, v, true)[0];
        auto merged = opr::dimshuffle(ctx, {0, 2, 1, 3}).reshape(std::vector<long>{-1, d});
        return row_blocks_in_rank_order(merged, in[7], n) + in[8];
    };
    return b;
}

std::vector<Tensor> tp_block_values(const TensorParallelBlock& block, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<Tensor> values;
    for (auto& a : block.args)
        values.push_back(random_tensor(a.global_shape, a.dtype, rng, -1.0, 1.0));
    return values;
}

Tensor tp_block_same_split(const TensorParallelBlock& block, const std::vector<Tensor>& values) {
    DeterministicScope mode(true);
    auto g = ComputingGraph::make();
    SymbolVarArray in;
    for (auto& a : block.args) in.push_back(opr::Input::make(*g, a.name, a.dtype, a.global_shape));
    auto exec = g->compile({block.same_split(in)});
    for (size_t i = 0; i < values.size(); ++i) exec->feed(block.args[i].name, values[i]);
    exec->run();
    return exec->output(0).copy();
}

std::string bitwise_difference(const Tensor& got, const Tensor& want) {
    if (got.shape() != want.shape() || got.dtype() != want.dtype())
        return fmt::format("shape {} {} vs {} {}", got.shape().to_string(), got.dtype().name(),
                           want.shape().to_string(), want.dtype().name());
    Tensor a = got.contiguous(), b = want.contiguous();
    if (std::memcmp(a.raw_ptr(), b.raw_ptr(), b.nr_bytes()) == 0) return "";
    size_t n = b.shape().total_nr_elems(), size = b.nr_bytes() / n;
    for (size_t e = 0; e < n; ++e)
        if (std::memcmp(a.raw_ptr() + e * size, b.raw_ptr() + e * size, size) != 0)
            return fmt::format("element {}: {:.9g} vs {:.9g}", e, a.at(e), b.at(e));
    return "bits differ";
}

} // namespace braid::test
