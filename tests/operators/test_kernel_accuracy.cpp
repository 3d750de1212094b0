// The vectorized float32 kernels against double-precision references over wide input ranges:
// the costly elementwise modes (exp, erf, tanh, GELU in both forms) called through the kernel
// this CPU dispatches to, softmax and layer norm on rows that take the vector, tail and
// streaming-store paths, and transposes on the tiled, streaming and scalar-edge paths. The
// tolerances are a few ulp or the documented approximation error, so a fast but wrong kernel
// fails; special values (NaN, infinities, large negatives) must behave as the portable scalar
// functions in operators/vec_math.h define.
#include "reference.h"

#include "operators/elemwise_kernels.h"
#include "operators/vec_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

using namespace braid;
using namespace braid::test;

namespace {

constexpr float INF = std::numeric_limits<float>::infinity();

//! Inputs for the unary kernels: a dense sweep of [lo, hi], random values, special values,
//! and a count that is not a multiple of 8 so the scalar tail runs too.
std::vector<float> unary_inputs(float lo, float hi) {
    std::vector<float> x;
    for (size_t i = 0; i <= 200001; ++i) x.push_back(lo + (hi - lo) * float(i) / 200001.f);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(lo, hi);
    for (size_t i = 0; i < 50000; ++i) x.push_back(d(rng));
    for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 1e-8f, -1e-8f, 0.625f, -0.625f, 3.99f, 4.01f})
        x.push_back(v);
    x.push_back(7.f); // 250013 values in all: 5 past a multiple of 8
    return x;
}

//! Special values: each result must match the portable scalar function's (NaN where it is NaN,
//! the same infinity or zero otherwise).
const std::vector<float> SPECIALS = {std::numeric_limits<float>::quiet_NaN(),
                                     INF,
                                     -INF,
                                     1e30f,
                                     -1e30f,
                                     1e4f,
                                     -1e4f,
                                     100.f,
                                     -100.f,
                                     89.f,
                                     88.7f,
                                     -87.3f,
                                     -104.f,
                                     -200.f,
                                     0.f,
                                     -0.f};

std::vector<float> run_kernel(opr::ElemMode mode, const std::vector<float>& x) {
    auto kernel = opr::find_elem_kernel(mode, DTypeEnum::FLOAT32);
    EXPECT_NE(kernel, nullptr);
    std::vector<float> y(x.size());
    const void* in[1] = {x.data()};
    uint8_t step[1] = {1};
    // From an offset of one element too, so the vector loop also meets unaligned data.
    kernel(in, step, y.data(), x.size());
    std::vector<float> y1(x.size() - 1);
    const void* in1[1] = {x.data() + 1};
    kernel(in1, step, y1.data(), y1.size());
    for (size_t i = 0; i < y1.size(); ++i)
        EXPECT_EQ(std::bit_cast<uint32_t>(y1[i]), std::bit_cast<uint32_t>(y[i + 1]))
            << "the result depends on the position of x = " << x[i + 1];
    return y;
}

struct UnaryCase {
    opr::ElemMode mode;
    const char* name;
    double (*ref)(double);
    float (*scalar)(float);
    float lo, hi;
    double atol, rtol;
};

double gelu_ref(double x) {
    return 0.5 * x * std::erfc(-x * 0.70710678118654752440);
}
double gelu_tanh_ref(double x) {
    // x * sigmoid(2u) == x/2 (1 + tanh u), without the cancellation of 1 + tanh u for x < 0.
    double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return x / (1.0 + std::exp(-2.0 * u));
}

