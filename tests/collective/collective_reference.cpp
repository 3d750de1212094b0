#include "collective_reference.h"

#include <algorithm>

namespace braid::test {

using opr::CollectiveMode;

const std::vector<CollectiveMode>& all_collective_modes() {
    static const std::vector<CollectiveMode> modes = {CollectiveMode::ALL_REDUCE_SUM,
                                                      CollectiveMode::ALL_REDUCE_MAX,
                                                      CollectiveMode::ALL_REDUCE_MIN,
                                                      CollectiveMode::BROADCAST,
                                                      CollectiveMode::REDUCE_SUM,
                                                      CollectiveMode::ALL_GATHER,
                                                      CollectiveMode::REDUCE_SCATTER_SUM,
                                                      CollectiveMode::GATHER,
                                                      CollectiveMode::SCATTER,
                                                      CollectiveMode::ALL_TO_ALL};
    return modes;
}

bool collective_has_input(CollectiveMode mode, bool is_root) {
    return !((mode == CollectiveMode::BROADCAST || mode == CollectiveMode::SCATTER) && !is_root);
}

opr::CollectiveParam collective_param(CollectiveMode mode, const std::string& key, uint32_t n,
                                      uint32_t rank, uint32_t root,
                                      std::shared_ptr<comm::GroupClient> client,
                                      const std::string& backend) {
    opr::CollectiveParam p;
    p.key = key;
    p.nr_devices = n;
    p.rank = int32_t(rank);
    p.is_root = rank == root;
    p.group_client = std::move(client);
    p.mode = mode;
    p.backend = backend;
    return p;
}

Tensor collective_reference(CollectiveMode mode, const std::vector<Tensor>& in, uint32_t rank,
                            uint32_t root) {
    size_t n = in.size();
    const Tensor& x0 = in[root].empty() ? in[0] : in[root];
    const TensorShape& s = x0.shape();
    size_t e = s.total_nr_elems();
    auto vec = [&](const TensorShape& shape) { return Tensor(shape, dtype::Float32()); };
    auto at = [&](size_t r, size_t i) { return float(in[r].at(i)); };
    auto put = [](Tensor& t, size_t i, float v) { t.ptr<float>()[i] = v; };
    auto placeholder = [&] {
        Tensor z = vec({1});
        put(z, 0, 0.f);
        return z;
    };
    TensorShape gathered = s, split = s;
    gathered[0] = s[0] * n;
    split[0] = s[0] / n;
    switch (mode) {
    case CollectiveMode::ALL_REDUCE_SUM:
    case CollectiveMode::ALL_REDUCE_MAX:
    case CollectiveMode::ALL_REDUCE_MIN: {
        Tensor r = vec(s);
        for (size_t i = 0; i < e; ++i) {
            float v = at(0, i);
            for (size_t k = 1; k < n; ++k)
                v = mode == CollectiveMode::ALL_REDUCE_SUM   ? v + at(k, i)
                    : mode == CollectiveMode::ALL_REDUCE_MAX ? std::max(v, at(k, i))
                                                             : std::min(v, at(k, i));
            put(r, i, v);
        }
        return r;
    }
    case CollectiveMode::BROADCAST:
        return in[root].copy();
    case CollectiveMode::REDUCE_SUM:
        if (rank != root) return placeholder();
        return collective_reference(CollectiveMode::ALL_REDUCE_SUM, in, rank, root);
    case CollectiveMode::ALL_GATHER:
    case CollectiveMode::GATHER: {
        if (mode == CollectiveMode::GATHER && rank != root) return placeholder();
        Tensor r = vec(gathered);
        for (size_t k = 0; k < n; ++k)
            for (size_t i = 0; i < e; ++i) put(r, k * e + i, at(k, i));
        return r;
    }
    case CollectiveMode::REDUCE_SCATTER_SUM: {
        Tensor sum = collective_reference(CollectiveMode::ALL_REDUCE_SUM, in, rank, root);
        Tensor r = vec(split);
        size_t b = e / n;
        for (size_t i = 0; i < b; ++i) put(r, i, float(sum.at(rank * b + i)));
        return r;
    }
    case CollectiveMode::SCATTER: {
        Tensor r = vec(split);
        size_t b = e / n;
        for (size_t i = 0; i < b; ++i) put(r, i, at(root, rank * b + i));
        return r;
    }
    case CollectiveMode::ALL_TO_ALL: {
        Tensor r = vec(s);
        size_t b = e / n;
        for (size_t j = 0; j < n; ++j) // block j of my output = block `rank` of rank j's input
            for (size_t i = 0; i < b; ++i) put(r, j * b + i, at(j, rank * b + i));
        return r;
    }
    }
    return {};
}

} // namespace braid::test
