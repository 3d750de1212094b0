// The direct convolution (operators/conv_direct.h) against its definition: each output is one
// chain of fused multiply-adds over (input channel, kernel row, kernel column) in order, from
// zero, with the padding's zeros in the chain, as im2col + ordered_sgemm computes it. Exact
// equality over paddings (none, same, narrowing, taller than the input), kernels of 1xK, Kx1,
// 3x3, 5x5 and 2x2, channel counts that leave partial tiles, maps narrower than a vector,
// batches, and 1 to 3 kernel threads; the epilogue covers every output once, after the
// in-register bias, batch norm and relu. With the
// instruction set capped to scalar (the isa_scalar run of the suite) the kernel declines.
#include "checker.h"

#include "base/cpu_isa.h"
#include "base/thread_pool.h"
#include "operators/conv_direct.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace braid;
using namespace braid::test;

namespace {

struct Case {
    size_t n, c, h, w, o, kh, kw;
    int ph, pw;
};

//! The chain of the header comment, element by element.
std::vector<float> chain_conv(const Case& k, const Tensor& x, const Tensor& w) {
    size_t oh = k.h + 2 * size_t(k.ph) - k.kh + 1, ow = k.w + 2 * size_t(k.pw) - k.kw + 1;
    std::vector<float> y(k.n * k.o * oh * ow);
    const float *xp = x.ptr<float>(), *wp = w.ptr<float>();
    for (size_t b = 0; b < k.n; ++b)
        for (size_t o = 0; o < k.o; ++o)
            for (size_t r = 0; r < oh; ++r)
                for (size_t col = 0; col < ow; ++col) {
                    float acc = 0.f;
                    for (size_t c = 0; c < k.c; ++c)
                        for (size_t i = 0; i < k.kh; ++i)
                            for (size_t j = 0; j < k.kw; ++j) {
                                ptrdiff_t ih = ptrdiff_t(r + i) - k.ph,
                                          iw = ptrdiff_t(col + j) - k.pw;
                                bool inside = ih >= 0 && iw >= 0 && ih < ptrdiff_t(k.h) &&
                                              iw < ptrdiff_t(k.w);
                                float xv =
                                    inside
                                        ? xp[((b * k.c + c) * k.h + size_t(ih)) * k.w + size_t(iw)]
                                        : 0.f;
                                acc = std::fma(wp[((o * k.c + c) * k.kh + i) * k.kw + j], xv, acc);
                            }
                    y[((b * k.o + o) * oh + r) * ow + col] = acc;
                }
    return y;
}

opr::Conv2dParam param_of(const Case& k) {
    opr::Conv2dParam p;
    p.pad_h = k.ph;
    p.pad_w = k.pw;
    return p;
}

const Case CASES[] = {
    {1, 24, 74, 32, 24, 1, 3, 0, 1}, // a speech embedding's 1x3, same width
    {1, 48, 36, 16, 48, 3, 1, 0, 0}, // its 3x1, shorter output
    {1, 5, 7, 9, 13, 3, 3, 1, 1},    // same 3x3, partial channel tiles, rows under a vector
    {2, 3, 11, 10, 7, 5, 5, 1, 1},   // narrowing 5x5: positions past the output width dropped
    {1, 4, 20, 3, 9, 3, 3, 0, 0},    // one output column
    {1, 6, 1, 64, 10, 1, 7, 0, 3},   // one row, a long 1x7
    {3, 2, 9, 7, 17, 2, 2, 1, 0},    // 2x2 with the output taller than the input
    {1, 1, 20, 21, 8, 3, 3, 1, 1},   // one input channel
    {1, 16, 9, 50, 1, 1, 1, 1, 0},   // pointwise with row padding: zero rows in the output
};

} // namespace