void check_unary(const UnaryCase& c) {
    SCOPED_TRACE(c.name);
    std::vector<float> x = unary_inputs(c.lo, c.hi);
    std::vector<float> y = run_kernel(c.mode, x);
    double worst = 0;
    float worst_x = 0;
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        double r = c.ref(double(x[i]));
        double err = std::fabs(double(y[i]) - r);
        double allowed = c.atol + c.rtol * std::fabs(r);
        if (!(err <= allowed) && bad++ < 5)
            ADD_FAILURE() << c.name << "(" << x[i] << ") = " << y[i] << ", expected " << r
                          << " (error " << err << ", allowed " << allowed << ")";
        if (err / allowed > worst) {
            worst = err / allowed;
            worst_x = x[i];
        }
    }
    EXPECT_EQ(bad, 0u) << c.name << ": " << bad << " of " << x.size() << " values out of tolerance";
    std::printf("%-10s worst error %.2f of tolerance, at x = %g\n", c.name, worst, worst_x);

    std::vector<float> ys = run_kernel(c.mode, SPECIALS);
    for (size_t i = 0; i < SPECIALS.size(); ++i) {
        float want = c.scalar(SPECIALS[i]);
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(ys[i])) << c.name << "(" << SPECIALS[i] << ") = " << ys[i];
        } else if (std::isinf(want) || want == 0.f) {
            EXPECT_EQ(ys[i], want) << c.name << "(" << SPECIALS[i] << ")";
        } else {
            double r = c.ref(double(SPECIALS[i]));
            // A subnormal result has an absolute precision of one subnormal step.
            EXPECT_LE(std::fabs(double(ys[i]) - r), c.atol + c.rtol * std::fabs(r) + 1.5e-45)
                << c.name << "(" << SPECIALS[i] << ") = " << ys[i] << ", expected " << r;
        }
    }
}

} // namespace

TEST(KernelAccuracy, CostlyUnaryKernelsMatchDoubleOverWideRanges) {
    using M = opr::ElemMode;
    namespace vm = opr::vmath;
    const double ulp = std::ldexp(1.0, -23);
    std::vector<UnaryCase> cases = {
        // exp: 2 ulp relative over its normal range (below, results are subnormal or 0).
        {M::EXP, "exp", [](double x) { return std::exp(x); }, [](float x) { return vm::exp(x); },
         -87.f, 88.f, 0, 2.5 * ulp},
        // erf: the rational approximation is within 5e-7 absolute.
        {M::ERF, "erf", [](double x) { return std::erf(x); }, [](float x) { return vm::erf(x); },
         -6.f, 6.f, 5e-7, ulp},
        // tanh: 3 ulp relative, plus a little absolute where the result is near 1.
        {M::TANH, "tanh", [](double x) { return std::tanh(x); },
         [](float x) { return vm::tanh(x); }, -12.f, 12.f, 1e-7, 3 * ulp},
        // GELU (erf form): erf's 5e-7 scaled by x/2, plus rounding.
        {M::GELU, "gelu", gelu_ref, [](float x) { return vm::gelu(x); }, -10.f, 10.f, 1.5e-6,
         4 * ulp},
        {M::GELU_TANH, "gelu_tanh", gelu_tanh_ref, [](float x) { return vm::gelu_tanh(x); }, -10.f,
         10.f, 1e-6, 4 * ulp},
    };
    for (const auto& c : cases) check_unary(c);
}

TEST(KernelAccuracy, GeluTanhIsAccurateWhereOnePlusTanhCancels) {
    // For x << 0, GELU(tanh) is a tiny negative number; the vector kernel computes it as
    // x * sigmoid(2u) and must keep its relative precision there.
    std::vector<float> x;
    for (float v = -9.f; v <= -3.f; v += 0.001f) x.push_back(v);
    auto y = run_kernel(opr::ElemMode::GELU_TANH, x);
    if (!opr::vmath::avx2_fma_supported()) GTEST_SKIP() << "the portable kernel uses 1 + tanh u";
    for (size_t i = 0; i < x.size(); ++i) {
        double r = gelu_tanh_ref(double(x[i]));
        // e^{2u} turns the float rounding of 2u (|2u| up to 66 here, a few roundings) into a
        // relative error of about |2u| * 2^-22; 1 + tanh u in float would be off by 100 %.
        double x64 = x[i], two_u = 1.5957691216 * (x64 + 0.044715 * x64 * x64 * x64);
        EXPECT_LE(std::fabs(double(y[i]) - r), (1e-6 + std::fabs(two_u) * 3e-7) * std::fabs(r))
            << "x = " << x[i];
    }
}

namespace {

//! A float32 tensor of `shape` with uniform values in [lo, hi].
Tensor uniform(const TensorShape& shape, float lo, float hi, uint32_t seed) {
    Tensor t(shape, dtype::Float32());
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    float* p = t.ptr<float>();
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) p[i] = d(rng);
    return t;
}

