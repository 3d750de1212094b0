// The oneDNN convolution (operators/dnnl_kernels.h) against braid's im2col kernel on the same
// graphs: Conv2d and FusedConv2d (bias, folded batch norm, activations) over strides, padding,
// dilation, groups (split over threads at batch 1), batches and odd channel counts, at one and
// several kernel threads; weights
// changed in place between runs; and which implementation oneDNN runs for the common cases.
#include "checker.h"

#include "base/cpu_isa.h"
#include "base/thread_pool.h"
#include "operators/dnnl_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

using namespace braid;
using namespace braid::test;

namespace {

struct ConvCase {
    TensorShape x, w;
    opr::Conv2dParam p;
    bool bias = false, batch_norm = false;
    SymbolVar (*act)(SymbolVar) = nullptr;
};

std::string describe(const ConvCase& c) {
    return fmt::format("x{} w{} stride={}x{} pad={}x{} dil={}x{} groups={} bias={} bn={} act={}",
                       c.x.to_string(), c.w.to_string(), c.p.stride_h, c.p.stride_w, c.p.pad_h,
                       c.p.pad_w, c.p.dilation_h, c.p.dilation_w, c.p.groups, c.bias, c.batch_norm,
                       c.act != nullptr);
}

//! A compiled conv chain with its weights held by the test, so they can change between runs.
struct ConvGraph {
    std::unique_ptr<Executable> exec;
    std::shared_ptr<Tensor> weight;
    Tensor x;
};

//! With `constant`, the weights and batch norm are constants (ImmutableTensor, as a model's
//! initializers), whose oneDNN forms are made once and kept by the operator.
ConvGraph build(const ConvCase& c, uint32_t seed = 5, bool constant = false) {
    register_all_operators();
    std::mt19937 rng(seed);
    size_t o = c.w[0];
    ConvGraph cg;
    cg.weight = std::make_shared<Tensor>(random_tensor(c.w, dtype::Float32(), rng, -.3, .3));
    auto stat = [&](double lo, double hi) {
        return std::make_shared<Tensor>(random_tensor({o}, dtype::Float32(), rng, lo, hi));
    };
    auto bias = stat(-.5, .5), scale = stat(.5, 1.5), shift = stat(-.5, .5), mean = stat(-.2, .2),
         var = stat(.5, 2);
    cg.x = random_tensor(c.x, dtype::Float32(), rng, -1, 1);
    auto g = ComputingGraph::make({});
    auto param = [&](const std::shared_ptr<Tensor>& t) {
        return constant ? opr::ImmutableTensor::make(*g, *t) : opr::SharedParam::make(*g, t);
    };
    auto xv = opr::Input::make(*g, "x", dtype::Float32(), c.x);
    auto y = opr::Conv2d::make(xv, param(cg.weight), c.p);
    if (c.bias) y = y + param(bias).reshape({1, long(o), 1, 1});
    if (c.batch_norm)
        y = opr::batch_norm(y, param(scale), param(shift), param(mean), param(var), 1e-3f);
    if (c.act) y = c.act(y);
    cg.exec = g->compile({y});
    return cg;
}

Tensor run(ConvGraph& cg, bool dnnl) {
    opr::kern::set_dnnl_conv_enabled(dnnl);
    cg.exec->feed("x", cg.x).run();
    Tensor y = cg.exec->output(0).copy();
    opr::kern::set_dnnl_conv_enabled(true);
    return y;
}

opr::Conv2dParam geometry(int stride, int pad, int dilation = 1, int groups = 1) {
    return {stride, stride, pad, pad, dilation, dilation, groups};
}

/*!
 * Tolerances: both paths sum the same products in float32 in different orders; Winograd
 * (3x3, stride 1) adds its transforms' rounding, a few float32 ulp of the terms' magnitude.
 * Outputs here are O(1) with up to 576 terms per sum; the differences seen are of order 1e-6.
 */
constexpr double RTOL = 1e-4, ATOL = 2e-5;

std::vector<ConvCase> cases() {
    auto relu = opr::relu;
    auto sigmoid = opr::sigmoid;
    return {
        {{1, 64, 14, 14}, {64, 64, 3, 3}, geometry(1, 1), false, true, relu},   // Winograd
        {{2, 16, 9, 11}, {24, 16, 3, 3}, geometry(1, 1)},                       // batch 2
        {{1, 3, 32, 32}, {16, 3, 7, 7}, geometry(2, 3), false, true, relu},     // image stem
        {{1, 13, 10, 9}, {21, 13, 3, 3}, geometry(1, 1), true, false, relu},    // odd channels
        {{2, 8, 12, 12}, {16, 8, 3, 3}, geometry(2, 1), true, true, sigmoid},   // other act
        {{1, 16, 11, 11}, {32, 16, 3, 3}, geometry(1, 2, 2)},                   // dilation
        {{2, 16, 8, 8}, {32, 4, 3, 3}, geometry(1, 1, 1, 4), true, true, relu}, // groups
        {{3, 8, 6, 6}, {8, 1, 3, 3}, geometry(1, 1, 1, 8)},                     // depthwise
        {{1, 32, 7, 7}, {40, 32, 1, 1}, geometry(2, 0), false, true},           // 1x1 stride 2
        {{2, 5, 9, 7}, {7, 5, 2, 3}, geometry(1, 0)},                           // non-square
        {{1, 16, 5, 5}, {48, 16, 5, 5}, {2, 1, 2, 1, 1, 1, 1}},                 // anisotropic
        // A batch of one split over threads by whole groups, each block its own source slice
        // (above 2M multiply-adds; smaller ones run as one block):
        {{1, 96, 80, 80}, {96, 1, 3, 3}, geometry(1, 1, 1, 96), true, true, relu},  // depthwise
        {{1, 64, 32, 32}, {128, 16, 3, 3}, geometry(1, 1, 1, 4)},                   // 4 groups
        {{1, 26, 40, 40}, {26, 13, 3, 3}, geometry(1, 1, 1, 2), false, true},       // 2 groups
        {{1, 48, 10, 10}, {48, 1, 5, 5}, geometry(1, 2, 1, 48), false, true, relu}, // depthwise
        {{1, 40, 9, 9}, {40, 1, 3, 3}, geometry(2, 1, 1, 40), true},                // stride 2
        {{1, 13, 7, 7}, {13, 1, 3, 3}, geometry(1, 1, 1, 13)}, // odd, one group a unit
        {{1, 16, 8, 8}, {32, 4, 3, 3}, geometry(1, 1, 1, 4), false, true, relu}, // 4 groups
        {{1, 16, 6, 6}, {16, 8, 3, 3}, geometry(1, 1, 1, 2)},  // two groups, one per block
        {{1, 24, 6, 6}, {48, 1, 3, 3}, geometry(1, 1, 1, 24)}, // depthwise, 2 outputs each
        // A batch of one split over threads into bands of output rows (above 2M multiply-adds
        // per band and 8 rows), each band padded at the image's edges only; the last band of a
        // stride-2 convolution needs less padding below than the convolution has.
        {{1, 32, 65, 40}, {24, 32, 3, 3}, geometry(2, 1), false, true, relu},
        {{1, 16, 30, 30}, {32, 16, 5, 5}, geometry(1, 2), true},
        {{1, 16, 100, 52}, {32, 16, 3, 3}, {2, 2, 0, 1, 1, 1, 1}},
    };
}

} // namespace