TEST(ConvDirect, EachOutputIsTheOrderedChainOnEveryThreadCount) {
    if (!cpu_isa_at_least(CpuIsa::AVX2)) {
        EXPECT_FALSE(opr::conv_direct_applies(param_of(CASES[0]), {1, 24, 74, 32}, {24, 24, 1, 3}))
            << "the direct kernel needs AVX2";
        return;
    }
    std::mt19937 rng(7);
    size_t saved = kernel_threads();
    for (const Case& k : CASES) {
        Tensor x = random_tensor({k.n, k.c, k.h, k.w}, dtype::Float32(), rng, -1.0, 1.0);
        Tensor w = random_tensor({k.o, k.c, k.kh, k.kw}, dtype::Float32(), rng, -1.0, 1.0);
        auto want = chain_conv(k, x, w);
        size_t oh = k.h + 2 * size_t(k.ph) - k.kh + 1, ow = k.w + 2 * size_t(k.pw) - k.kw + 1;
        for (size_t threads : {1, 2, 3}) {
            set_kernel_threads(threads);
            Tensor y({k.n, k.o, oh, ow}, dtype::Float32());
            std::fill_n(y.ptr<float>(), want.size(), std::nanf(""));
            ASSERT_TRUE(opr::conv_direct_forward(param_of(k), x, w, y, nullptr))
                << x.shape().to_string() << " " << w.shape().to_string();
            size_t wrong = 0, first = want.size();
            for (size_t i = 0; i < want.size(); ++i)
                if (!(y.ptr<float>()[i] == want[i]) && wrong++ == 0) first = i;
            EXPECT_EQ(wrong, 0u) << "x" << x.shape().to_string() << " w" << w.shape().to_string()
                                 << " pad " << k.ph << "," << k.pw << " threads " << threads
                                 << ": first at " << first << ": " << y.ptr<float>()[first]
                                 << " against " << want[first];
        }
    }
    set_kernel_threads(saved);
}

TEST(ConvDirect, TheEpilogueSeesEveryOutputOnceAfterItIsComputed) {
    if (!cpu_isa_at_least(CpuIsa::AVX2)) GTEST_SKIP() << "the direct kernel needs AVX2";
    std::mt19937 rng(11);
    size_t saved = kernel_threads();
    const Case k{2, 24, 74, 32, 20, 1, 3, 0, 1};
    Tensor x = random_tensor({k.n, k.c, k.h, k.w}, dtype::Float32(), rng, -1.0, 1.0);
    Tensor w = random_tensor({k.o, k.c, k.kh, k.kw}, dtype::Float32(), rng, -1.0, 1.0);
    auto want = chain_conv(k, x, w);
    for (size_t threads : {1, 2}) {
        set_kernel_threads(threads);
        Tensor y({k.n, k.o, k.h, k.w}, dtype::Float32());
        // The epilogue adds the channel number plus one; an output seen twice or not at all, or
        // before it is final, ends up with another value.
        opr::ConvEpilogue add_channel = [](float* yb, size_t o0, size_t rows, size_t cols,
                                           size_t ld) {
            for (size_t r = 0; r < rows; ++r)
                for (size_t i = 0; i < cols; ++i) yb[r * ld + i] += float(o0 + r + 1);
        };
        ASSERT_TRUE(opr::conv_direct_forward(param_of(k), x, w, y, &add_channel));
        size_t pixels = k.h * k.w, wrong = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            float expect = want[i] + float((i / pixels) % k.o + 1);
            wrong += y.ptr<float>()[i] != expect;
        }
        EXPECT_EQ(wrong, 0u) << "threads " << threads;
    }
    set_kernel_threads(saved);
}

