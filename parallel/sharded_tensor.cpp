#include "parallel/sharded_tensor.h"

#include "base/error.h"
#include "parallel/mesh.h"

#include <fmt/format.h>

#include <cstring>
#include <map>

namespace braid::parallel {

namespace {

void check_host(const Tensor& t, const std::string& what) {
    if (t.empty()) BRAID_THROW(ValueError, "{} is an empty tensor (no dtype)", what);
    if (t.device().kind != Device::Kind::CPU)
        BRAID_THROW(ValueError, "{} is in device memory; host sharding expects a host tensor",
                    what);
}

} // namespace

Tensor index_view(const Tensor& global, const ShardIndex& index) {
    const TensorLayout& in = global.layout();
    if (index.size() != in.ndim())
        BRAID_THROW(ValueError, "index {} has {} entries for a tensor of shape {}",
                    format_index(index), index.size(), in.to_string());
    TensorLayout out;
    out.dtype = in.dtype;
    std::vector<size_t> dims;
    std::vector<ptrdiff_t> strides;
    ptrdiff_t elem_offset = 0;
    for (size_t d = 0; d < index.size(); ++d) {
        const DimIndex& ix = index[d];
        if (ix.end > in[d] || ix.begin > ix.end)
            BRAID_THROW(ValueError, "index {} is out of range for dim {} of shape {}",
                        format_index(index), d, in.to_string());
        elem_offset += ptrdiff_t(ix.begin) * in.stride[d];
        if (ix.kind == DimIndex::Kind::INDEX) continue;
        dims.push_back(ix.end - ix.begin);
        strides.push_back(in.stride[d]);
    }
    out.set_ndim(dims.size());
    for (size_t d = 0; d < dims.size(); ++d) {
        out[d] = dims[d];
        out.stride[d] = strides[d];
    }
    return global.view(out, size_t(elem_offset) * in.dtype.size());
}

ShardedTensor ShardedTensor::split(const Tensor& global, const ShardingSpec& spec) {
    check_host(global, "ShardedTensor::split: the tensor");
    ShardedTensor st;
    st.spec = spec;
    st.global_shape = global.shape();
    auto indices = spec.indices(global.shape());
    // Replicas share one copy: devices with the same index get the same piece.
    std::map<std::string, Tensor> made;
    for (const auto& index : indices) {
        auto key = format_index(index);
        auto it = made.find(key);
        if (it == made.end()) it = made.emplace(key, index_view(global, index).copy()).first;
        st.shards.push_back(it->second);
    }
    return st;
}

Tensor ShardedTensor::assemble(bool check_replicas) const {
    auto indices = spec.indices(global_shape);
    TensorShape piece_shape = spec.shard_shape(global_shape);
    if (shards.size() != indices.size())
        BRAID_THROW(ValueError, "ShardedTensor::assemble: {} pieces for {}; expected {}",
                    shards.size(), spec.to_string(), indices.size());
    DType dtype = shards.empty() ? DType() : shards[0].dtype();
    for (size_t i = 0; i < shards.size(); ++i) {
        check_host(shards[i], fmt::format("ShardedTensor::assemble: the piece of device {}", i));
        if (shards[i].shape() != piece_shape)
            BRAID_THROW(ValueError,
                        "ShardedTensor::assemble: the piece of device {} has shape {}; {} of "
                        "{} expects {}",
                        i, shards[i].shape().to_string(), spec.to_string(),
                        global_shape.to_string(), piece_shape.to_string());
        if (shards[i].dtype() != dtype)
            BRAID_THROW(ValueError,
                        "ShardedTensor::assemble: the piece of device {} is {}; device 0's is {}",
                        i, shards[i].dtype().name(), dtype.name());
    }
    Tensor global(global_shape, dtype);
    std::map<std::string, size_t> first_holder;
    for (size_t i = 0; i < shards.size(); ++i) {
        auto key = format_index(indices[i]);
        auto [it, fresh] = first_holder.emplace(key, i);
        if (fresh) {
            index_view(global, indices[i]).copy_from(shards[i]);
            continue;
        }
        if (!check_replicas) continue;
        Tensor a = shards[it->second].contiguous(), b = shards[i].contiguous();
        if (a.nr_bytes() > 0 && std::memcmp(a.raw_ptr(), b.raw_ptr(), a.nr_bytes()) != 0) {
            size_t elem = 0, esize = dtype.size();
            while (std::memcmp(a.raw_ptr() + elem * esize, b.raw_ptr() + elem * esize, esize) == 0)
                ++elem;
            BRAID_THROW(ValueError,
                        "ShardedTensor::assemble: devices {} and {} both hold {} but differ at "
                        "element {} ({} vs {}); expected equal replicas",
                        it->second, i, key, elem, a.at(elem), b.at(elem));
        }
    }
    return global;
}

const Tensor& ShardedTensor::shard_of(const Mesh& mesh, uint32_t rank) const {
    spec.check_mesh(mesh);
    uint32_t pos = mesh.position_of(rank);
    if (pos >= shards.size())
        BRAID_THROW(ValueError, "ShardedTensor: no piece for rank {} (position {}); {} pieces",
                    rank, pos, shards.size());
    return shards[pos];
}

} // namespace braid::parallel