TEST(Conv2dDnnl, MatchesIm2colKernelOverGeometriesAndThreadCounts) {
    if (!opr::kern::dnnl_conv_enabled()) GTEST_SKIP() << "braid was built without oneDNN";
    size_t saved = kernel_threads();
    for (size_t threads : {size_t(1), size_t(2), size_t(3)}) {
        set_kernel_threads(threads);
        for (const auto& c : cases())
            for (bool constant : {false, true}) {
                auto cg = build(c, 5, constant);
                Tensor fallback = run(cg, false);
                std::string what =
                    describe(c) + fmt::format(" threads={} constant={}", threads, constant);
                // Twice: the second run of constant weights uses the kept ones.
                expect_tensor_near(run(cg, true), fallback, RTOL, ATOL, what);
                expect_tensor_near(run(cg, true), fallback, RTOL, ATOL, what + " (again)");
            }
    }
    set_kernel_threads(saved);
}

TEST(Conv2dDnnl, WeightsChangedBetweenRunsAreUsed) {
    if (!opr::kern::dnnl_conv_enabled()) GTEST_SKIP() << "braid was built without oneDNN";
    // Winograd (packed weights kept between runs) and a direct kernel, fused and not.
    for (const auto& c : {cases()[0], cases()[1], cases()[2]}) {
        auto cg = build(c);
        Tensor first = run(cg, true);
        float* w = cg.weight->ptr<float>();
        size_t count = cg.weight->shape().total_nr_elems();
        for (size_t i = 0; i < count; ++i) w[i] = -0.5f * w[i] + 0.01f * float(i % 7);
        Tensor updated = run(cg, true);
        Tensor fallback = run(cg, false);
        expect_tensor_near(updated, fallback, RTOL, ATOL, describe(c) + " after the update");
        // The update changed the result, so the comparison above saw the new weights.
        const float *a = first.ptr<float>(), *b = updated.ptr<float>();
        size_t n = first.shape().total_nr_elems();
        EXPECT_FALSE(std::equal(a, a + n, b)) << describe(c);
    }
}

