// Pooling (max, average with and without padding in the count) against plain loops, NaN
// propagation, every float dtype, and each error message.
#include "dense_helpers.h"

#include <cmath>
#include <limits>

using namespace braid;
using namespace braid::test;

namespace {

Tensor ref_pool(const Tensor& x, const opr::PoolingParam& p, DType out_dtype) {
    const auto& xs = x.shape();
    size_t n = xs[0], c = xs[1], h = xs[2], w = xs[3];
    size_t oh = (h + 2 * p.pad_h - p.window_h) / p.stride_h + 1;
    size_t ow = (w + 2 * p.pad_w - p.window_w) / p.stride_w + 1;
    auto xv = values_of(x);
    std::vector<double> y(n * c * oh * ow);
    for (size_t pl = 0; pl < n * c; ++pl)
        for (size_t i = 0; i < oh; ++i)
            for (size_t j = 0; j < ow; ++j) {
                double mx = -std::numeric_limits<double>::infinity(), sum = 0;
                size_t count = 0;
                bool nan = false;
                for (int a = 0; a < p.window_h; ++a)
                    for (int b = 0; b < p.window_w; ++b) {
                        ptrdiff_t ih = ptrdiff_t(i) * p.stride_h + a - p.pad_h;
                        ptrdiff_t iw = ptrdiff_t(j) * p.stride_w + b - p.pad_w;
                        if (ih < 0 || iw < 0 || ih >= ptrdiff_t(h) || iw >= ptrdiff_t(w)) continue;
                        double v = xv[(pl * h + size_t(ih)) * w + size_t(iw)];
                        nan |= std::isnan(v);
                        mx = std::max(mx, v);
                        sum += v;
                        ++count;
                    }
                double r;
                if (p.mode == opr::PoolMode::MAX)
                    r = nan ? std::nan("") : mx;
                else
                    r = sum / double(p.count_include_pad ? p.window_h * p.window_w : int(count));
                y[(pl * oh + i) * ow + j] = r;
            }
    return tensor_of(TensorShape{n, c, oh, ow}, out_dtype, y);
}

void check_pool(const TensorShape& x, const opr::PoolingParam& p, const DenseDType& dt,
                std::function<void(std::mt19937&, Tensor&, size_t)> fill = {}) {
    OprCase c;
    c.name =
        fmt::format("pool {} x{} window={}x{} stride={}x{} pad={}x{} include_pad={} {}",
                    opr::pool_mode_name(p.mode), x.to_string(), p.window_h, p.window_w, p.stride_h,
                    p.stride_w, p.pad_h, p.pad_w, p.count_include_pad, dt.dtype.name());
    c.shapes = {x};
    c.dtypes = {dt.dtype};
    c.rtol = dt.rtol;
    c.atol = dt.atol;
    c.fill = fill;
    c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
        return {opr::Pooling::make(in[0], p)};
    };
    c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {ref_pool(in[0], p, dt.dtype)};
    };
    check_operator(c);
}

} // namespace

TEST(PoolingOpr, MaxAndAverageOverWindowStridePaddingCombos) {
    DenseDType f32 = dense_dtypes()[0];
    struct Geo {
        TensorShape x;
        int wh, ww, sh, sw, ph, pw;
    };
    std::vector<Geo> geos = {
        {{2, 3, 8, 8}, 2, 2, 2, 2, 0, 0},  // classic 2x2/2
        {{2, 3, 9, 7}, 3, 3, 2, 2, 1, 1},  // 3x3/2 pad 1 (ResNet stem)
        {{1, 2, 7, 7}, 3, 3, 1, 1, 1, 1},  // overlapping windows
        {{1, 2, 6, 9}, 2, 3, 1, 2, 1, 0},  // non-square
        {{1, 4, 5, 6}, 5, 6, 1, 1, 0, 0},  // global pooling
        {{1, 1, 1, 1}, 2, 2, 1, 1, 1, 1},  // 1x1 input, windows mostly padding
        {{0, 3, 4, 4}, 2, 2, 2, 2, 0, 0},  // empty batch
        {{3, 2, 10, 3}, 4, 1, 3, 1, 2, 0}, // odd strides
        // Windows that tile the input (window = stride, no padding), with rows and columns
        // left over, and one large enough to split over threads:
        {{2, 3, 9, 11}, 2, 2, 2, 2, 0, 0},
        {{1, 5, 7, 10}, 1, 2, 1, 2, 0, 0},
        {{2, 2, 7, 5}, 2, 1, 2, 1, 0, 0},
        {{2, 4, 10, 9}, 3, 3, 3, 3, 0, 0},
        {{1, 24, 74, 33}, 2, 2, 2, 2, 0, 0},
        // Rows of several vectors with partial ones left over (the vector kernels of
        // max_pool_vector.h, strides 1 and 2), and a ResNet stem's pool split over threads:
        {{1, 3, 37, 45}, 3, 3, 2, 2, 1, 1},
        {{1, 2, 11, 64}, 3, 3, 2, 2, 1, 1},
        {{1, 2, 12, 50}, 2, 3, 1, 2, 1, 0},
        {{1, 2, 20, 40}, 3, 3, 1, 1, 1, 1},
        {{1, 2, 13, 35}, 5, 5, 1, 1, 2, 2},
        {{2, 1, 6, 70}, 1, 4, 1, 2, 0, 3},
        {{1, 16, 56, 56}, 3, 3, 2, 2, 1, 1},
    };
    for (auto& g : geos)
        for (auto mode : {opr::PoolMode::MAX, opr::PoolMode::AVERAGE})
            for (bool include : {true, false}) {
                if (mode == opr::PoolMode::MAX && !include) continue;
                check_pool(g.x, {mode, g.wh, g.ww, g.sh, g.sw, g.ph, g.pw, include}, f32);
            }
}

