#include "parallel/sharding_spec.h"

#include "base/error.h"
#include "parallel/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace braid::parallel {

std::string DimSharding::to_string() const {
    if (chunked && unstacked)
        return fmt::format("Chunked([{}]) and Unstacked({})", fmt::join(chunked->chunks, ", "),
                           unstacked->size);
    if (chunked) return fmt::format("Chunked([{}])", fmt::join(chunked->chunks, ", "));
    if (unstacked) return fmt::format("Unstacked({})", unstacked->size);
    return "NoSharding";
}

std::string to_string(const MeshAssignment& a) {
    if (auto* s = std::get_if<ShardedAxis>(&a)) return fmt::format("ShardedAxis({})", s->axis);
    return fmt::format("Replicated({})", std::get<Replicated>(a).replicas);
}

std::string DimIndex::to_string() const {
    switch (kind) {
    case Kind::FULL:
        return ":";
    case Kind::SLICE:
        return fmt::format("{}:{}", begin, end);
    case Kind::INDEX:
        return fmt::format("{}", begin);
    }
    return "?";
}

std::string format_index(const ShardIndex& index) {
    std::vector<std::string> parts;
    bool has_position = index.empty();
    for (const auto& d : index) {
        parts.push_back(d.to_string());
        has_position |= d.kind == DimIndex::Kind::INDEX;
    }
    auto body = fmt::format("{}", fmt::join(parts, ","));
    return has_position ? "(" + body + ")" : "[" + body + "]";
}

std::string ShardingSpec::to_string() const {
    std::vector<std::string> dims, axes;
    for (const auto& d : sharding) dims.push_back(d.to_string());
    for (const auto& a : mesh_mapping) axes.push_back(parallel::to_string(a));
    return fmt::format("ShardingSpec([{}], [{}])", fmt::join(dims, ", "), fmt::join(axes, ", "));
}

std::vector<uint32_t> ShardingSpec::sharded_axis_sizes() const {
    std::vector<uint32_t> sizes;
    for (const auto& d : sharding) {
        if (d.unstacked) sizes.push_back(d.unstacked->size);
        if (d.chunked)
            sizes.insert(sizes.end(), d.chunked->chunks.begin(), d.chunked->chunks.end());
    }
    return sizes;
}

void ShardingSpec::validate() const {
    for (size_t dim = 0; dim < sharding.size(); ++dim) {
        const auto& d = sharding[dim];
        if (d.chunked && d.unstacked)
            BRAID_THROW(ValueError,
                        "{}: dim {} is both {} and Unstacked({}); expected one of Chunked, "
                        "Unstacked or NoSharding per dim",
                        to_string(), dim, DimSharding(*d.chunked).to_string(), d.unstacked->size);
        if (d.unstacked && d.unstacked->size == 0)
            BRAID_THROW(ValueError, "{}: dim {} is Unstacked(0); expected a size of 1 or more",
                        to_string(), dim);
        if (d.chunked)
            for (size_t k = 0; k < d.chunked->chunks.size(); ++k)
                if (d.chunked->chunks[k] == 0)
                    BRAID_THROW(ValueError,
                                "{}: dim {} has a chunk count of 0 at position {}; expected 1 "
                                "or more",
                                to_string(), dim, k);
    }
    size_t nr_sharded = sharded_axis_sizes().size();
    std::vector<int> mapped_by(nr_sharded, -1);
    for (size_t m = 0; m < mesh_mapping.size(); ++m) {
        if (auto* r = std::get_if<Replicated>(&mesh_mapping[m])) {
            if (r->replicas == 0)
                BRAID_THROW(ValueError,
                            "{}: mesh axis {} is Replicated(0); expected 1 or more replicas",
                            to_string(), m);
            continue;
        }
        uint32_t a = std::get<ShardedAxis>(mesh_mapping[m]).axis;
        if (a >= nr_sharded)
            BRAID_THROW(ValueError,
                        "{}: mesh axis {} is ShardedAxis({}), but the sharding has {} sharded "
                        "axes (expected 0..{})",
                        to_string(), m, a, nr_sharded, int64_t(nr_sharded) - 1);
        if (mapped_by[a] >= 0)
            BRAID_THROW(ValueError,
                        "{}: sharded axis {} is used twice, by mesh axes {} and {}; expected "
                        "each sharded axis on exactly one mesh axis",
                        to_string(), a, mapped_by[a], m);
        mapped_by[a] = int(m);
    }
    for (size_t a = 0; a < nr_sharded; ++a)
        if (mapped_by[a] < 0)
            BRAID_THROW(ValueError,
                        "{}: sharded axis {} is never used by the mesh mapping; expected each "
                        "of the {} sharded axes on exactly one mesh axis",
                        to_string(), a, nr_sharded);
}