//! Checks softmax and log-softmax of the rows of x (last axis) against double.
void check_softmax_rows(const Tensor& x, double tol) {
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::softmax(in[0]), opr::log_softmax(in[0])};
    });
    size_t n = x.shape()[x.shape().ndim() - 1], rows = x.shape().total_nr_elems() / n;
    const float* xp = x.ptr<float>();
    const float* sp = out[0].ptr<float>();
    const float* lp = out[1].ptr<float>();
    size_t bad = 0;
    for (size_t r = 0; r < rows; ++r) {
        const float* xr = xp + r * n;
        double m = -INFINITY, sum = 0;
        for (size_t i = 0; i < n; ++i) m = std::max(m, double(xr[i]));
        for (size_t i = 0; i < n; ++i) sum += std::exp(double(xr[i]) - m);
        for (size_t i = 0; i < n; ++i) {
            double v = double(xr[i]) - m, s = std::exp(v) / sum, l = v - std::log(sum);
            double got_s = sp[r * n + i], got_l = lp[r * n + i];
            bool ok =
                std::fabs(got_s - s) <= tol * (1e-3 + s) &&
                (std::isinf(l) ? got_l == l : std::fabs(got_l - l) <= tol * (1 + std::fabs(l)));
            if (!ok && bad++ < 5)
                ADD_FAILURE() << "row " << r << " col " << i << " x " << xr[i] << ": softmax "
                              << got_s << " vs " << s << ", log " << got_l << " vs " << l;
        }
    }
    EXPECT_EQ(bad, 0u);
}

} // namespace

TEST(KernelAccuracy, SoftmaxRowsMatchDouble) {
    // Widths around the vector and block sizes (tails of 1..15 elements), wide value ranges
    // so many terms fall below e^-87 and flush.
    for (size_t n : {1, 7, 8, 15, 16, 17, 31, 1000, 1024, 1031, 2049})
        check_softmax_rows(uniform({5, n}, -60.f, 60.f, uint32_t(n)), 2e-6);
    // Large enough (16 MiB) for the streaming-store path, rows not a multiple of 8 so every row
    // starts at a different alignment.
    check_softmax_rows(uniform({1024, 4099}, -20.f, 20.f, 3), 2e-6);
    check_softmax_rows(uniform({1024, 4096}, -4.f, 4.f, 4), 2e-6);
}

TEST(KernelAccuracy, SoftmaxSpecialValuesKeepTheirMeaning) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // Row 0: -inf entries get exactly 0; row 1: a NaN makes the row NaN; row 2: +inf
    // makes the row NaN (inf - inf); row 3: all -inf is NaN (-inf - -inf); row 4: terms far
    // below the maximum become 0.
    std::vector<double> v;
    auto row = [&](std::vector<float> head) {
        for (size_t i = 0; i < 19; ++i) v.push_back(i < head.size() ? head[i] : float(i) * 0.1f);
    };
    row({-INF, 1.f, -INF, 2.f});
    row({1.f, nan, 3.f});
    row({1.f, INF});
    for (size_t i = 0; i < 19; ++i) v.push_back(-INF);
    row({-200.f, 0.f, -104.f, -88.f});
    Tensor x = tensor_of({5, 19}, dtype::Float32(), v);
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::softmax(in[0])};
    });
    auto y = values_of(out[0]);
    EXPECT_EQ(y[0], 0);
    EXPECT_EQ(y[2], 0);
    EXPECT_GT(y[3], y[1]);
    EXPECT_NEAR(y[1] / y[3], std::exp(-1.0), 1e-6);
    for (size_t i = 19; i < 4 * 19; ++i) EXPECT_TRUE(std::isnan(y[i])) << "element " << i;
    EXPECT_EQ(y[4 * 19 + 0], 0);
    EXPECT_EQ(y[4 * 19 + 2], 0);
    EXPECT_LT(y[4 * 19 + 3], 1e-37); // e^-89.8: 0 (vector) or a subnormal (portable)
    EXPECT_GT(y[4 * 19 + 1], 0);
}

