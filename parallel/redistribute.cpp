#include "parallel/redistribute.h"

#include "base/error.h"
#include "collective/collective_comm.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

namespace braid::parallel {

namespace {

//! The permutation that moves `dim` to the front, the others keeping their order.
std::vector<int> to_front(int dim, size_t ndim) {
    std::vector<int> perm{dim};
    for (int d = 0; d < int(ndim); ++d)
        if (d != dim) perm.push_back(d);
    return perm;
}

//! The inverse of to_front(dim, ndim): dim 0 goes back to position `dim`.
std::vector<int> from_front(int dim, size_t ndim) {
    std::vector<int> perm;
    for (int d = 1; d <= dim; ++d) perm.push_back(d);
    perm.push_back(0);
    for (int d = dim + 1; d < int(ndim); ++d) perm.push_back(d);
    return perm;
}

//! `collective` applied along dim `dim` of x: x's dim moved to the front, the collective
//! (which works on dim 0), and the dim moved back.
template <typename Fn> SymbolVar along_dim(SymbolVar x, int dim, Fn&& collective) {
    if (dim == 0) return collective(x);
    size_t ndim = x.shape().ndim();
    return opr::transpose(collective(opr::transpose(x, to_front(dim, ndim))),
                          from_front(dim, ndim));
}

struct Context {
    std::string what; //!< "redistribute Shard(1) -> Replicate over mesh axis "x" (size 3)"
    TensorShape shape;
    uint32_t n;
    uint32_t coord;
};

int checked_dim(const Context& c, int dim, const char* role) {
    if (dim < 0 || size_t(dim) >= c.shape.ndim())
        BRAID_THROW(ValueError, "{}: the {} dim is {}; x has shape {}, expected 0..{}", c.what,
                    role, dim, c.shape.to_string(), int64_t(c.shape.ndim()) - 1);
    return dim;
}

void check_divisible(const Context& c, int dim) {
    if (c.shape[dim] % c.n != 0)
        BRAID_THROW(ValueError,
                    "{}: dim {} of x (shape {}) is {}, which does not split evenly over {} "
                    "ranks; expected a multiple of {}",
                    c.what, dim, c.shape.to_string(), c.shape[dim], c.n, c.n);
}

//! This rank's slice of x along `dim`.
SymbolVar local_slice(SymbolVar x, const Context& c, int dim) {
    long len = long(c.shape[dim] / c.n);
    return opr::subtensor(
        x, {opr::AxisIndex::slice(dim, long(c.coord) * len, long(c.coord + 1) * len)});
}

SymbolVar all_reduce(SymbolVar x, ReduceOp op, const opr::Group& g) {
    switch (op) {
    case ReduceOp::SUM:
        return opr::all_reduce_sum(x, g);
    case ReduceOp::MAX:
        return opr::all_reduce_max(x, g);
    case ReduceOp::MIN:
        return opr::all_reduce_min(x, g);
    }
    BRAID_THROW(InternalError, "unknown reduce op {}", int(op));
}

//! Shard(from) -> Shard(to) through one all-to-all: split dim `to` into n blocks, send block k
//! to rank k, and concatenate what arrives along dim `from` in rank order.
SymbolVar shard_to_shard(SymbolVar x, const Context& c, int from, int to, const opr::Group& g) {
    size_t ndim = c.shape.ndim();
    long n = long(c.n);
    // [.., n, D_to/n, ..]: the block number is a new axis at position `to`.
    std::vector<long> split;
    for (size_t d = 0; d < ndim; ++d) {
        if (int(d) == to) {
            split.push_back(n);
            split.push_back(long(c.shape[d]) / n);
        } else {
            split.push_back(long(c.shape[d]));
        }
    }
    SymbolVar blocks = opr::transpose(x.reshape(split), to_front(to, ndim + 1));
    // blocks: [n, rest...] where rest is x's shape with dim `to` divided by n. After the
    // all-to-all, block k holds rank k's slice of dim `from`.
    SymbolVar received = opr::all_to_all(blocks, g);
    // Move the block axis next to dim `from` (as its major part) and merge the two.
    SymbolVar merged = opr::transpose(received, from_front(from, ndim + 1));
    std::vector<long> out;
    for (size_t d = 0; d < ndim; ++d) {
        long size = long(c.shape[d]);
        if (int(d) == to) size /= n;
        if (int(d) == from) size *= n;
        out.push_back(size);
    }
    return merged.reshape(out);
}

} // namespace

std::string placement_name(const Placement& p) {
    if (std::holds_alternative<Replicate>(p)) return "Replicate";
    if (auto* s = std::get_if<Shard>(&p)) return fmt::format("Shard({})", s->dim);
    return fmt::format("Partial({})", comm::reduce_op_name(std::get<Partial>(p).op));
}

TensorShape local_shape(const TensorShape& global, const Placement& p, uint32_t axis_size) {
    auto* s = std::get_if<Shard>(&p);
    if (!s) return global;
    if (axis_size == 0) BRAID_THROW(ValueError, "local_shape: axis size 0; expected 1 or more");
    if (s->dim < 0 || size_t(s->dim) >= global.ndim())
        BRAID_THROW(ValueError, "local_shape: Shard({}) of shape {}; expected a dim in 0..{}",
                    s->dim, global.to_string(), int64_t(global.ndim()) - 1);
    if (global[s->dim] % axis_size != 0)
        BRAID_THROW(ValueError,
                    "local_shape: dim {} of shape {} is {}, which does not split evenly over {} "
                    "ranks; expected a multiple of {}",
                    s->dim, global.to_string(), global[s->dim], axis_size, axis_size);
    TensorShape local = global;
    local[s->dim] /= axis_size;
    return local;
}

SymbolVar redistribute(SymbolVar x, const Placement& from, const Placement& to, MeshGroups& groups,
                       const std::string& axis) {
    const Mesh& mesh = groups.mesh();
    Context c;
    c.n = mesh.axis_size(axis);
    c.coord = groups.coord(axis);
    c.what = fmt::format("redistribute {} -> {} over axis \"{}\" (size {}) of {}",
                         placement_name(from), placement_name(to), axis, c.n, mesh.to_string());
    if (!x.valid()) BRAID_THROW(GraphError, "{}: the input var is invalid", c.what);
    if (!x.node()->shape_known())
        BRAID_THROW(GraphError,
                    "{}: the shape of \"{}\" is not known while the graph is built; "
                    "redistribution needs static shapes",
                    c.what, x.name());
    c.shape = x.shape();
    if (auto* s = std::get_if<Shard>(&from)) checked_dim(c, s->dim, "source");
    if (auto* s = std::get_if<Shard>(&to)) checked_dim(c, s->dim, "target");
    if (from == to) return x;

    const opr::Group& g = groups.group(axis);
    if (std::holds_alternative<Replicate>(to)) {
        if (auto* p = std::get_if<Partial>(&from)) return all_reduce(x, p->op, g);
        if (auto* s = std::get_if<Shard>(&from))
            return along_dim(x, s->dim, [&](SymbolVar v) { return opr::all_gather(v, g); });
    }
    if (auto* t = std::get_if<Shard>(&to)) {
        int dim = t->dim;
        if (std::holds_alternative<Replicate>(from)) {
            check_divisible(c, dim);
            return local_slice(x, c, dim);
        }
        if (auto* p = std::get_if<Partial>(&from)) {
            check_divisible(c, dim);
            if (p->op == ReduceOp::SUM)
                return along_dim(x, dim,
                                 [&](SymbolVar v) { return opr::reduce_scatter_sum(v, g); });
            // There is no reduce-scatter for max and min: reduce everywhere, keep one slice.
            return local_slice(all_reduce(x, p->op, g), c, dim);
        }
        if (auto* s = std::get_if<Shard>(&from)) {
            check_divisible(c, dim);
            return shard_to_shard(x, c, s->dim, dim, g);
        }
    }
    BRAID_THROW(ValueError,
                "{}: no redistribution from {} to {}; supported: Partial -> Replicate, "
                "Shard -> Replicate, Partial -> Shard, Replicate -> Shard, Shard -> Shard, and "
                "any placement to itself",
                c.what, placement_name(from), placement_name(to));
}

} // namespace braid::parallel
