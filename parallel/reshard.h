// Placements over every axis of a mesh, and resharding between them as a list of one-axis
// redistributions (parallel/redistribute.h).
//
// A MeshPlacement holds one Placement per mesh axis. Several axes may shard one dim: the dim is
// cut by the first such axis into its chunks, each chunk by the next axis, and so on (the
// earlier axis is the major one, as in ShardingSpec's Chunked). That order makes resharding
// order-sensitive: a dim may be gathered over an axis only while no later axis shards it, and
// sliced over an axis only while no later axis shards it. reshard_steps() orders the steps so:
//   1. gathers and all-to-alls, from the last axis to the first (an axis being un-sharded takes
//      the later axes that shard the same dim with it; they are sliced again in step 3);
//   2. partial sums resolved, by reduce-scatter where the target shards the dim and the order
//      allows it, else by all-reduce;
//   3. slices of replicated dims, from the first axis to the last.
// The cost model and the lowering both use these steps, so what the planner prices is what runs.
#pragma once

#include "parallel/redistribute.h"
#include "parallel/sharding_spec.h"

#include <string>
#include <vector>

namespace braid::parallel {

//! One Placement per mesh axis.
using MeshPlacement = std::vector<Placement>;

//! Every axis Replicate.
MeshPlacement replicated_placement(size_t mesh_ndim);
//! "[Shard(0), Replicate]".
std::string mesh_placement_name(const MeshPlacement& p);
//! The local shape of a tensor of `global` shape under `p` on a mesh of `mesh_shape`. Throws
//! ValueError when a sharded dim does not divide by its axes' sizes.
TensorShape mesh_local_shape(const TensorShape& global, const MeshPlacement& p,
                             const std::vector<uint32_t>& mesh_shape);
//! Whether every sharded dim of `global` divides by the sizes of the axes that shard it.
bool placement_fits(const TensorShape& global, const MeshPlacement& p,
                    const std::vector<uint32_t>& mesh_shape);
/*!
 * The ShardingSpec of a tensor of rank `ndim` under `p` (no Partial): dims sharded by their
 * axes in axis order, other axes Replicated. Throws ValueError for a Partial axis.
 */
ShardingSpec mesh_placement_spec(size_t ndim, const MeshPlacement& p,
                                 const std::vector<uint32_t>& mesh_shape);

//! One redistribution over one mesh axis.
struct ReshardStep {
    size_t axis = 0;
    Placement from, to;
    TensorShape local_before; //!< the local shape the step receives
    TensorShape local_after;  //!< the local shape it returns
};

/*!
 * The redistributions that turn a tensor of `global` shape placed `from` into `to` (see the
 * file comment), empty when they are equal. Throws ValueError for a target with Partial on an
 * axis where the source is not Partial, and for placements that do not fit the shape.
 */
std::vector<ReshardStep> reshard_steps(const TensorShape& global, const MeshPlacement& from,
                                       const MeshPlacement& to,
                                       const std::vector<uint32_t>& mesh_shape);

//! This rank's tensor `x` taken through `steps` (by redistribute() over each step's axis).
SymbolVar reshard(SymbolVar x, const std::vector<ReshardStep>& steps, MeshGroups& groups);

} // namespace braid::parallel