TEST(KernelAccuracy, LayerNormRowsMatchDouble) {
    for (size_t n : {size_t(7), size_t(33), size_t(1031), size_t(4099)}) {
        size_t rows = n == 4099 ? 1024 : 9; // 16 MiB: the streaming-store path
        // A large common offset: the two-pass variance must not lose it to cancellation.
        Tensor x = uniform({rows, n}, 95.f, 105.f, uint32_t(n));
        Tensor w = uniform({n}, -2.f, 2.f, 11), b = uniform({n}, -1.f, 1.f, 12);
        auto out = run_graph({x, w, b}, [](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{opr::layer_norm(in[0], in[1], in[2]), opr::layer_norm(in[0])};
        });
        const float *xp = x.ptr<float>(), *wp = w.ptr<float>(), *bp = b.ptr<float>();
        size_t bad = 0;
        for (size_t r = 0; r < rows; ++r) {
            double mean = 0, sq = 0;
            for (size_t i = 0; i < n; ++i) mean += xp[r * n + i];
            mean /= double(n);
            for (size_t i = 0; i < n; ++i) sq += std::pow(xp[r * n + i] - mean, 2);
            double rstd = 1 / std::sqrt(sq / double(n) + 1e-5);
            for (size_t i = 0; i < n; ++i) {
                double z = (xp[r * n + i] - mean) * rstd, zwb = z * wp[i] + bp[i];
                double g1 = out[0].ptr<float>()[r * n + i], g0 = out[1].ptr<float>()[r * n + i];
                if ((std::fabs(g1 - zwb) > 2e-5 || std::fabs(g0 - z) > 2e-5) && bad++ < 5)
                    ADD_FAILURE() << "n " << n << " row " << r << " col " << i << ": " << g1
                                  << " vs " << zwb << ", " << g0 << " vs " << z;
            }
        }
        EXPECT_EQ(bad, 0u) << "n = " << n;
    }
}

TEST(KernelAccuracy, TransposesCopyEveryElementExactly) {
    struct Case {
        TensorShape shape;
        std::vector<int> perm;
    };
    std::vector<Case> cases = {
        {{37, 45}, {}},           {{8, 8}, {}},           {{9, 17}, {1, 0}},
        {{3, 19, 23}, {0, 2, 1}}, {{4, 5, 6}, {2, 1, 0}}, {{2, 64, 72}, {0, 2, 1}},
        {{300, 260}, {}},   // above the single-thread size, edges in both dims
        {{2048, 2056}, {}}, // 16 MiB: the streaming-store path
        {{1030, 4100}, {}}, // 16 MiB, rows not a multiple of 8: edge columns are scalar
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.shape.to_string());
        // Bit patterns including NaN payloads: the copy must move bits, not values.
        Tensor x(c.shape, dtype::Int32());
        std::mt19937 rng(5);
        int32_t* p = x.ptr<int32_t>();
        for (size_t i = 0; i < c.shape.total_nr_elems(); ++i) p[i] = int32_t(rng());
        Tensor xf(c.shape, dtype::Float32());
        std::memcpy(xf.raw_ptr(), x.raw_ptr(), x.nr_bytes());
        auto out = run_graph({x, xf}, [&](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{opr::transpose(in[0], c.perm), opr::transpose(in[1], c.perm)};
        });
        size_t nd = c.shape.ndim();
        std::vector<int> perm = c.perm;
        if (perm.empty())
            for (size_t i = nd; i-- > 0;) perm.push_back(int(i));
        // Expected: out[i0, i1, ...] = x[index with axes permuted].
        std::vector<size_t> ostride(nd), istride(nd), oshape(nd);
        for (size_t d = 0; d < nd; ++d) oshape[d] = c.shape[size_t(perm[d])];
        size_t s = 1;
        for (size_t d = nd; d-- > 0;) {
            istride[d] = s;
            s *= c.shape[d];
        }
        size_t bad = 0;
        for (size_t k = 0; k < 2; ++k) {
            ASSERT_EQ(out[k].shape(), TensorShape(oshape));
            const uint32_t* got = reinterpret_cast<const uint32_t*>(out[k].raw_ptr());
            std::vector<size_t> idx(nd, 0);
            for (size_t o = 0; o < s; ++o) {
                size_t src = 0;
                for (size_t d = 0; d < nd; ++d) src += idx[d] * istride[size_t(perm[d])];
                if (got[o] != uint32_t(p[src]) && bad++ < 5)
                    ADD_FAILURE() << "output element " << o << " differs";
                for (size_t d = nd; d-- > 0;) {
                    if (++idx[d] < oshape[d]) break;
                    idx[d] = 0;
                }
            }
        }
        EXPECT_EQ(bad, 0u);
    }
}