void ShardingSpec::validate(const TensorShape& shape) const {
    validate();
    if (shape.ndim() != sharding.size())
        BRAID_THROW(ValueError, "{}: the array shape {} has {} dims; the sharding has {} entries",
                    to_string(), shape.to_string(), shape.ndim(), sharding.size());
    for (size_t dim = 0; dim < sharding.size(); ++dim) {
        const auto& d = sharding[dim];
        if (d.unstacked && shape[dim] != d.unstacked->size)
            BRAID_THROW(ValueError, "{}: dim {} of shape {} is {}; Unstacked({}) expects {}",
                        to_string(), dim, shape.to_string(), shape[dim], d.unstacked->size,
                        d.unstacked->size);
        if (d.chunked) {
            uint64_t total = 1;
            for (uint32_t c : d.chunked->chunks) total *= c;
            if (shape[dim] % total != 0)
                BRAID_THROW(ValueError,
                            "{}: dim {} of shape {} is {}, which {} cannot cut into {} equal "
                            "chunks; expected a multiple of {}",
                            to_string(), dim, shape.to_string(), shape[dim], d.to_string(), total,
                            total);
        }
    }
}

std::vector<uint32_t> ShardingSpec::mesh_shape() const {
    validate();
    auto sizes = sharded_axis_sizes();
    std::vector<uint32_t> shape;
    for (const auto& a : mesh_mapping) {
        if (auto* s = std::get_if<ShardedAxis>(&a))
            shape.push_back(sizes[s->axis]);
        else
            shape.push_back(std::get<Replicated>(a).replicas);
    }
    return shape;
}

uint32_t ShardingSpec::nr_devices() const {
    uint64_t n = 1;
    for (uint32_t s : mesh_shape()) {
        n *= s;
        if (n > (uint64_t(1) << 20))
            BRAID_THROW(ValueError, "{}: more than 2^20 devices", to_string());
    }
    return uint32_t(n);
}

void ShardingSpec::check_mesh(const Mesh& mesh) const {
    auto shape = mesh_shape();
    if (shape != mesh.shape())
        BRAID_THROW(ValueError, "{} describes a mesh of shape [{}]; {} has shape [{}]", to_string(),
                    fmt::join(shape, ", "), mesh.to_string(), fmt::join(mesh.shape(), ", "));
}

std::vector<ShardIndex> ShardingSpec::indices(const TensorShape& shape) const {
    validate(shape);
    auto mshape = mesh_shape();
    uint32_t n = nr_devices();
    auto sizes = sharded_axis_sizes();
    // Which mesh axis walks each sharded axis.
    std::vector<size_t> mesh_axis_of(sizes.size());
    for (size_t m = 0; m < mesh_mapping.size(); ++m)
        if (auto* s = std::get_if<ShardedAxis>(&mesh_mapping[m])) mesh_axis_of[s->axis] = m;

    std::vector<ShardIndex> result;
    result.reserve(n);
    std::vector<uint32_t> coords(mshape.size(), 0);
    for (uint32_t dev = 0; dev < n; ++dev) {
        // Row-major coordinates of this device on the mesh.
        uint32_t rest = dev;
        for (size_t m = mshape.size(); m-- > 0;) {
            coords[m] = rest % mshape[m];
            rest /= mshape[m];
        }
        ShardIndex index;
        size_t next_axis = 0;
        for (size_t dim = 0; dim < sharding.size(); ++dim) {
            const auto& d = sharding[dim];
            if (d.unstacked) {
                index.push_back(DimIndex::index(coords[mesh_axis_of[next_axis++]]));
            } else if (d.chunked) {
                // The chunk number: the chunk axes' coordinates, row-major (c0 major).
                uint64_t chunk = 0, total = 1;
                for (uint32_t c : d.chunked->chunks) {
                    chunk = chunk * c + coords[mesh_axis_of[next_axis++]];
                    total *= c;
                }
                size_t len = shape[dim] / total;
                index.push_back(DimIndex::slice(chunk * len, (chunk + 1) * len));
            } else {
                index.push_back(DimIndex::full(shape[dim]));
            }
        }
        result.push_back(std::move(index));
    }
    return result;
}

