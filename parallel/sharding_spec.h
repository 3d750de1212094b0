// ShardingSpec: which slice of a logical array each device of a mesh holds (JAX's semantics).
//
// A spec has two parts:
//   - `sharding`, one entry per array dim: NoSharding, Chunked({c0, ..., ck}) (the dim is cut
//     into c0*...*ck equal slices and adds k sharded axes, c0 the major one) or Unstacked(n)
//     (the dim must be n; device i gets index i and the dim disappears from its piece);
//   - `mesh_mapping`, one entry per mesh axis: ShardedAxis(i) (the mesh axis walks sharded
//     axis i) or Replicated(n) (n devices along this mesh axis hold the same piece).
//
// Sharded axes are numbered in dim order, skipping unsharded dims: for the sharding
// [Unstacked(4), NoSharding, Chunked({2, 3})], sharded axis 0 is the Unstacked dim and
// sharded axes 1 and 2 are the chunks of dim 2 (2 the major one). Every sharded axis is
// mapped to exactly one mesh axis. Devices are ordered row-major over the mesh shape
// (mesh_shape()); devices along a Replicated mesh axis get the same index.
//
// Validation: a spec whose chunks do not divide a dim evenly, that maps a sharded axis twice
// or never, that has Chunked and Unstacked on one dim, or Unstacked(n) on a dim that is not n,
// is a ValueError naming the dim or mesh axis with the value seen and the one expected.
#pragma once