TEST(Conv2dDnnl, RepeatedRunsAreBitIdentical) {
    if (!opr::kern::dnnl_conv_enabled()) GTEST_SKIP() << "braid was built without oneDNN";
    auto cg = build(cases()[0]);
    Tensor first = run(cg, true);
    for (int i = 0; i < 5; ++i) {
        Tensor again = run(cg, true);
        const float *a = first.ptr<float>(), *b = again.ptr<float>();
        ASSERT_TRUE(std::equal(a, a + first.shape().total_nr_elems(), b)) << "run " << i;
    }
}

TEST(Conv2dDnnl, CommonShapesRunJitKernels) {
    if (!opr::kern::dnnl_conv_enabled()) GTEST_SKIP() << "braid was built without oneDNN";
    auto impl = [](const opr::Conv2dParam& p, const TensorShape& x, const TensorShape& w) {
        return opr::kern::dnnl_conv2d_impl(p, x, w);
    };
    std::string stem = impl(geometry(2, 3), {1, 3, 224, 224}, {64, 3, 7, 7});
    std::string body = impl(geometry(1, 1), {1, 64, 56, 56}, {64, 64, 3, 3});
    std::string down = impl(geometry(2, 1), {1, 64, 56, 56}, {128, 64, 3, 3});
    for (const auto& s : {stem, body, down}) {
        EXPECT_NE(s, "") << "oneDNN declined a common convolution";
        EXPECT_EQ(s.rfind("ref", 0), std::string::npos) << s;
        // braid's instruction-set cap (BRAID_MAX_CPU_ISA) reaches oneDNN's kernel choice.
        if (cpu_isa() < CpuIsa::AVX512 && !std::getenv("ONEDNN_MAX_CPU_ISA")) {
            EXPECT_EQ(s.find("avx512"), std::string::npos)
                << s << " under the cap " << cpu_isa_name(cpu_isa());
        }
        if (cpu_isa() < CpuIsa::AVX2 && !std::getenv("ONEDNN_MAX_CPU_ISA")) {
            EXPECT_EQ(s.find("avx2"), std::string::npos) << s;
        }
    }
    opr::kern::set_dnnl_conv_enabled(false);
    EXPECT_EQ(impl(geometry(1, 1), {1, 64, 56, 56}, {64, 64, 3, 3}), "");
    opr::kern::set_dnnl_conv_enabled(true);
}

