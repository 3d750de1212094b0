#include "parallel/tensor_parallel.h"

#include "base/error.h"
#include "collective/collective_comm.h"
#include "operators/attention.h"
#include "operators/elemwise.h"
#include "operators/matmul.h"
#include "operators/tensor_manip.h"

namespace braid::parallel {

ShardingSpec column_parallel_spec(const Mesh& mesh, const std::string& axis, size_t ndim) {
    if (ndim == 0)
        BRAID_THROW(ValueError, "column_parallel_spec: a rank-0 value has no dim to split");
    return xmap_sharding_spec(mesh, ndim, {{axis, ndim - 1}});
}

ShardingSpec row_parallel_spec(const Mesh& mesh, const std::string& axis, size_t ndim) {
    if (ndim == 0) BRAID_THROW(ValueError, "row_parallel_spec: a rank-0 value has no dim to split");
    return xmap_sharding_spec(mesh, ndim, {{axis, 0}});
}

ShardingSpec replicated_spec(const Mesh& mesh, size_t ndim) {
    return xmap_sharding_spec(mesh, ndim, {});
}

SymbolVar reduce_from_tensor_parallel(SymbolVar partial, MeshGroups& groups,
                                      const std::string& axis) {
    const opr::Group& group = groups.group(axis);
    auto param = group.param(opr::CollectiveMode::ALL_REDUCE_SUM, partial.dtype());
    // Every rank holds the whole output gradient already: summing it would count it n times.
    param.local_grad = true;
    auto config =
        OperatorConfig::on(group.comp_node.valid() ? group.comp_node : partial.comp_node());
    return opr::CollectiveComm::make(partial, partial.graph(), param, config);
}

SymbolVar column_parallel_linear(SymbolVar x, SymbolVar w, SymbolVar b) {
    auto y = opr::matmul(x, w);
    return b.valid() ? y + b : y;
}

SymbolVar row_parallel_linear(SymbolVar x, SymbolVar w, SymbolVar b, MeshGroups& groups,
                              const std::string& axis) {
    auto y = reduce_from_tensor_parallel(opr::matmul(x, w), groups, axis);
    return b.valid() ? y + b : y;
}

SymbolVar tensor_parallel_mlp(SymbolVar x, const TensorParallelMlp& w, MeshGroups& groups,
                              const std::string& axis) {
    auto h = opr::gelu(column_parallel_linear(x, w.w1, w.b1));
    return row_parallel_linear(h, w.w2, w.b2, groups, axis);
}

SymbolVar tensor_parallel_attention(SymbolVar x, const TensorParallelAttention& w, size_t nr_heads,
                                    bool causal, MeshGroups& groups, const std::string& axis) {
    uint32_t n = groups.mesh().axis_size(axis);
    const auto& xs = x.node()->shape();
    if (xs.ndim() != 2)
        BRAID_THROW(ValueError, "tensor_parallel_attention: x is {}, expected {{seq, d_model}}",
                    xs.to_string());
    size_t d_model = xs[1];
    if (nr_heads == 0 || nr_heads % n != 0 || d_model % nr_heads != 0)
        BRAID_THROW(ValueError,
                    "tensor_parallel_attention: {} heads over {} ranks of axis \"{}\" with "
                    "d_model {}: the heads must divide by the ranks and d_model by the heads",
                    nr_heads, n, axis, d_model);
    long local_heads = long(nr_heads / n), d_head = long(d_model / nr_heads);
    // [S, local_heads * d_head] -> [1, local_heads, S, d_head]
    auto split_heads = [&](SymbolVar t) {
        return opr::dimshuffle(t.reshape(std::vector<long>{1, -1, local_heads, d_head}),
                               {0, 2, 1, 3});
    };
    auto q = split_heads(column_parallel_linear(x, w.wq, w.bq));
    auto k = split_heads(column_parallel_linear(x, w.wk, w.bk));
    auto v = split_heads(column_parallel_linear(x, w.wv, w.bv));
    auto ctx = opr::scaled_dot_product_attention(q, k, v, causal)[0];
    auto merged =
        opr::dimshuffle(ctx, {0, 2, 1, 3}).reshape(std::vector<long>{-1, local_heads * d_head});
    return row_parallel_linear(merged, w.wo, w.bo, groups, axis);
}

} // namespace braid::parallel
