// ConvInteger (operators/conv_integer.h) against a direct int64 reference of its definition:
// uint8 and int8 inputs and weights, zero points per tensor and per output channel, strides,
// padding, dilation, groups and batches, on oneDNN's int8 kernel (where the CPU sums exactly)
// and on the portable float32 kernel, at one and several threads; full-range data, where a
// kernel that adds pairs of products in 16 bits would saturate. Results must be equal.
#include "checker.h"
#include "reference.h"

#include "base/cpu_isa.h"
#include "base/thread_pool.h"
#include "operators/conv_integer.h"
#include "operators/dnnl_kernels.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

using namespace braid;
using namespace braid::test;

namespace {

struct IntConvCase {
    TensorShape x, w;
    opr::Conv2dParam p;
    DType xt, wt;
    bool per_channel_zero_point = false;
};

std::string describe(const IntConvCase& c) {
    return fmt::format("x{} {} w{} {} stride={}x{} pad={}x{} dil={}x{} groups={} per-channel={}",
                       c.x.to_string(), c.xt.name(), c.w.to_string(), c.wt.name(), c.p.stride_h,
                       c.p.stride_w, c.p.pad_h, c.p.pad_w, c.p.dilation_h, c.p.dilation_w,
                       c.p.groups, c.per_channel_zero_point);
}

opr::Conv2dParam geometry(int stride, int pad, int dilation = 1, int groups = 1) {
    return {stride, stride, pad, pad, dilation, dilation, groups};
}

//! A tensor of `dt` (uint8 or int8) with values drawn over the dtype's whole range.
Tensor random_8bit(const TensorShape& shape, DType dt, std::mt19937& rng) {
    Tensor t(shape, dt);
    std::uniform_int_distribution<int> d(0, 255);
    auto* p = static_cast<uint8_t*>(t.raw_ptr());
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) p[i] = uint8_t(d(rng));
    return t;
}

int64_t value(const Tensor& t, size_t i) {
    return t.dtype() == dtype::Uint8() ? int64_t(t.ptr<uint8_t>()[i]) : int64_t(t.ptr<int8_t>()[i]);
}

//! The definition: sum over each window's positions inside x of (x - xz)(w - wz[o]).
std::vector<int64_t> reference(const IntConvCase& c, const Tensor& x, const Tensor& w,
                               const Tensor& xz, const Tensor& wz) {
    int64_t a = value(xz, 0);
    bool per_channel = wz.shape().total_nr_elems() != 1;
    return conv2d_reference<int64_t>(c.x, c.w, c.p, [&](size_t xi, size_t wi, size_t oc) {
        return (value(x, xi) - a) * (value(w, wi) - value(wz, per_channel ? oc : 0));
    });
}

struct Built {
    std::unique_ptr<Executable> exec;
    Tensor x;
    std::vector<int64_t> expected;
};

Built build(const IntConvCase& c, uint32_t seed) {
    register_all_operators();
    std::mt19937 rng(seed);
    Built b;
    b.x = random_8bit(c.x, c.xt, rng);
    Tensor w = random_8bit(c.w, c.wt, rng);
    Tensor xz = random_8bit({}, c.xt, rng);
    Tensor wz =
        random_8bit(c.per_channel_zero_point ? TensorShape{c.w[0]} : TensorShape{}, c.wt, rng);
    b.expected = reference(c, b.x, w, xz, wz);
    auto g = ComputingGraph::make({});
    auto constant = [&](const Tensor& t) { return opr::ImmutableTensor::make(*g, t); };
    auto y = opr::ConvInteger::make(opr::Input::make(*g, "x", c.xt, c.x), constant(w), constant(xz),
                                    constant(wz), c.p);
    b.exec = g->compile({y});
    return b;
}

std::vector<IntConvCase> cases() {
    auto u8 = dtype::Uint8(), s8 = dtype::Int8();
    return {
        // An image model's layers: uint8 activations and weights, each with a zero point.
        {{1, 64, 12, 12}, {32, 64, 3, 3}, geometry(1, 1), u8, u8},
        {{1, 3, 17, 16}, {16, 3, 3, 3}, geometry(2, 1), u8, u8},            // image stem, stride 2
        {{2, 16, 9, 11}, {24, 16, 3, 3}, geometry(1, 1), u8, s8},           // batch 2, int8 weights
        {{1, 32, 11, 11}, {16, 32, 3, 3}, geometry(1, 2, 2), s8, s8, true}, // dilation
        {{1, 16, 10, 10}, {16, 16, 3, 3}, geometry(1, 4, 4), u8, u8},       // dilation 4
        {{2, 16, 8, 8}, {32, 4, 3, 3}, geometry(1, 1, 1, 4), u8, u8, true}, // groups
        {{1, 24, 7, 7}, {24, 1, 3, 3}, geometry(1, 1, 1, 24), s8, u8},      // depthwise
        {{1, 40, 6, 5}, {24, 40, 1, 1}, geometry(1, 0), u8, s8, true},      // pointwise
        {{1, 8, 9, 9}, {8, 8, 5, 5}, {2, 1, 2, 1, 1, 1, 1}, u8, u8},        // anisotropic
        // Rows enough for bands of output rows at two threads (above 2M multiply-adds).
        {{1, 32, 48, 40}, {32, 32, 3, 3}, geometry(1, 1), u8, u8},
        // 600 products per sum: the portable kernel splits the channels into exact chunks.
        {{1, 100, 6, 6}, {8, 50, 3, 3}, geometry(1, 1, 1, 2), u8, u8},
    };
}

