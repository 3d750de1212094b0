// RoiAlign on images where bilinear sampling is exact (a ramp): the bins' averages are known in
// closed form; the maximum mode, the legacy coordinates, and the errors.
#include "braid.h"
#include "operators/roi_align.h"

#include <gtest/gtest.h>

using namespace braid;

namespace {

//! An n x c x h x w image whose value is `ax` * column + `ay` * row.
Tensor ramp(size_t n, size_t c, size_t h, size_t w, float ax, float ay) {
    Tensor t(TensorShape{n, c, h, w}, dtype::Float32());
    float* p = t.ptr<float>();
    for (size_t i = 0; i < n * c; ++i)
        for (size_t y = 0; y < h; ++y)
            for (size_t x = 0; x < w; ++x) *p++ = ax * float(x) + ay * float(y) + float(i);
    return t;
}

Tensor tensor(DType dt, const TensorShape& shape, const std::vector<double>& v) {
    Tensor t(shape, dt);
    convert_elements(dtype::Float64(), v.data(), dt, t.raw_ptr(), v.size());
    return t;
}

std::vector<float> floats_of(const Tensor& t) {
    Tensor c = t.contiguous();
    return {c.ptr<float>(), c.ptr<float>() + c.shape().total_nr_elems()};
}

} // namespace

TEST(RoiAlign, AveragesOfARampAreTheRampAtTheSamplePointsMean) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::ImmutableTensor::make(*g, ramp(2, 1, 8, 8, 1.f, 10.f));
    // Roi 0 on image 0, [1, 1] to [5, 5]: with half-pixel corners the roi starts at 0.5 and
    // each of the 2x2 bins, 2 pixels wide, samples 2x2 points at 1 and 2 (then 3 and 4) along
    // each axis. Roi 1 on image 1 (values +1), the same box.
    auto rois =
        opr::ImmutableTensor::make(*g, tensor(dtype::Float32(), {2, 4}, {1, 1, 5, 5, 1, 1, 5, 5}));
    auto bi = opr::ImmutableTensor::make(*g, tensor(dtype::Int64(), {2}, {0, 1}));
    auto avg = opr::RoiAlign::make(x, rois, bi, {opr::PoolMode::AVERAGE, 2, 2, 2, 1.f, true});
    EXPECT_EQ(avg.shape(), (TensorShape{2, 1, 2, 2}));
    // Without half-pixel corners the roi starts at 1: sample points 1.5, 2.5 and 3.5, 4.5.
    auto legacy = opr::RoiAlign::make(x, rois, bi, {opr::PoolMode::AVERAGE, 2, 2, 2, 1.f, false});
    // The maximum of a constant image is the constant, at points on the pixel grid.
    auto ones = opr::ImmutableTensor::make(*g, ramp(1, 1, 8, 8, 0.f, 0.f));
    auto zero = opr::ImmutableTensor::make(*g, tensor(dtype::Int64(), {1}, {0}));
    auto one_roi = opr::ImmutableTensor::make(*g, tensor(dtype::Float32(), {1, 4}, {1, 1, 5, 5}));
    auto mx =
        opr::RoiAlign::make(ones + 1.0, one_roi, zero, {opr::PoolMode::MAX, 2, 2, 2, 1.f, true});
    auto exec = g->compile({avg, legacy, mx});
    exec->run();
    EXPECT_EQ(floats_of(exec->output(0)),
              (std::vector<float>{16.5f, 18.5f, 36.5f, 38.5f, 17.5f, 19.5f, 37.5f, 39.5f}));
    EXPECT_EQ(floats_of(exec->output(1)),
              (std::vector<float>{22.f, 24.f, 42.f, 44.f, 23.f, 25.f, 43.f, 45.f}));
    EXPECT_EQ(floats_of(exec->output(2)), (std::vector<float>{1.f, 1.f, 1.f, 1.f}));
}

TEST(RoiAlign, BadInputsAreNamed) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), TensorShape{1, 2, 4, 4});
    auto rois = opr::Input::make(*g, "rois", dtype::Float32(), TensorShape{3, 4});
    auto bi = opr::Input::make(*g, "bi", dtype::Int64(), TensorShape{2});
    EXPECT_THROW(opr::RoiAlign::make(x, rois, bi, {}), ShapeError);
    auto bi3 = opr::Input::make(*g, "bi3", dtype::Int64(), TensorShape{3});
    auto y = opr::RoiAlign::make(x, rois, bi3, {});
    auto exec = g->compile({y});
    exec->feed("x", ramp(1, 2, 4, 4, 1.f, 1.f))
        .feed("rois", tensor(dtype::Float32(), {3, 4}, std::vector<double>(12, 1.0)))
        .feed("bi3", tensor(dtype::Int64(), {3}, {0, 0, 1}));
    try {
        exec->run();
        FAIL() << "ran with a batch index past the batch";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("batch index 1 of roi 2 is outside [0, 1)"),
                  std::string::npos)
            << e.what();
    }
}