TEST(PoolingOpr, HalfPrecisionComputesInFloat32) {
    for (auto& dt : dense_dtypes()) {
        check_pool({2, 3, 9, 7}, {opr::PoolMode::MAX, 3, 3, 2, 2, 1, 1}, dt);
        check_pool({2, 3, 9, 7}, {opr::PoolMode::AVERAGE, 3, 3, 2, 2, 1, 1, false}, dt);
    }
}

TEST(PoolingOpr, MaxPropagatesNaN) {
    auto fill = [](std::mt19937& rng, Tensor& t, size_t) {
        t = random_tensor(t.shape(), t.dtype(), rng);
        t.ptr<float>()[5] = std::nanf(""); // row 1, column 1 of a 4x4 plane
    };
    check_pool({1, 1, 4, 4}, {opr::PoolMode::MAX, 2, 2, 2, 2, 0, 0}, dense_dtypes()[0], fill);
    check_pool({1, 1, 4, 4}, {opr::PoolMode::MAX, 1, 2, 1, 2, 0, 0}, dense_dtypes()[0], fill);
    check_pool({1, 1, 4, 4}, {opr::PoolMode::MAX, 3, 3, 1, 1, 1, 1}, dense_dtypes()[0], fill);
    // Rows of several vectors: NaN in the first, an inner and the last column, and in the
    // first column of a vector's second half (a stride-2 window's odd lanes).
    auto wide = [](std::mt19937& rng, Tensor& t, size_t) {
        t = random_tensor(t.shape(), t.dtype(), rng);
        float* p = t.ptr<float>();
        for (size_t at : {0, 2 * 40 + 17, 4 * 40 + 39, 6 * 40 + 33}) p[at] = std::nanf("");
    };
    for (int stride : {1, 2})
        check_pool({1, 1, 9, 40}, {opr::PoolMode::MAX, 3, 3, stride, stride, 1, 1},
                   dense_dtypes()[0], wide);
}

TEST(PoolingOpr, FreeFunctionsDefaultStrideToWindow) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {1, 2, 9, 8});
    EXPECT_EQ(opr::max_pool2d(x, 3).shape(), (TensorShape{1, 2, 3, 2}));
    EXPECT_EQ(opr::avg_pool2d(x, 2).shape(), (TensorShape{1, 2, 4, 4}));
    EXPECT_EQ(opr::max_pool2d(x, 3, 2, 1).shape(), (TensorShape{1, 2, 5, 4}));
}

TEST(PoolingOpr, ErrorsNameTheOperatorAndValues) {
    auto g = ComputingGraph::make();
    auto in = [&](const char* name, TensorShape s, DType dt = dtype::Float32()) {
        return opr::Input::make(*g, name, dt, s);
    };
    auto x = in("x", {1, 2, 6, 6});
    using opr::PoolMode;
    expect_error<ValueError>(
        [&] {
            opr::Pooling::make(x, {PoolMode::MAX, 2, 2, 0, 2});
        },
        {"Pooling(MAX", "strides must be >= 1", "0x2"});
    expect_error<ValueError>(
        [&] {
            opr::Pooling::make(x, {PoolMode::AVERAGE, 0, 2, 1, 1});
        },
        {"window must be >= 1", "0x2"});
    expect_error<ValueError>([&] { opr::max_pool2d(x, 2, 2, 2); },
                             {"padding 2x2", "smaller than the window 2x2"});
    expect_error<ShapeError>([&] { opr::max_pool2d(in("x3", {2, 6, 6}), 2); }, {"4-D", "{2,6,6}"});
    expect_error<ShapeError>([&] { opr::max_pool2d(x, 7); },
                             {"window 7x7", "padded input 6x6", "{1,2,6,6}"});
    expect_error<ShapeError>(
        [&] {
            opr::max_pool2d(in("e", {1, 2, 0, 6}), 2, 1, 1);
        },
        {"empty spatial dims", "{1,2,0,6}"});
    expect_error<DTypeError>(
        [&] {
            opr::max_pool2d(in("i", {1, 2, 6, 6}, dtype::Int32()), 2);
        },
        {"Pooling", "int32"});
}
