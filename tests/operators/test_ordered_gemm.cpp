// The GEMM of deterministic mode (operators/ordered_gemm.h): each element of C is one chain of
// fused multiply-adds over k in order, so it equals a plain loop bitwise, on every instruction
// set, whatever M, the tiles or the transposition flags.
#include "base/cpu_isa.h"
#include "operators/ordered_gemm.h"
#include "tests/support/random_floats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace braid::opr::kern {
namespace {

using braid::testing::random_floats;

//! The order the header promises, written out.
std::vector<float> reference(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha,
                             const std::vector<float>& a, const std::vector<float>& b, float beta,
                             std::vector<float> c) {
    for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) {
            float acc = 0.f;
            for (size_t p = 0; p < k; ++p)
                acc = std::fma(ta ? a[p * m + i] : a[i * k + p], tb ? b[j * k + p] : b[p * n + j],
                               acc);
            float x = alpha == 1.f ? acc : alpha * acc;
            c[i * n + j] = beta == 0.f ? x : std::fma(beta, c[i * n + j], x);
        }
    return c;
}

std::vector<CpuIsa> available_isas() {
    std::vector<CpuIsa> isas{CpuIsa::SCALAR};
    if (cpu_isa_detected() >= CpuIsa::AVX2) isas.push_back(CpuIsa::AVX2);
    if (cpu_isa_detected() >= CpuIsa::AVX512) isas.push_back(CpuIsa::AVX512);
    return isas;
}

TEST(OrderedGemm, EveryElementIsOneFmaChainInOrderOnEveryInstructionSet) {
    struct Case {
        size_t m, n, k;
    };
    // Edges of the 6-row and 16/32/64-column tiles, one row, one column, an empty sum.
    for (Case s : {Case{1, 1, 1}, Case{1, 100, 37}, Case{2, 33, 64}, Case{5, 17, 3},
                   Case{7, 64, 100}, Case{13, 70, 129}, Case{64, 10, 256}, Case{3, 5, 0}})
        for (bool ta : {false, true})
            for (bool tb : {false, true})
                for (auto [alpha, beta] : {std::pair{1.f, 0.f}, std::pair{0.5f, 0.f},
                                           std::pair{1.f, 0.25f}, std::pair{-2.f, 1.f}}) {
                    auto a = random_floats(s.m * s.k, 1), b = random_floats(s.k * s.n, 2);
                    auto c0 = random_floats(s.m * s.n, 3);
                    auto want = reference(ta, tb, s.m, s.n, s.k, alpha, a, b, beta, c0);
                    for (CpuIsa isa : available_isas()) {
                        auto c = c0;
                        ordered_sgemm_isa(isa, ta, tb, s.m, s.n, s.k, alpha, a.data(),
                                          ta ? s.m : s.k, b.data(), tb ? s.k : s.n, beta, c.data(),
                                          s.n);
                        EXPECT_EQ(std::memcmp(c.data(), want.data(), c.size() * 4), 0)
                            << cpu_isa_name(isa) << " " << s.m << "x" << s.n << "x" << s.k << " ta "
                            << ta << " tb " << tb << " alpha " << alpha << " beta " << beta;
                    }
                }
}

TEST(OrderedGemm, ARowIsTheSameBitsAloneAsInAnyBatchAndAnyTile) {
    const size_t n = 300, k = 784;
    auto a = random_floats(64 * k, 4), b = random_floats(k * n, 5);
    std::vector<float> all(64 * n);
    ordered_sgemm(false, false, 64, n, k, 1.f, a.data(), k, b.data(), n, 0.f, all.data(), n);
    for (size_t m : {1, 3, 7}) {
        std::vector<float> part(m * n);
        ordered_sgemm(false, false, m, n, k, 1.f, a.data() + 9 * k, k, b.data(), n, 0.f,
                      part.data(), n);
        EXPECT_EQ(std::memcmp(part.data(), all.data() + 9 * n, part.size() * 4), 0) << m;
    }
    // A block of columns, as a thread's tile of C computes it.
    std::vector<float> tile(5 * 40);
    ordered_sgemm(false, false, 5, 40, k, 1.f, a.data() + 20 * k, k, b.data() + 77, n, 0.f,
                  tile.data(), 40);
    for (size_t i = 0; i < 5; ++i)
        EXPECT_EQ(std::memcmp(tile.data() + i * 40, all.data() + (20 + i) * n + 77, 40 * 4), 0)
            << i;
}

TEST(OrderedGemm, Float64FollowsTheSameOrder) {
    const size_t m = 3, n = 5, k = 9;
    std::vector<double> a(m * k), b(k * n), c(m * n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(double(i));
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(double(i));
    ordered_dgemm(false, true, m, n, k, a.data(), k, b.data(), k, c.data(), n);
    for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) {
            double acc = 0;
            for (size_t p = 0; p < k; ++p) acc = std::fma(a[i * k + p], b[j * k + p], acc);
            EXPECT_EQ(c[i * n + j], acc) << i << "," << j;
        }
}

} // namespace
} // namespace braid::opr::kern
