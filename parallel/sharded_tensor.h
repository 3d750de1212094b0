// Sharded host tensors: a logical host tensor split into per-device pieces by a ShardingSpec,
// and the pieces assembled back.
//
// Every device's piece has the same static shape, ShardingSpec::shard_shape(): a Chunked dim
// shrinks by its chunk count, an Unstacked dim disappears. Pieces are listed in device order
// (row-major over the spec's mesh shape); with a Mesh, piece i belongs to mesh.devices()[i].
#pragma once

#include "memory/tensor.h"
#include "parallel/sharding_spec.h"

#include <vector>

namespace braid::parallel {

class Mesh;

/*!
 * A logical tensor held as one piece per device. A plain value: the pieces are tensors that
 * share storage on copy (Tensor's semantics); not thread-safe to modify.
 */
struct ShardedTensor {
    ShardingSpec spec;
    TensorShape global_shape;   //!< the logical tensor's shape
    std::vector<Tensor> shards; //!< one contiguous host tensor per device, in device order

    /*!
     * Splits the host tensor `global` by `spec`: every device gets a contiguous copy of its
     * slice. Throws ValueError for an invalid spec or one that does not fit global's shape,
     * and for a tensor that is not in host memory.
     */
    static ShardedTensor split(const Tensor& global, const ShardingSpec& spec);

    /*!
     * The logical tensor back from the pieces. Devices that hold the same index (replicas)
     * must hold equal bytes when `check_replicas` is set (a ValueError names the two devices
     * and the first element that differs); otherwise the first device of each index wins.
     * Throws ValueError for a wrong number of pieces, or a piece whose shape or dtype is not
     * the expected one.
     */
    Tensor assemble(bool check_replicas = true) const;

    //! The piece of `rank` on `mesh` (whose shape must be the spec's mesh shape).
    const Tensor& shard_of(const Mesh& mesh, uint32_t rank) const;
};

//! The view of `global` that `index` selects (host memory; no copy).
Tensor index_view(const Tensor& global, const ShardIndex& index);

} // namespace braid::parallel