TEST(Conv2dDnnl, ABatchOfOneDepthwiseConvolutionRunsOneDnnOnEveryThreadCount) {
    // A depthwise convolution of one image is split over the threads by whole groups (each a
    // grouped convolution of its own channels); it no longer falls back to braid's kernel when
    // there are more threads than images.
    if (!opr::kern::dnnl_conv_enabled()) GTEST_SKIP() << "braid was built without oneDNN";
    std::mt19937 rng(3);
    Tensor x = random_tensor({1, 48, 10, 10}, dtype::Float32(), rng, -1, 1);
    Tensor w = random_tensor({48, 1, 5, 5}, dtype::Float32(), rng, -.3, .3);
    size_t saved = kernel_threads();
    for (size_t threads : {size_t(1), size_t(2), size_t(3)}) {
        set_kernel_threads(threads);
        Tensor y(TensorShape{1, 48, 10, 10}, dtype::Float32());
        Workspace ws;
        EXPECT_TRUE(opr::kern::dnnl_conv2d_forward(geometry(1, 2, 1, 48), x, w, y, {}, nullptr, ws))
            << "threads=" << threads;
    }
    set_kernel_threads(saved);
}

TEST(Conv2dDnnl, RunsInTheWorkspaceItsOperatorPlans) {
    // What dnnl_conv2d_workspace() says (what the memory plan places for the operator) is what
    // the kernel asks for: it never allocates beside the planned workspace, over bands, channel
    // and group blocks, batches, Winograd and a folded batch norm's scaled weights.
    if (!opr::kern::dnnl_conv_enabled()) GTEST_SKIP() << "braid was built without oneDNN";
    size_t saved = kernel_threads();
    size_t with_bytes = 0;
    for (size_t threads : {size_t(1), size_t(2), size_t(3)}) {
        set_kernel_threads(threads);
        for (const auto& c : cases()) {
            std::mt19937 rng(9);
            Tensor x = random_tensor(c.x, dtype::Float32(), rng, -1, 1);
            Tensor w = random_tensor(c.w, dtype::Float32(), rng, -.3, .3);
            std::vector<float> scale(c.w[0], 0.75f), shift(c.w[0], 0.25f);
            opr::kern::DnnlConvFusion fusion;
            if (c.batch_norm) fusion.scale = scale.data();
            if (c.batch_norm || c.bias) fusion.shift = shift.data();
            std::string what = describe(c) + fmt::format(" threads={}", threads);
            size_t bytes = opr::kern::dnnl_conv2d_workspace(c.p, c.x, c.w, fusion).value_or(0);
            TensorShape ys = opr::conv2d_output_shape(c.p, c.x, c.w, "test");
            for (size_t planned : {bytes, bytes - std::min<size_t>(bytes, 64)}) {
                Workspace ws;
                if (planned) ws.assign(Tensor(TensorShape{planned}, dtype::Uint8()));
                Tensor y(ys, dtype::Float32());
                bool ran = opr::kern::dnnl_conv2d_forward(c.p, x, w, y, fusion, nullptr, ws);
                if (planned == bytes) {
                    EXPECT_EQ(ws.own_bytes(), 0u) << what << ": " << bytes << " bytes planned";
                } else if (bytes > 0) { // one cache line short: the kernel needs every byte
                    EXPECT_TRUE(ran) << what;
                    EXPECT_GT(ws.own_bytes(), 0u) << what;
                }
            }
            with_bytes += bytes > 0;
        }
    }
    set_kernel_threads(saved);
    EXPECT_GT(with_bytes, cases().size()) << "most cases reorder, so most need a workspace";
}