void expect_equal(const Tensor& y, const std::vector<int64_t>& expected, const std::string& what) {
    ASSERT_EQ(y.dtype(), dtype::Int32()) << what;
    ASSERT_EQ(y.shape().total_nr_elems(), expected.size()) << what;
    const int32_t* p = y.ptr<int32_t>();
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < expected.size(); ++i)
        if (int64_t(p[i]) != expected[i] && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0u) << what << ": first difference at " << first << ": " << p[first]
                       << " against " << expected[first];
}

} // namespace

TEST(ConvInteger, EqualsTheDefinitionOnBothKernelsAndThreadCounts) {
    size_t saved = kernel_threads();
    for (size_t threads : {size_t(1), size_t(2)})
        for (const auto& c : cases()) {
            set_kernel_threads(threads);
            auto b = build(c, 11);
            for (bool dnnl : {true, false}) {
                opr::kern::set_dnnl_conv_enabled(dnnl);
                std::string what =
                    describe(c) + fmt::format(" threads={} oneDNN={}", threads, dnnl);
                // Twice: the second run uses the weights kept from the first.
                for (int run = 0; run < 2; ++run) {
                    b.exec->feed("x", b.x).run();
                    expect_equal(b.exec->output(0), b.expected, what);
                }
            }
            opr::kern::set_dnnl_conv_enabled(true);
        }
    set_kernel_threads(saved);
}

TEST(ConvInteger, OneDnnRunsItWhereItsInt8KernelsSumExactly) {
    if (!opr::kern::dnnl_conv_enabled()) GTEST_SKIP() << "braid was built without oneDNN";
    // oneDNN's int8 kernels sum exactly with AVX-512 VNNI (on AVX2 they saturate, and braid
    // caps oneDNN to plain AVX2 under BRAID_MAX_CPU_ISA=avx2).
    bool vnni = cpu_isa() == CpuIsa::AVX512 && __builtin_cpu_supports("avx512vnni") &&
                !std::getenv("ONEDNN_MAX_CPU_ISA");
    std::mt19937 rng(2);
    Tensor x = random_8bit({1, 64, 20, 20}, dtype::Uint8(), rng);
    Tensor w = random_8bit({32, 64, 3, 3}, dtype::Int8(), rng);
    Tensor y(TensorShape{1, 32, 20, 20}, dtype::Int32());
    Workspace ws;
    bool ran = opr::kern::dnnl_conv_integer_forward(geometry(1, 1), x, w, 7, y, nullptr, ws);
    if (vnni) EXPECT_TRUE(ran) << "an AVX-512 VNNI CPU runs integer convolutions in oneDNN";
    if (cpu_isa() < CpuIsa::AVX512 && !std::getenv("ONEDNN_MAX_CPU_ISA"))
        EXPECT_FALSE(ran) << "without VNNI oneDNN's int8 sums saturate";
}

TEST(ConvInteger, OneDnnSumsSevenBitSourcesExactlyWithoutVnniToo) {
    // What ConvInteger runs on CPUs without VNNI: a uint8 source below 128 keeps each pair of
    // products within 16 bits, so every int8 kernel of oneDNN (AVX2 included) sums exactly.
    if (!opr::kern::dnnl_conv_enabled()) GTEST_SKIP() << "braid was built without oneDNN";
    if (cpu_isa() < CpuIsa::AVX2) GTEST_SKIP() << "oneDNN has no int8 JIT kernel below AVX2";
    std::mt19937 rng(6);
    IntConvCase c{{1, 64, 20, 20}, {32, 64, 3, 3}, geometry(1, 1), dtype::Uint8(), dtype::Int8()};
    Tensor x = random_8bit(c.x, c.xt, rng), w = random_8bit(c.w, c.wt, rng);
    for (size_t i = 0; i < c.x.total_nr_elems(); ++i) x.ptr<uint8_t>()[i] &= 127;
    Tensor xz(TensorShape{}, dtype::Uint8()), wz(TensorShape{}, dtype::Int8());
    xz.ptr<uint8_t>()[0] = 77;
    wz.ptr<int8_t>()[0] = 0;
    Tensor y(TensorShape{1, 32, 20, 20}, dtype::Int32());
    Workspace ws;
    ASSERT_TRUE(opr::kern::dnnl_conv_integer_forward(c.p, x, w, 77, y, nullptr, ws, true))
        << "oneDNN declined a 7-bit source";
    expect_equal(y, reference(c, x, w, xz, wz), "7-bit source");
}

TEST(ConvInteger, RefusesWhatItCannotComputeExactly) {
    register_all_operators();
    auto g = ComputingGraph::make({});
    auto u8 = dtype::Uint8();
    auto zeros = [&](const TensorShape& shape, DType dt) {
        Tensor t(shape, dt);
        std::memset(t.raw_ptr(), 0, shape.total_nr_elems() * dt.size());
        return opr::ImmutableTensor::make(*g, t);
    };
    auto scalar = [&](DType dt) { return zeros({}, dt); };
    auto x = opr::Input::make(*g, "x", u8, {1, 2, 20, 20});
    auto w = zeros({4, 2, 17, 17}, u8);
    EXPECT_THROW(opr::ConvInteger::make(x, w, scalar(u8), scalar(u8)), ShapeError)
        << "a 17x17 window (289 products) exceeds what float32 sums exactly";
    auto w3 = zeros({4, 2, 3, 3}, u8);
    EXPECT_THROW(opr::ConvInteger::make(x, w3, scalar(dtype::Int8()), scalar(u8)), DTypeError);
    auto three = zeros({3}, u8);
    EXPECT_THROW(opr::ConvInteger::make(x, w3, scalar(u8), three), ShapeError)
        << "a weight zero point of 3 elements for 4 output channels";
    auto xf = opr::Input::make(*g, "xf", dtype::Float32(), {1, 2, 20, 20});
    EXPECT_THROW(opr::ConvInteger::make(xf, w3, scalar(dtype::Float32()), scalar(u8)), DTypeError);
}
