// Random block sets for the memory planner: lifetimes shaped like a compiled graph's (one
// block begins per step, most die within a few steps, some live long like skip
// connections), sizes mixing a few recurring sizes with log-uniform ones, and chains of
// in-place overwrites. Shared by tests/memory and bench/bench_memplan.
#pragma once

#include <cmath>
#include <cstddef>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace braid::testing {

//! One block of a random set: lifetime [begin, end) and size in bytes.
struct RandomBlock {
    size_t begin, end, size;
};

//! A random planner input: blocks (keyed by index) and (dst, src) overwrite pairs.
struct RandomBlockSet {
    std::vector<RandomBlock> blocks;
    std::vector<std::pair<size_t, size_t>> overwrites;
};

//! `n` blocks from `seed`; sizes up to `max_size` bytes. The same arguments give the same set.
inline RandomBlockSet make_random_blocks(size_t n, uint64_t seed, size_t max_size = 1 << 20) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    auto log_uniform = [&](double lo, double hi) {
        return std::exp(std::log(lo) + unit(rng) * (std::log(hi) - std::log(lo)));
    };
    std::vector<size_t> common;
    for (int i = 0; i < 8; ++i) common.push_back(size_t(log_uniform(16, double(max_size))));
    std::geometric_distribution<size_t> short_life(0.25);

    RandomBlockSet set;
    std::multimap<size_t, size_t> by_end; // end -> block, for overwrite candidates
    std::vector<bool> overwritten;
    for (size_t t = 0; t < n; ++t) {
        size_t len = unit(rng) < 0.9 ? 1 + short_life(rng) : size_t(log_uniform(1, 2000));
        size_t size = unit(rng) < 0.5 ? common[rng() % common.size()]
                                      : size_t(log_uniform(1, double(max_size)));
        if (unit(rng) < 0.02) size = 0;
        // In place: continue a block whose last step is this one, with at most its size.
        auto range = by_end.equal_range(t + 1);
        size_t src = SIZE_MAX;
        if (unit(rng) < 0.3)
            for (auto it = range.first; it != range.second; ++it)
                if (!overwritten[it->second]) {
                    src = it->second;
                    break;
                }
        if (src != SIZE_MAX) {
            size = std::min(size, set.blocks[src].size);
            overwritten[src] = true;
            set.overwrites.emplace_back(set.blocks.size(), src);
        }
        by_end.emplace(t + len, set.blocks.size());
        set.blocks.push_back({t, t + len, size});
        overwritten.push_back(false);
    }
    return set;
}

} // namespace braid::testing
