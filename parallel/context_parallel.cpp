#include "parallel/context_parallel.h"

#include "base/error.h"
#include "operators/concat_split.h"

#include <cstring>

namespace braid::parallel {

namespace {

//! The chunks of the sequence in rank order: rank r's chunks are entries [r·c, (r+1)·c) for
//! c = 2 (balanced) or 1.
std::vector<size_t> chunk_order(uint32_t nranks, bool load_balance) {
    std::vector<size_t> order;
    for (uint32_t r = 0; r < nranks; ++r) {
        order.push_back(r);
        if (load_balance) order.push_back(2 * size_t(nranks) - 1 - r);
    }
    return order;
}

//! The length of one chunk; ShapeError unless the sequence splits into whole chunks.
size_t chunk_len(size_t seq_len, uint32_t nranks, bool load_balance, const char* what) {
    if (nranks == 0) BRAID_THROW(ValueError, "{}: the number of ranks must be at least 1", what);
    size_t chunks = load_balance ? 2 * size_t(nranks) : nranks;
    if (seq_len % chunks != 0)
        BRAID_THROW(ShapeError,
                    "{}: a sequence of {} positions does not split into {} equal chunks ({} for "
                    "{} ranks{}); pad it to a multiple of {}",
                    what, seq_len, chunks, load_balance ? "2N" : "N", nranks,
                    load_balance ? ", load balanced" : "", chunks);
    return seq_len / chunks;
}

size_t axis_of(int dim, size_t ndim, const char* what) {
    long d = dim < 0 ? long(ndim) + dim : dim;
    if (d < 0 || size_t(d) >= ndim)
        BRAID_THROW(ShapeError, "{}: dim {} is out of range for a {}-D tensor", what, dim, ndim);
    return size_t(d);
}

//! Copies chunk `from` of `src` (chunks of `len` positions along the middle of [outer, S, inner])
//! to chunk `to` of `dst`.
void copy_chunk(const Tensor& src, size_t from, Tensor& dst, size_t to, size_t len, size_t axis) {
    const auto& s = src.shape();
    size_t outer = 1, inner = src.dtype().size();
    for (size_t i = 0; i < axis; ++i) outer *= s[i];
    for (size_t i = axis + 1; i < s.ndim(); ++i) inner *= s[i];
    size_t src_seq = s[axis], dst_seq = dst.shape()[axis];
    const uint8_t* sp = src.raw_ptr();
    uint8_t* dp = dst.raw_ptr();
    for (size_t o = 0; o < outer; ++o)
        std::memcpy(dp + (o * dst_seq + to * len) * inner, sp + (o * src_seq + from * len) * inner,
                    len * inner);
}

} // namespace

std::vector<size_t> sequence_positions(size_t seq_len, uint32_t nranks, uint32_t rank,
                                       bool load_balance) {
    size_t len = chunk_len(seq_len, nranks, load_balance, "sequence_positions");
    if (rank >= nranks)
        BRAID_THROW(ValueError, "sequence_positions: rank {} is not in 0..{}", rank, nranks - 1);
    auto order = chunk_order(nranks, load_balance);
    size_t per_rank = load_balance ? 2 : 1;
    std::vector<size_t> positions;
    for (size_t c = rank * per_rank; c < (rank + 1) * per_rank; ++c)
        for (size_t i = 0; i < len; ++i) positions.push_back(order[c] * len + i);
    return positions;
}

std::vector<Tensor> shard_sequence(const Tensor& x, int dim, uint32_t nranks, bool load_balance) {
    Tensor src = x.contiguous();
    size_t axis = axis_of(dim, src.shape().ndim(), "shard_sequence");
    size_t len = chunk_len(src.shape()[axis], nranks, load_balance, "shard_sequence");
    auto order = chunk_order(nranks, load_balance);
    size_t per_rank = load_balance ? 2 : 1;
    std::vector<Tensor> shards;
    for (uint32_t r = 0; r < nranks; ++r) {
        TensorShape shape = src.shape();
        shape[axis] = len * per_rank;
        Tensor shard(shape, src.dtype());
        for (size_t j = 0; j < per_rank; ++j)
            copy_chunk(src, order[r * per_rank + j], shard, j, len, axis);
        shards.push_back(std::move(shard));
    }
    return shards;
}

Tensor restore_sequence(const std::vector<Tensor>& shards, int dim, bool load_balance) {
    if (shards.empty()) BRAID_THROW(ValueError, "restore_sequence: no shards");
    uint32_t nranks = uint32_t(shards.size());
    const TensorShape& first = shards[0].shape();
    size_t axis = axis_of(dim, first.ndim(), "restore_sequence");
    for (uint32_t r = 1; r < nranks; ++r)
        if (shards[r].shape() != first || shards[r].dtype() != shards[0].dtype())
            BRAID_THROW(ShapeError, "restore_sequence: shard {} is {} {}, shard 0 is {} {}", r,
                        shards[r].dtype().name(), shards[r].shape().to_string(),
                        shards[0].dtype().name(), first.to_string());
    size_t per_rank = load_balance ? 2 : 1;
    if (first[axis] % per_rank != 0)
        BRAID_THROW(ShapeError,
                    "restore_sequence: a balanced shard holds two chunks, but dim {} of {} is odd",
                    dim, first.to_string());
    size_t len = first[axis] / per_rank;
    TensorShape shape = first;
    shape[axis] = first[axis] * nranks;
    Tensor out(shape, shards[0].dtype());
    auto order = chunk_order(nranks, load_balance);
    for (uint32_t r = 0; r < nranks; ++r) {
        Tensor shard = shards[r].contiguous();
        for (size_t j = 0; j < per_rank; ++j)
            copy_chunk(shard, j, out, order[r * per_rank + j], len, axis);
    }
    return out;
}

SymbolVar sequence_shard(SymbolVar x, int dim, uint32_t nranks, uint32_t rank, bool load_balance) {
    if (rank >= nranks)
        BRAID_THROW(ValueError, "sequence_shard: rank {} is not in 0..{}", rank, nranks - 1);
    size_t axis = axis_of(dim, x.shape().ndim(), "sequence_shard");
    size_t chunks = load_balance ? 2 * size_t(nranks) : nranks;
    chunk_len(x.shape()[axis], nranks, load_balance, "sequence_shard");
    auto parts = opr::split(x, int(axis), chunks);
    if (!load_balance) return parts[rank];
    return opr::concat({parts[rank], parts[2 * size_t(nranks) - 1 - rank]}, int(axis));
}

SymbolVar sequence_restore(SymbolVar x, int dim, uint32_t nranks, bool load_balance) {
    size_t axis = axis_of(dim, x.shape().ndim(), "sequence_restore");
    chunk_len(x.shape()[axis], nranks, load_balance, "sequence_restore");
    auto order = chunk_order(nranks, load_balance);
    auto parts = opr::split(x, int(axis), order.size());
    SymbolVarArray natural(order.size());
    for (size_t j = 0; j < order.size(); ++j) natural[order[j]] = parts[j];
    return opr::concat(natural, int(axis));
}

SymbolVar sequence_layout(SymbolVar x, int dim, uint32_t nranks, bool load_balance) {
    size_t axis = axis_of(dim, x.shape().ndim(), "sequence_layout");
    chunk_len(x.shape()[axis], nranks, load_balance, "sequence_layout");
    auto order = chunk_order(nranks, load_balance);
    auto parts = opr::split(x, int(axis), order.size());
    SymbolVarArray laid_out;
    for (size_t c : order) laid_out.push_back(parts[c]);
    return opr::concat(laid_out, int(axis));
}

} // namespace braid::parallel
