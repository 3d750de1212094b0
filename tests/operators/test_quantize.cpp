// DynamicQuantizeLinear (operators/quantize.h) against ONNX's definition computed here element
// by element: mixed, one-signed, all-zero, NaN and infinite inputs, values on the rounding
// ties, and a tensor large enough to be split over threads. Results must be equal.
#include "checker.h"

#include "base/thread_pool.h"
#include "operators/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace braid;
using namespace braid::test;

namespace {

struct Quantized {
    std::vector<uint8_t> y;
    float scale;
    uint8_t zero_point;
};

//! ONNX's DynamicQuantizeLinear (its reference implementation's arithmetic), NaN giving a NaN
//! scale and zeros.
Quantized definition(const std::vector<float>& x) {
    float lo = 0, hi = 0;
    bool nan = false;
    for (float v : x) {
        nan |= std::isnan(v);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    if (nan) lo = hi = std::numeric_limits<float>::quiet_NaN();
    Quantized q;
    q.scale = (hi == lo ? 1.f : hi - lo) / 255.f;
    auto saturate = [](float v) {
        return std::isnan(v) ? uint8_t(0) : uint8_t(std::clamp(v, 0.f, 255.f));
    };
    q.zero_point = saturate(std::nearbyint(-lo / q.scale));
    for (float v : x) {
        volatile float ratio = v / q.scale; // rounded to float before it is rounded to integer
        q.y.push_back(saturate(std::nearbyint(ratio) + float(q.zero_point)));
    }
    return q;
}

Quantized run(const std::vector<float>& x) {
    register_all_operators();
    auto g = ComputingGraph::make({});
    auto in = opr::Input::make(*g, "x", dtype::Float32(), {x.size()});
    auto out = opr::DynamicQuantizeLinear::make(in);
    auto exec = g->compile({out[0], out[1], out[2]});
    Tensor t(TensorShape{x.size()}, dtype::Float32());
    std::copy(x.begin(), x.end(), t.ptr<float>());
    exec->feed("x", t).run();
    Quantized q;
    const uint8_t* y = exec->output(0).ptr<uint8_t>();
    q.y.assign(y, y + x.size());
    q.scale = exec->output(1).ptr<float>()[0];
    q.zero_point = exec->output(2).ptr<uint8_t>()[0];
    return q;
}

void expect_same(const std::vector<float>& x, const std::string& what) {
    Quantized want = definition(x), got = run(x);
    if (std::isnan(want.scale))
        EXPECT_TRUE(std::isnan(got.scale)) << what << ": scale " << got.scale;
    else
        EXPECT_EQ(got.scale, want.scale) << what;
    EXPECT_EQ(int(got.zero_point), int(want.zero_point)) << what;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < x.size(); ++i)
        if (got.y[i] != want.y[i] && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0u) << what << ": first difference at " << first << " (x = " << x[first]
                       << "): " << int(got.y[first]) << " against " << int(want.y[first]);
}

} // namespace

TEST(DynamicQuantizeLinear, FollowsTheDefinition) {
    std::mt19937 rng(4);
    std::normal_distribution<float> normal(0.3f, 2.f);
    std::vector<float> mixed(1000);
    for (float& v : mixed) v = normal(rng);
    expect_same(mixed, "mixed signs");
    std::vector<float> positive = mixed, negative = mixed;
    for (float& v : positive) v = std::abs(v) + 0.5f;
    for (float& v : negative) v = -std::abs(v);
    expect_same(positive, "positive: zero point 0");
    expect_same(negative, "non-positive: zero point 255");
    expect_same({2.5f, -1.f, 0.f, 7.f, 1e-8f}, "ONNX's example");
    // Ties: with range [0, 255] the scale is 1 and x / scale lands on halves, rounded to even.
    std::vector<float> ties{0.f, 255.f};
    for (int i = 0; i < 40; ++i) ties.push_back(float(i) + 0.5f);
    expect_same(ties, "ties round half to even");
}

TEST(DynamicQuantizeLinear, DegenerateInputsHaveDefinedResults) {
    expect_same(std::vector<float>(37, 0.f), "all zeros: scale 1/255");
    float inf = std::numeric_limits<float>::infinity();
    expect_same({1.f, inf, -2.f}, "an infinity");
    expect_same({1.f, std::numeric_limits<float>::quiet_NaN(), -2.f}, "a NaN");
    EXPECT_TRUE(std::isnan(run({std::numeric_limits<float>::quiet_NaN()}).scale));
    expect_same({5.f}, "one element");
}

TEST(DynamicQuantizeLinear, LargeTensorsSplitOverThreadsGiveTheSameResult) {
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> d(-3.f, 11.f);
    std::vector<float> x(1 << 20);
    for (float& v : x) v = d(rng);
    x[777777] = -9.f; // the minimum in a late block
    size_t saved = kernel_threads();
    for (size_t threads : {size_t(1), size_t(2), size_t(3)}) {
        set_kernel_threads(threads);
        expect_same(x, fmt::format("{} threads", threads));
    }
    set_kernel_threads(saved);
}

TEST(DynamicQuantizeLinear, RefusesOtherDtypes) {
    register_all_operators();
    auto g = ComputingGraph::make({});
    auto x = opr::Input::make(*g, "x", dtype::Float64(), {4});
    EXPECT_THROW(opr::DynamicQuantizeLinear::make(x), DTypeError);
}