TensorShape ShardingSpec::shard_shape(const TensorShape& shape) const {
    validate(shape);
    std::vector<size_t> dims;
    for (size_t dim = 0; dim < sharding.size(); ++dim) {
        const auto& d = sharding[dim];
        if (d.unstacked) continue;
        if (d.chunked) {
            uint64_t total = 1;
            for (uint32_t c : d.chunked->chunks) total *= c;
            dims.push_back(shape[dim] / total);
        } else {
            dims.push_back(shape[dim]);
        }
    }
    return TensorShape(dims);
}

ShardingSpec pmap_sharding_spec(uint32_t axis_size, size_t ndim, std::optional<size_t> map_axis,
                                uint32_t replication) {
    if (axis_size == 0) BRAID_THROW(ValueError, "pmap_sharding_spec: axis size 0; expected 1+");
    if (replication == 0)
        BRAID_THROW(ValueError, "pmap_sharding_spec: replication 0; expected 1 or more");
    ShardingSpec spec;
    spec.sharding.assign(ndim, NoSharding{});
    if (map_axis) {
        if (*map_axis > ndim)
            BRAID_THROW(ValueError,
                        "pmap_sharding_spec: map axis {} for a value of {} dims; expected 0..{}",
                        *map_axis, ndim, ndim);
        spec.sharding.insert(spec.sharding.begin() + ptrdiff_t(*map_axis), Unstacked(axis_size));
        // The only sharded dim, so sharded axis 0.
        spec.mesh_mapping.push_back(ShardedAxis(0));
    } else {
        spec.mesh_mapping.push_back(Replicated(axis_size));
    }
    if (replication > 1) spec.mesh_mapping.push_back(Replicated(replication));
    return spec;
}

ShardingSpec xmap_sharding_spec(const Mesh& mesh, size_t ndim,
                                const std::vector<std::pair<std::string, size_t>>& axes) {
    ShardingSpec spec;
    spec.sharding.assign(ndim, NoSharding{});
    for (uint32_t s : mesh.shape()) spec.mesh_mapping.push_back(Replicated(s));
    // Chunks in dim order; pairs on one dim keep the order given (the first major).
    std::vector<std::vector<size_t>> mesh_axes_of_dim(ndim);
    std::vector<bool> used(mesh.ndim(), false);
    for (const auto& [name, dim] : axes) {
        size_t m = mesh.axis_index(name);
        if (dim >= ndim)
            BRAID_THROW(ValueError,
                        "xmap_sharding_spec: mesh axis \"{}\" maps to dim {} of a {}-dim value; "
                        "expected 0..{}",
                        name, dim, ndim, int64_t(ndim) - 1);
        if (used[m])
            BRAID_THROW(ValueError,
                        "xmap_sharding_spec: mesh axis \"{}\" is mapped twice; expected each "
                        "mesh axis on at most one dim",
                        name);
        used[m] = true;
        mesh_axes_of_dim[dim].push_back(m);
    }
    uint32_t next_axis = 0;
    for (size_t dim = 0; dim < ndim; ++dim) {
        if (mesh_axes_of_dim[dim].empty()) continue;
        std::vector<uint32_t> chunks;
        for (size_t m : mesh_axes_of_dim[dim]) {
            chunks.push_back(mesh.shape()[m]);
            spec.mesh_mapping[m] = ShardedAxis(next_axis++);
        }
        spec.sharding[dim] = Chunked(std::move(chunks));
    }
    return spec;
}

} // namespace braid::parallel
