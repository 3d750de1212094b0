// Device meshes: an N-d array of ranks with a name per axis.
//
// A Mesh lays the ranks of a job out as a row-major array: the rank at coordinates
// (c0, ..., c{k-1}) is devices()[c0 * s1 * ... * s{k-1} + ... + c{k-1}]. A collective "over
// axis x" runs once per sub-group of ranks that differ only in their coordinate along x: a
// collective over axis x of a 2x4 mesh {x=2, y=4} is 4 groups of 2 ranks, one per y. Within a
// sub-group, a rank's collective rank is its coordinate along the axis, so all-gather
// concatenates in axis order.
//
// MeshGroups is one rank's view of a mesh for building graphs: one opr::Group per axis, made
// on first use and reused, so the collectives a rank inserts over one axis get successive keys
// that its peers (building their graphs in the same order) share. Keys differ between
// sub-groups, so the sub-groups of one axis never meet at the group manager.
#pragma once

#include "collective/collective_comm.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace braid::parallel {

/*!
 * An N-d array of ranks (row-major device order) with axis names. An immutable value:
 * thread-safe to read, cheap enough to copy.
 */
class Mesh {
public:
    //! A mesh of shape `shape` over ranks 0 .. prod(shape)-1 in row-major order. Throws
    //! ValueError for an empty shape, an axis of size 0, or names that are empty, repeated or
    //! not one per axis.
    Mesh(std::vector<uint32_t> shape, std::vector<std::string> axis_names);
    //! A mesh over the given ranks, listed in row-major order; they must be distinct and
    //! prod(shape) many.
    Mesh(std::vector<uint32_t> shape, std::vector<std::string> axis_names,
         std::vector<uint32_t> devices);

    size_t ndim() const { return m_shape.size(); }
    //! Number of ranks.
    uint32_t size() const { return uint32_t(m_devices.size()); }
    const std::vector<uint32_t>& shape() const { return m_shape; }
    const std::vector<std::string>& axis_names() const { return m_axis_names; }
    //! The ranks in row-major order.
    const std::vector<uint32_t>& devices() const { return m_devices; }

    //! Position of the axis named `axis`; throws ValueError naming the mesh's axes when unknown.
    size_t axis_index(const std::string& axis) const;
    uint32_t axis_size(const std::string& axis) const { return m_shape[axis_index(axis)]; }
    //! Whether `rank` is one of the mesh's ranks.
    bool contains(uint32_t rank) const;
    //! Row-major position of `rank` in devices(); throws ValueError when not in the mesh.
    uint32_t position_of(uint32_t rank) const;
    //! The coordinates of `rank`; throws ValueError when not in the mesh.
    std::vector<uint32_t> coords_of(uint32_t rank) const;
    //! The rank at `coords`; throws ValueError for coordinates out of range.
    uint32_t rank_at(const std::vector<uint32_t>& coords) const;

    /*!
     * Every sub-group of `axis`: the ranks that differ only along it, each listed in order of
     * their coordinate along the axis. The sub-groups come in row-major order of the other
     * axes' coordinates: for {x=2, y=4}, axis "x" gives {0,4} {1,5} {2,6} {3,7}.
     */
    std::vector<std::vector<uint32_t>> axis_groups(const std::string& axis) const;
    //! The sub-group of `axis` that holds `rank`.
    std::vector<uint32_t> axis_group_of(uint32_t rank, const std::string& axis) const;
    //! "<prefix>/<axis>" followed by the other axes' coordinates of `rank`'s sub-group, e.g.
    //! "mesh/x[y=2]": the same for every rank of one sub-group, different between sub-groups.
    std::string subgroup_key(uint32_t rank, const std::string& axis,
                             const std::string& prefix) const;
    /*!
     * The opr::Group through which `rank` runs collectives over `axis`: size = the axis size,
     * rank = `rank`'s coordinate along it, key prefix = subgroup_key(rank, axis, key_prefix).
     * Each call returns a Group with a fresh key counter; keep it (or use MeshGroups) to insert
     * several collectives.
     */
    opr::Group group(uint32_t rank, const std::string& axis,
                     std::shared_ptr<comm::GroupClient> client,
                     const std::string& backend = "local",
                     const std::string& key_prefix = "mesh") const;

    //! "Mesh{x=2,y=4}".
    std::string to_string() const;
    bool operator==(const Mesh& rhs) const = default;

private:
    //! The coordinates of row-major position `pos`.
    std::vector<uint32_t> coords_at(uint32_t pos) const;

    std::vector<uint32_t> m_shape;
    std::vector<std::string> m_axis_names;
    std::vector<uint32_t> m_devices;
};

/*!
 * A mesh of ranks 0 .. N-1 from text: "dp=2,tp=4" (named axes) or "2x4" (axes named x, y, z,
 * ...; "4" is one axis x). Throws ValueError naming the text for anything else, a size of 0 or a
 * name given twice.
 */
Mesh parse_mesh(const std::string& text);

/*!
 * One rank's collective groups on a mesh, one per axis, made on first use and kept, so the
 * collectives it inserts over one axis get successive keys. Every rank must insert its
 * collectives over each axis in the same order. Not thread-safe: one per rank (per graph
 * builder). The group client must outlive the graphs built with it (the Groups hold it).
 */
class MeshGroups {
public:
    //! `rank` must be in `mesh`. Collectives run on `backend` ("local", "mpi", "nccl") with
    //! keys under `key_prefix`, on `comp_node` (invalid: the input's comp node).
    MeshGroups(Mesh mesh, uint32_t rank, std::shared_ptr<comm::GroupClient> client,
               std::string backend = "local", std::string key_prefix = "mesh",
               CompNode comp_node = {});

    const Mesh& mesh() const { return m_mesh; }
    uint32_t rank() const { return m_rank; }
    //! This rank's coordinate along `axis`.
    uint32_t coord(const std::string& axis) const;
    //! The group of this rank's sub-group along `axis` (throws ValueError for an unknown axis).
    const opr::Group& group(const std::string& axis);

private:
    Mesh m_mesh;
    uint32_t m_rank;
    std::vector<uint32_t> m_coords;
    std::shared_ptr<comm::GroupClient> m_client;
    std::string m_backend, m_key_prefix;
    CompNode m_comp_node;
    std::map<std::string, opr::Group> m_groups;
};

} // namespace braid::parallel
