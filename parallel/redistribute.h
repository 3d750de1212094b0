// Redistribution of a tensor between placements over one mesh axis, as graph operators.
//
// A placement says what each rank of a mesh axis' sub-group holds of a logical tensor L
// (PyTorch DTensor's placements):
//   - Replicate: every rank holds all of L;
//   - Shard(d): rank c (its coordinate along the axis) holds the c-th of n equal slices of L
//     along dim d (n = the axis size);
//   - Partial(op): every rank holds a tensor of L's shape and L is their sum, max or min.
//
// redistribute() turns one rank's local tensor from one placement into another with the
// CollectiveComm helpers, so autodiff and the static plan see ordinary collectives and the
// gradients come from the collectives' own gradient rules:
//
//   from             to          operators
//   Partial(op)      Replicate   all-reduce (sum, max or min)
//   Shard(d)         Replicate   all-gather
//   Partial(sum)     Shard(d)    reduce-scatter
//   Partial(max/min) Shard(d)    all-reduce, then the local slice
//   Replicate        Shard(d)    the local slice, no communication
//   Shard(i)         Shard(j)    all-to-all
//   p                p           nothing (the input itself)
//
// The collectives work on dim 0; a dim d other than 0 is moved to the front with a transpose
// (and reshapes) and back afterwards. Shapes must be static when the graph is built, and the
// dims being split must divide by the axis size (a ValueError otherwise). Every rank of the
// sub-group must call redistribute with the same placements, in the same order relative to
// its other collectives over that axis.
#pragma once

#include "comm/communicator.h"
#include "graph/symbol_var.h"
#include "parallel/mesh.h"

#include <string>
#include <variant>

namespace braid::parallel {

//! Every rank holds the whole tensor.
struct Replicate {
    bool operator==(const Replicate&) const = default;
};
//! Rank c of the axis holds slice c of n along `dim`.
struct Shard {
    int dim = 0;
    bool operator==(const Shard&) const = default;
};
//! How partial values combine (the communicators' reduction).
using comm::ReduceOp;
//! Every rank holds a partial value; the tensor is their reduction by `op`.
struct Partial {
    ReduceOp op = ReduceOp::SUM;
    bool operator==(const Partial&) const = default;
};
//! What one rank of a mesh axis holds of a logical tensor.
using Placement = std::variant<Replicate, Shard, Partial>;

//! "Replicate", "Shard(1)", "Partial(sum)".
std::string placement_name(const Placement& p);

/*!
 * The shape of one rank's local tensor for a logical tensor of `global` shape placed by `p`
 * over an axis of `axis_size` ranks. Throws ValueError when a Shard dim is out of range or
 * does not divide by the axis size.
 */
TensorShape local_shape(const TensorShape& global, const Placement& p, uint32_t axis_size);

/*!
 * This rank's tensor `x`, placed `from` over mesh axis `axis`, redistributed to `to`: the
 * operators of the table above, inserted into x's graph, with collectives from
 * `groups.group(axis)`. Throws ValueError for an unknown axis, a dim out of range, a dim that
 * does not divide by the axis size, a pair that is not in the table (e.g. Replicate to
 * Partial), and GraphError when x's shape is not static.
 */
SymbolVar redistribute(SymbolVar x, const Placement& from, const Placement& to, MeshGroups& groups,
                       const std::string& axis);

} // namespace braid::parallel
