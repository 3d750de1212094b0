#include "parallel/reshard.h"

#include "base/error.h"

#include <fmt/format.h>

namespace braid::parallel {

namespace {

int shard_dim(const Placement& p) {
    auto* s = std::get_if<Shard>(&p);
    return s ? s->dim : -1;
}

} // namespace

MeshPlacement replicated_placement(size_t mesh_ndim) {
    return MeshPlacement(mesh_ndim, Replicate{});
}

std::string mesh_placement_name(const MeshPlacement& p) {
    std::string s = "[";
    for (size_t a = 0; a < p.size(); ++a) s += (a ? ", " : "") + placement_name(p[a]);
    return s + "]";
}

bool placement_fits(const TensorShape& global, const MeshPlacement& p,
                    const std::vector<uint32_t>& mesh_shape) {
    std::vector<size_t> split(global.ndim(), 1);
    for (size_t a = 0; a < p.size(); ++a) {
        int d = shard_dim(p[a]);
        if (d < 0) continue;
        if (size_t(d) >= global.ndim()) return false;
        split[d] *= mesh_shape[a];
    }
    for (size_t d = 0; d < global.ndim(); ++d)
        if (global[d] % split[d] != 0) return false;
    return true;
}

TensorShape mesh_local_shape(const TensorShape& global, const MeshPlacement& p,
                             const std::vector<uint32_t>& mesh_shape) {
    if (!placement_fits(global, p, mesh_shape))
        BRAID_THROW(ValueError,
                    "placement {} does not fit shape {} on a mesh of shape {}: a "
                    "sharded dim does not divide by its axes' sizes",
                    mesh_placement_name(p), global.to_string(), fmt::join(mesh_shape, "x"));
    TensorShape local = global;
    for (size_t a = 0; a < p.size(); ++a)
        if (int d = shard_dim(p[a]); d >= 0) local[d] /= mesh_shape[a];
    return local;
}

ShardingSpec mesh_placement_spec(size_t ndim, const MeshPlacement& p,
                                 const std::vector<uint32_t>& mesh_shape) {
    std::vector<DimSharding> sharding(ndim, DimSharding{NoSharding{}});
    std::vector<std::vector<size_t>> axes_of_dim(ndim);
    for (size_t a = 0; a < p.size(); ++a) {
        if (std::holds_alternative<Partial>(p[a]))
            BRAID_THROW(ValueError, "placement {}: a partial value has no sharding spec",
                        mesh_placement_name(p));
        if (int d = shard_dim(p[a]); d >= 0) axes_of_dim.at(d).push_back(a);
    }
    std::vector<MeshAssignment> mapping(p.size(), MeshAssignment{Replicated(1)});
    uint32_t next = 0;
    for (size_t d = 0; d < ndim; ++d) {
        if (axes_of_dim[d].empty()) continue;
        std::vector<uint32_t> chunks;
        for (size_t a : axes_of_dim[d]) {
            chunks.push_back(mesh_shape[a]);
            mapping[a] = ShardedAxis(next++);
        }
        sharding[d] = DimSharding{Chunked(chunks)};
    }
    for (size_t a = 0; a < p.size(); ++a)
        if (shard_dim(p[a]) < 0) mapping[a] = Replicated(mesh_shape[a]);
    return ShardingSpec(std::move(sharding), std::move(mapping));
}

std::vector<ReshardStep> reshard_steps(const TensorShape& global, const MeshPlacement& from,
                                       const MeshPlacement& to,
                                       const std::vector<uint32_t>& mesh_shape) {
    const size_t axes = mesh_shape.size();
    if (from.size() != axes || to.size() != axes)
        BRAID_THROW(ValueError, "reshard {} -> {}: expected one placement per mesh axis ({})",
                    mesh_placement_name(from), mesh_placement_name(to), axes);
    for (size_t a = 0; a < axes; ++a)
        if (std::holds_alternative<Partial>(to[a]) && to[a] != from[a])
            BRAID_THROW(ValueError, "reshard {} -> {}: a partial value cannot be made over axis {}",
                        mesh_placement_name(from), mesh_placement_name(to), a);
    mesh_local_shape(global, from, mesh_shape); // throws when it does not fit
    mesh_local_shape(global, to, mesh_shape);

    std::vector<ReshardStep> steps;
    MeshPlacement cur = from;
    auto step = [&](size_t a, Placement target) {
        ReshardStep s;
        s.axis = a;
        s.from = cur[a];
        s.to = target;
        s.local_before = mesh_local_shape(global, cur, mesh_shape);
        cur[a] = std::move(target);
        s.local_after = mesh_local_shape(global, cur, mesh_shape);
        steps.push_back(std::move(s));
    };
    auto shards_later = [&](const MeshPlacement& p, size_t a, int d) {
        for (size_t b = a + 1; b < axes; ++b)
            if (shard_dim(p[b]) == d) return true;
        return false;
    };
    auto shards_elsewhere = [&](const MeshPlacement& p, size_t a, int d) {
        for (size_t b = 0; b < axes; ++b)
            if (b != a && shard_dim(p[b]) == d) return true;
        return false;
    };

    // Axes to un-shard: those whose placement changes, and the later axes that shard a dim
    // which an earlier axis gathers or newly slices.
    std::vector<bool> unshard(axes, false);
    for (size_t a = 0; a < axes; ++a) {
        int d_from = shard_dim(from[a]), d_to = shard_dim(to[a]);
        if (d_from >= 0 && from[a] != to[a]) unshard[a] = true;
        for (int d : {d_from != shard_dim(to[a]) ? d_from : -1, d_to != d_from ? d_to : -1})
            if (d >= 0)
                for (size_t b = a + 1; b < axes; ++b)
                    if (shard_dim(from[b]) == d) unshard[b] = true;
    }
    // 1. Gathers and all-to-alls, last axis first.
    for (size_t a = axes; a-- > 0;) {
        if (!unshard[a]) continue;
        int d = shard_dim(cur[a]);
        int j = shard_dim(to[a]);
        if (j >= 0 && j != d && !shards_elsewhere(cur, a, d) && !shards_elsewhere(cur, a, j) &&
            !shards_elsewhere(to, a, j))
            step(a, Shard{j});
        else
            step(a, Replicate{});
    }
    // 2. Partial values.
    for (size_t a = 0; a < axes; ++a) {
        auto* p = std::get_if<Partial>(&cur[a]);
        if (!p || to[a] == cur[a]) continue;
        int d = shard_dim(to[a]);
        bool major_ready = true;
        for (size_t b = 0; b < a; ++b)
            if (shard_dim(to[b]) == d && shard_dim(cur[b]) != d) major_ready = false;
        if (d >= 0 && p->op == ReduceOp::SUM && major_ready && !shards_later(cur, a, d))
            step(a, Shard{d});
        else
            step(a, Replicate{});
    }
    // 3. Slices, first axis first.
    for (size_t a = 0; a < axes; ++a)
        if (cur[a] != to[a]) step(a, to[a]);
    BRAID_ASSERT(cur == to, "reshard {} -> {} ended at {}", mesh_placement_name(from),
                 mesh_placement_name(to), mesh_placement_name(cur));
    return steps;
}

SymbolVar reshard(SymbolVar x, const std::vector<ReshardStep>& steps, MeshGroups& groups) {
    for (auto& s : steps)
        x = redistribute(x, s.from, s.to, groups, groups.mesh().axis_names().at(s.axis));
    return x;
}

} // namespace braid::parallel
