// Conv2d against a direct plain loop: stride, padding, dilation, groups (depthwise included),
// 1x1 kernels, non-square geometry, empty batches, multi-block tiles, every float dtype, and
// each error message.
#include "dense_helpers.h"

#include "base/thread_pool.h"
#include "memory/workspace.h"

#include <random>

using namespace braid;
using namespace braid::test;

namespace {

Tensor ref_conv2d(const Tensor& x, const Tensor& w, const opr::Conv2dParam& p, DType out_dtype) {
    auto xv = values_of(x), wv = values_of(w);
    auto y = conv2d_reference<double>(
        x.shape(), w.shape(), p, [&](size_t xi, size_t wi, size_t) { return xv[xi] * wv[wi]; });
    TensorShape ys = opr::conv2d_output_shape(p, x.shape(), w.shape(), "reference");
    return tensor_of(ys, out_dtype, y);
}

void check_conv(const TensorShape& x, const TensorShape& w, const opr::Conv2dParam& p,
                const DenseDType& dt) {
    OprCase c;
    c.name = fmt::format("conv2d x{} w{} stride={}x{} pad={}x{} dil={}x{} groups={} {}",
                         x.to_string(), w.to_string(), p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                         p.dilation_h, p.dilation_w, p.groups, dt.dtype.name());
    c.shapes = {x, w};
    c.dtypes = {dt.dtype, dt.dtype};
    c.rtol = dt.rtol;
    c.atol = dt.atol * 4; // sums of up to a few hundred products
    c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
        return {opr::Conv2d::make(in[0], in[1], p)};
    };
    c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {ref_conv2d(in[0], in[1], p, dt.dtype)};
    };
    check_operator(c);
}

opr::Conv2dParam conv_param(int stride, int pad, int dilation = 1, int groups = 1) {
    return {stride, stride, pad, pad, dilation, dilation, groups};
}

} // namespace

TEST(Conv2dOpr, GeometryCombinationsMatchDirectLoop) {
    DenseDType f32 = dense_dtypes()[0];
    struct Case {
        TensorShape x, w;
        opr::Conv2dParam p;
    };
    std::vector<Case> cases = {
        {{2, 3, 7, 6}, {4, 3, 3, 3}, conv_param(1, 1)},        // same padding
        {{2, 3, 9, 8}, {5, 3, 3, 3}, conv_param(2, 0)},        // stride 2
        {{1, 3, 9, 8}, {2, 3, 3, 3}, conv_param(2, 1)},        // stride + padding
        {{1, 2, 11, 10}, {3, 2, 3, 3}, conv_param(1, 2, 2)},   // dilation
        {{2, 4, 6, 6}, {6, 2, 3, 3}, conv_param(1, 1, 1, 2)},  // groups
        {{2, 6, 8, 7}, {6, 1, 3, 3}, conv_param(1, 1, 1, 6)},  // depthwise
        {{2, 6, 8, 7}, {12, 2, 3, 3}, conv_param(2, 1, 2, 3)}, // all at once
        {{2, 5, 6, 7}, {4, 5, 1, 1}, conv_param(1, 0)},        // 1x1: no im2col
        {{2, 5, 6, 7}, {4, 5, 1, 1}, conv_param(2, 0)},        // 1x1 strided
        {{1, 3, 5, 5}, {2, 3, 5, 5}, conv_param(1, 0)},        // kernel = input
        {{1, 3, 1, 1}, {2, 3, 3, 3}, conv_param(1, 1)},        // 1x1 image, padded
        {{0, 3, 5, 5}, {2, 3, 3, 3}, conv_param(1, 1)},        // empty batch
        {{1, 0, 5, 5}, {2, 0, 3, 3}, conv_param(1, 1)},        // no input channels
        {{1, 8, 40, 40}, {16, 8, 3, 3}, conv_param(1, 1)},     // blocks narrowed for threads
        {{1, 64, 24, 24}, {8, 64, 3, 3}, conv_param(1, 1)},    // blocks bounded by the cache
        {{1, 16, 30, 30}, {8, 16, 1, 1}, conv_param(1, 0)},    // 1x1, several blocks
        {{2, 3, 7, 9}, {4, 3, 2, 3}, {1, 2, 0, 1, 1, 2, 1}},   // non-square everything
        {{1, 2, 6, 13}, {2, 2, 3, 1}, {3, 1, 1, 0, 2, 1, 1}},  // more asymmetry
    };
    for (auto& cs : cases) check_conv(cs.x, cs.w, cs.p, f32);
}

TEST(Conv2dOpr, HalfPrecisionComputesInFloat32) {
    for (auto& dt : dense_dtypes()) {
        check_conv({2, 4, 7, 6}, {6, 2, 3, 3}, conv_param(1, 1, 1, 2), dt);
        check_conv({1, 3, 5, 5}, {4, 3, 1, 1}, conv_param(1, 0), dt);
    }
}