TEST(ConvDirect, OutputOpsApplyBiasBatchNormAndReluInOrderBeforeTheEpilogue) {
    if (!cpu_isa_at_least(CpuIsa::AVX2)) GTEST_SKIP() << "the direct kernel needs AVX2";
    std::mt19937 rng(5);
    const Case k{1, 6, 30, 12, 11, 3, 3, 1, 1};
    Tensor x = random_tensor({k.n, k.c, k.h, k.w}, dtype::Float32(), rng, -1.0, 1.0);
    Tensor w = random_tensor({k.o, k.c, k.kh, k.kw}, dtype::Float32(), rng, -1.0, 1.0);
    auto chain = chain_conv(k, x, w);
    std::vector<float> bias(k.o), scale(k.o), shift(k.o);
    for (size_t o = 0; o < k.o; ++o) {
        bias[o] = 0.25f * float(o) - 1.f;
        scale[o] = 1.5f - 0.2f * float(o);
        shift[o] = 0.1f * float(o);
    }
    size_t pixels = k.h * k.w;
    struct Variant {
        bool bias, bn, relu;
    };
    for (Variant v : {Variant{true, false, false}, Variant{false, true, true},
                      Variant{true, true, true}, Variant{false, false, true}}) {
        opr::DirectOutputOps ops{v.bias ? bias.data() : nullptr, v.bn ? scale.data() : nullptr,
                                 v.bn ? shift.data() : nullptr, v.relu};
        // The epilogue runs after the ops: it sees their results and doubles them.
        opr::ConvEpilogue twice = [](float* yb, size_t, size_t rows, size_t cols, size_t ld) {
            for (size_t r = 0; r < rows; ++r)
                for (size_t i = 0; i < cols; ++i) yb[r * ld + i] *= 2.f;
        };
        Tensor y({k.n, k.o, k.h, k.w}, dtype::Float32());
        ASSERT_TRUE(opr::conv_direct_forward(param_of(k), x, w, y, &twice, &ops));
        size_t wrong = 0, negatives = 0;
        for (size_t i = 0; i < chain.size(); ++i) {
            size_t o = i / pixels;
            float want = chain[i];
            if (v.bias) want += bias[o];
            if (v.bn) want = std::fma(want, scale[o], shift[o]);
            if (v.relu) want = std::max(want, 0.f);
            wrong += y.ptr<float>()[i] != 2.f * want;
            negatives += y.ptr<float>()[i] < 0.f;
        }
        EXPECT_EQ(wrong, 0u) << "bias " << v.bias << " bn " << v.bn << " relu " << v.relu;
        if (!v.relu) {
            EXPECT_GT(negatives, 0u) << "the case must have negative outputs";
        }
    }
}

TEST(ConvDirect, DeclinesWhatItDoesNotCompute) {
    opr::Conv2dParam p;
    EXPECT_FALSE(opr::conv_direct_applies(p, {1, 8, 8, 8}, {8, 8, 1, 1})) << "a plain GEMM";
    p.pad_w = 1;
    EXPECT_FALSE(opr::conv_direct_applies(p, {1, 8, 8, 8}, {8, 8, 1, 1}))
        << "output wider than the input";
    p = {};
    p.stride_h = 2;
    EXPECT_FALSE(opr::conv_direct_applies(p, {1, 8, 8, 8}, {8, 8, 3, 3})) << "stride 2";
    p = {};
    p.groups = 2;
    EXPECT_FALSE(opr::conv_direct_applies(p, {1, 8, 8, 8}, {8, 4, 3, 3})) << "groups";
    p = {};
    p.dilation_w = 2;
    EXPECT_FALSE(opr::conv_direct_applies(p, {1, 8, 8, 8}, {8, 8, 3, 3})) << "dilation";
    p = {};
    EXPECT_FALSE(opr::conv_direct_applies(p, {1, 256, 64, 64}, {8, 256, 3, 3}))
        << "an input beyond DIRECT_MAX_INPUT_BYTES";
    p.pad_w = 1;
    EXPECT_FALSE(opr::conv_direct_applies(p, {1, 129, 1, 3}, {128, 129, 1, 3}))
        << "positions for under a quarter of a tile";
    p = {};
    EXPECT_FALSE(opr::conv_direct_applies(p, {1, 2, 9, 3}, {4, 2, 1, 5}))
        << "a kernel wider than the padded input";
    // Decline: y untouched.
    Tensor x({1, 8, 8, 8}, dtype::Float32()), w({8, 8, 1, 1}, dtype::Float32());
    Tensor y({1, 8, 8, 8}, dtype::Float32());
    std::fill_n(y.ptr<float>(), 512, 3.f);
    EXPECT_FALSE(opr::conv_direct_forward({}, x, w, y, nullptr));
    EXPECT_EQ(y.ptr<float>()[0], 3.f);
}
