// Uniform random floats in [-1, 1) from a seed: the inputs of tests that compare results
// bitwise or against a reference loop.
#pragma once

#include <random>
#include <vector>

namespace braid::testing {

inline std::vector<float> random_floats(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

} // namespace braid::testing