#include "memory/tensor_shape.h"

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace braid::parallel {

class Mesh;

//! A dim that is not split: every device holds all of it.
struct NoSharding {
    bool operator==(const NoSharding&) const = default;
};
//! A dim cut into prod(chunks) equal slices; adds one sharded axis per entry (the first major).
struct Chunked {
    std::vector<uint32_t> chunks;
    Chunked(std::vector<uint32_t> c) : chunks(std::move(c)) {}
    Chunked(std::initializer_list<uint32_t> c) : chunks(c) {}
    //! One level of chunking: Chunked(n) == Chunked({n}).
    explicit Chunked(uint32_t n) : chunks{n} {}
    bool operator==(const Chunked&) const = default;
};
//! A dim of size `size` split into single elements, removed from each device's piece.
struct Unstacked {
    uint32_t size;
    explicit Unstacked(uint32_t n) : size(n) {}
    bool operator==(const Unstacked&) const = default;
};

/*!
 * How one array dim is split. Made from NoSharding, Chunked or Unstacked; at most one of
 * `chunked` and `unstacked` should be set. Code that composes specs (e.g. adding a named
 * axis to a dim) can set both, which validation reports as an error.
 */
struct DimSharding {
    std::optional<Chunked> chunked;
    std::optional<Unstacked> unstacked;

    DimSharding(NoSharding = {}) {}
    DimSharding(Chunked c) : chunked(std::move(c)) {}
    DimSharding(Unstacked u) : unstacked(u) {}

    bool is_sharded() const { return chunked || unstacked; }
    //! "NoSharding", "Chunked([2, 3])", "Unstacked(4)".
    std::string to_string() const;
    bool operator==(const DimSharding&) const = default;
};

//! A mesh axis that walks sharded axis `axis`.
struct ShardedAxis {
    uint32_t axis;
    explicit ShardedAxis(uint32_t a) : axis(a) {}
    bool operator==(const ShardedAxis&) const = default;
};
//! A mesh axis of `replicas` devices that all hold the same piece.
struct Replicated {
    uint32_t replicas;
    explicit Replicated(uint32_t n) : replicas(n) {}
    bool operator==(const Replicated&) const = default;
};
//! What one mesh axis does.
using MeshAssignment = std::variant<ShardedAxis, Replicated>;
//! "ShardedAxis(0)", "Replicated(3)".
std::string to_string(const MeshAssignment& a);

//! One dim of a device's index into the logical array: the full range (":"), a slice
//! [begin, end) or a single position (the dim is removed from the piece).
struct DimIndex {
    enum class Kind : uint8_t { FULL, SLICE, INDEX };
    Kind kind = Kind::FULL;
    size_t begin = 0; //!< first position (the position itself for INDEX)
    size_t end = 0;   //!< one past the last (begin + 1 for INDEX; the dim size for FULL)

    static DimIndex full(size_t size) { return {Kind::FULL, 0, size}; }
    static DimIndex slice(size_t b, size_t e) { return {Kind::SLICE, b, e}; }
    static DimIndex index(size_t i) { return {Kind::INDEX, i, i + 1}; }
    //! ":", "0:2" or "3".
    std::string to_string() const;
    bool operator==(const DimIndex&) const = default;
};

//! A device's index into the logical array, one entry per dim.
using ShardIndex = std::vector<DimIndex>;

/*!
 * A ShardIndex written as in numpy: "[0:2,:]" when every entry is a slice (the piece keeps
 * every dim), "(1,:)" when an entry is a single position, "()" for a rank-0 array.
 */
std::string format_index(const ShardIndex& index);

/*!
 * A sharding spec (see the file comment). A plain value: thread-safe to read. The
 * constructor does not validate; mesh_shape(), indices() and the other queries do, and
 * validate() can be called on its own.
 */
struct ShardingSpec {
    std::vector<DimSharding> sharding;        //!< one per array dim
    std::vector<MeshAssignment> mesh_mapping; //!< one per mesh axis

    ShardingSpec() = default;
    ShardingSpec(std::vector<DimSharding> s, std::vector<MeshAssignment> m)
        : sharding(std::move(s)), mesh_mapping(std::move(m)) {}

    //! The checks that need no array shape: counts >= 1, no dim both Chunked and Unstacked,
    //! every sharded axis mapped exactly once. Throws ValueError.
    void validate() const;
    //! validate() plus the checks against `shape`: one entry per dim, chunks that divide their
    //! dim, Unstacked(n) on dims of size n. Throws ValueError.
    void validate(const TensorShape& shape) const;

    //! Sizes of the sharded axes, in their numbering order.
    std::vector<uint32_t> sharded_axis_sizes() const;
    //! The mesh shape the spec describes: per mesh axis, its sharded axis' size or its replicas.
    std::vector<uint32_t> mesh_shape() const;
    //! Number of devices: the product of mesh_shape().
    uint32_t nr_devices() const;
    //! Throws ValueError when mesh_shape() is not the shape of `mesh`.
    void check_mesh(const Mesh& mesh) const;

    //! The index of every device into an array of `shape`, in device order (row-major over
    //! mesh_shape()).
    std::vector<ShardIndex> indices(const TensorShape& shape) const;
    //! The shape of every device's piece of an array of `shape` (the same on every device).
    TensorShape shard_shape(const TensorShape& shape) const;

    //! "ShardingSpec([Chunked([2]), NoSharding], [ShardedAxis(0)])".
    std::string to_string() const;
    bool operator==(const ShardingSpec&) const = default;
};

/*!
 * The spec of an argument or result of a pmap over `axis_size` devices (JAX's
 * `_pmap_sharding_spec` without inner partitions). `ndim` is the rank of the value inside the
 * map. With `map_axis`, the value outside the map has an extra dim of size `axis_size` at
 * `map_axis` (0..ndim), Unstacked over the first mesh axis; without it the value is
 * replicated over that axis. A `replication` above 1 adds a Replicated(replication) mesh axis
 * after it (the devices of inner maps). Throws ValueError for a map_axis above ndim or a zero
 * size.
 */
ShardingSpec pmap_sharding_spec(uint32_t axis_size, size_t ndim, std::optional<size_t> map_axis,
                                uint32_t replication = 1);

/*!
 * The spec of a value of rank `ndim` laid out over `mesh` by named axes (JAX's
 * `mesh_sharding_specs`): each (mesh axis name, array dim) pair chunks that dim over that mesh
 * axis; the other mesh axes replicate. Pairs on one dim chunk it in the order given, the first
 * major; sharded axes are numbered in dim order. Throws ValueError for an unknown mesh axis, a
 * mesh axis named twice, or a dim out of range.
 */
ShardingSpec xmap_sharding_spec(const Mesh& mesh, size_t ndim,
                                const std::vector<std::pair<std::string, size_t>>& axes);

} // namespace braid::parallel