TEST(Conv2dOpr, ErrorsNameTheOperatorAndValues) {
    auto g = ComputingGraph::make();
    auto in = [&](const char* name, TensorShape s, DType dt = dtype::Float32()) {
        return opr::Input::make(*g, name, dt, s);
    };
    auto x = in("x", {1, 4, 8, 8}), w = in("w", {6, 4, 3, 3});
    expect_error<ValueError>(
        [&] {
            opr::Conv2d::make(x, w, {0, 1});
        },
        {"Conv2d", "strides must be >= 1", "0x1"});
    expect_error<ValueError>(
        [&] {
            opr::Conv2d::make(x, w, {1, 1, 0, 0, 1, 0});
        },
        {"dilations must be >= 1"});
    expect_error<ValueError>(
        [&] {
            opr::Conv2d::make(x, w, {1, 1, -1, 0});
        },
        {"paddings must be >= 0", "-1x0"});
    expect_error<ValueError>([&] { opr::conv2d(x, w, 1, 0, 1, 0); }, {"groups must be >= 1"});
    expect_error<ShapeError>(
        [&] {
            opr::conv2d(in("x3", {1, 3, 8, 8}), in("w3", {6, 1, 3, 3}), 1, 0, 1, 2);
        },
        {"{1,3,8,8}", "3 channels", "{6,1,3,3}", "expects 2"});
    expect_error<ShapeError>(
        [&] {
            opr::conv2d(x, in("w5", {5, 2, 3, 3}), 1, 0, 1, 2);
        },
        {"groups=2 does not divide the 5 output channels", "{5,2,3,3}"});
    expect_error<ShapeError>(
        [&] {
            opr::conv2d(x, in("wbig", {6, 4, 5, 5}), 1, 0, 2);
        },
        {"dilated kernel 9x9", "padded input 8x8"});
    expect_error<ShapeError>(
        [&] {
            opr::conv2d(in("x3d", {4, 8, 8}), w);
        },
        {"4-D", "{4,8,8}", "{6,4,3,3}"});
    expect_error<DTypeError>(
        [&] {
            opr::conv2d(in("xi", {1, 4, 8, 8}, dtype::Int32()),
                        in("wi", {6, 4, 3, 3}, dtype::Int32()));
        },
        {"Conv2d", "int32"});
    expect_error<DTypeError>(
        [&] {
            opr::conv2d(x, in("wh", {6, 4, 3, 3}, dtype::Float16()));
        },
        {"float32", "float16"});
}

TEST(Conv2dOpr, Im2colRunsInTheWorkspaceItsOperatorPlans) {
    // conv2d_forward_workspace() (what the memory plan places for the operator where oneDNN
    // declines) is what the im2col kernel asks for, over blocks, groups, batches and threads;
    // a workspace a cache line short makes it allocate its own, and the results agree.
    struct Case {
        TensorShape x, w;
        opr::Conv2dParam p;
    };
    std::vector<Case> cases = {
        {{1, 8, 40, 40}, {16, 8, 3, 3}, conv_param(2, 1)},      // stride 2
        {{2, 3, 30, 30}, {6, 1, 5, 5}, conv_param(1, 2, 1, 3)}, // groups, batch
        {{1, 24, 74, 32}, {24, 24, 1, 3}, conv_param(1, 1)},    // 1x3
        {{1, 1, 200, 64}, {32, 1, 3, 3}, conv_param(1, 1, 2)},  // one channel, dilation
        {{1, 64, 9, 9}, {64, 64, 3, 3}, conv_param(2, 0)},      // more columns than a block
    };
    size_t saved = kernel_threads(), with_bytes = 0;
    std::mt19937 rng(4);
    for (size_t threads : {size_t(1), size_t(2), size_t(3)}) {
        set_kernel_threads(threads);
        for (const auto& c : cases) {
            std::string what =
                fmt::format("x{} w{} threads={}", c.x.to_string(), c.w.to_string(), threads);
            Tensor x = random_tensor(c.x, dtype::Float32(), rng, -1, 1);
            Tensor w = random_tensor(c.w, dtype::Float32(), rng, -1, 1);
            TensorShape ys = opr::conv2d_output_shape(c.p, c.x, c.w, "test");
            size_t bytes = opr::conv2d_forward_workspace(c.p, c.x, c.w);
            with_bytes += bytes > 0;
            Tensor first;
            for (size_t planned : {bytes, bytes - std::min<size_t>(bytes, 64)}) {
                Workspace ws;
                if (planned) ws.assign(Tensor(TensorShape{planned}, dtype::Uint8()));
                Tensor y(ys, dtype::Float32());
                opr::conv2d_forward(c.p, x, w, y, nullptr, ws);
                if (planned == bytes) {
                    EXPECT_EQ(ws.own_bytes(), 0u) << what;
                    first = y;
                } else {
                    EXPECT_GT(ws.own_bytes(), 0u) << what;
                    expect_tensor_near(y, first, 0, 0, what);
                }
            }
        }
    }
    set_kernel_threads(saved);
    EXPECT_GE(with_bytes, 3 * (cases.size() - 1)) << "im2col runs most of these cases";
}
