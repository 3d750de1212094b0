// NonZero and NonMaxSuppression: outputs whose size only the values decide, flowing as dynamic
// vars into the operators after them; folded to static shapes when the values are constants.
#include "braid.h"
#include "operators/selection.h"
#include "tests/support/error_text.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace braid;
using braid::testing::error_of;

namespace {

Tensor floats(const TensorShape& shape, const std::vector<float>& v) {
    Tensor t(shape, dtype::Float32());
    std::copy(v.begin(), v.end(), t.ptr<float>());
    return t;
}

std::vector<int64_t> int64s_of(const Tensor& t) {
    Tensor c = t.contiguous();
    return {c.ptr<int64_t>(), c.ptr<int64_t>() + c.shape().total_nr_elems()};
}

} // namespace

TEST(NonZero, CoordinatesOfAFedTensorFlowIntoLaterOperators) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), TensorShape{2, 3});
    auto idx = opr::NonZero::make(x);
    EXPECT_FALSE(idx.node()->shape_known()); // only the values decide the count
    auto total = opr::reduce_sum(idx.astype(dtype::Float32()));
    auto exec = g->compile({idx, total});
    exec->feed("x", floats({2, 3}, {0, 1.5f, 0, -2, 0, 3})).run();
    EXPECT_EQ(exec->output(0).shape(), (TensorShape{2, 3}));
    EXPECT_EQ(int64s_of(exec->output(0)), (std::vector<int64_t>{0, 1, 1, 1, 0, 2}));
    EXPECT_FLOAT_EQ(float(exec->output(1).at(0)), 5.f);
    // Other values, another count; none at all is an empty result.
    exec->feed("x", floats({2, 3}, {0, 0, 0, 0, 0, 7})).run();
    EXPECT_EQ(int64s_of(exec->output(0)), (std::vector<int64_t>{1, 2}));
    exec->feed("x", floats({2, 3}, {0, 0, 0, 0, 0, 0})).run();
    EXPECT_EQ(exec->output(0).shape(), (TensorShape{2, 0}));
    EXPECT_FLOAT_EQ(float(exec->output(1).at(0)), 0.f);
}

TEST(NonZero, AConstantInputIsFoldedToAStaticShape) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto c = opr::ImmutableTensor::make(*g, floats({4}, {3, 0, 0, 1}));
    auto idx = opr::NonZero::make(c);
    ASSERT_TRUE(idx.node()->shape_known());
    EXPECT_EQ(idx.shape(), (TensorShape{1, 2}));
    ASSERT_NE(idx.node()->static_value(), nullptr);
    EXPECT_EQ(int64s_of(*idx.node()->static_value()), (std::vector<int64_t>{0, 3}));
}

TEST(NonMaxSuppression, KeepsTheBestBoxesThatDoNotOverlapAKeptOne) {
    // Six boxes of one class, two overlapping clusters and an outlier: the best of each
    // cluster is kept, then the outlier, up to three boxes; the same boxes given by centre.
    register_all_operators();
    auto g = ComputingGraph::make();
    auto boxes = opr::Input::make(*g, "boxes", dtype::Float32(), TensorShape{1, 6, 4});
    auto scores = opr::Input::make(*g, "scores", dtype::Float32(), TensorShape{1, 1, 6});
    auto max_out = opr::Input::make(*g, "max_out", dtype::Int64(), TensorShape{1});
    auto iou = opr::ImmutableTensor::make_scalar(*g, 0.5, dtype::Float32());
    auto score = opr::ImmutableTensor::make_scalar(*g, 0.0, dtype::Float32());
    auto kept = opr::NonMaxSuppression::make({boxes, scores, max_out, iou, score}, {});
    EXPECT_FALSE(kept.node()->shape_known());
    auto exec = g->compile({kept});
    // Corners [y1, x1, y2, x2], one given with its corners swapped.
    Tensor b = floats({1, 6, 4}, {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                  0, 10, 1, 11, 1, 10.1f, 0, 11.1f, 0, 100,   1, 101});
    Tensor s = floats({1, 1, 6}, {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f});
    Tensor m(TensorShape{1}, dtype::Int64());
    m.ptr<int64_t>()[0] = 3;
    exec->feed("boxes", b).feed("scores", s).feed("max_out", m).run();
    EXPECT_EQ(exec->output(0).shape(), (TensorShape{3, 3}));
    EXPECT_EQ(int64s_of(exec->output(0)), (std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5}));
    m.ptr<int64_t>()[0] = 1;
    exec->feed("max_out", m).run();
    EXPECT_EQ(int64s_of(exec->output(0)), (std::vector<int64_t>{0, 0, 3}));
    m.ptr<int64_t>()[0] = 0; // none
    exec->feed("max_out", m).run();
    EXPECT_EQ(exec->output(0).shape(), (TensorShape{0, 3}));

    auto g2 = ComputingGraph::make();
    auto cb = opr::Input::make(*g2, "boxes", dtype::Float32(), TensorShape{1, 6, 4});
    auto cs = opr::Input::make(*g2, "scores", dtype::Float32(), TensorShape{1, 1, 6});
    auto cm = opr::ImmutableTensor::make_scalar(*g2, 3, dtype::Int64());
    auto centred = opr::NonMaxSuppression::make({cb, cs, cm}, {true});
    auto exec2 = g2->compile({centred});
    Tensor c = floats({1, 6, 4}, {0.5f,  0.5f, 1, 1, 0.6f,  0.5f, 1, 1, 0.4f,   0.5f, 1, 1,
                                  10.5f, 0.5f, 1, 1, 10.6f, 0.5f, 1, 1, 100.5f, 0.5f, 1, 1});
    exec2->feed("boxes", c).feed("scores", s).run();
    EXPECT_EQ(int64s_of(exec2->output(0)), (std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5}));
}

TEST(NonMaxSuppression, BadInputsAreNamed) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto boxes = opr::Input::make(*g, "boxes", dtype::Float32(), TensorShape{1, 6, 4});
    auto scores = opr::Input::make(*g, "scores", dtype::Float32(), TensorShape{1, 1, 5});
    std::string msg = error_of([&] { opr::NonMaxSuppression::make({boxes, scores}, {}); });
    EXPECT_NE(msg.find("boxes {1,6,4} and scores {1,1,5} do not fit"), std::string::npos) << msg;
    auto ints = opr::Input::make(*g, "m", dtype::Int32(), TensorShape{1});
    auto good = opr::Input::make(*g, "s", dtype::Float32(), TensorShape{1, 1, 6});
    msg = error_of([&] { opr::NonMaxSuppression::make({boxes, good, ints}, {}); });
    EXPECT_NE(msg.find("input 2 (max_output_boxes_per_class) has dtype int32; expected int64"),
              std::string::npos)
        << msg;
    msg = error_of([&] { opr::NonMaxSuppression::make({boxes}, {}); });
    EXPECT_NE(msg.find("1 inputs given"), std::string::npos) << msg;
}

TEST(Unique, DistinctElementsAndSlicesWithTheirIndicesAndCounts) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), TensorShape{3, 3});
    auto flat = opr::Unique::make(x, {std::nullopt, true});
    auto first_seen = opr::Unique::make(x, {std::nullopt, false});
    auto rows = opr::Unique::make(x, {0, true});
    auto cols = opr::Unique::make(x, {-1, false});
    EXPECT_FALSE(flat[0].node()->shape_known());
    auto exec = g->compile({flat[0], flat[1], flat[2], flat[3], first_seen[0], first_seen[1],
                            rows[0], rows[2], rows[3], cols[0], cols[2]});
    // Rows 0 and 2 are equal; columns 0 and 2 too.
    exec->feed("x", floats({3, 3}, {2, 1, 2, 0, 5, 0, 2, 1, 2})).run();
    auto f = [&](size_t i) {
        Tensor c = exec->output(i).contiguous();
        return std::vector<float>(c.ptr<float>(), c.ptr<float>() + c.shape().total_nr_elems());
    };
    EXPECT_EQ(f(0), (std::vector<float>{0, 1, 2, 5}));
    EXPECT_EQ(int64s_of(exec->output(1)), (std::vector<int64_t>{3, 1, 0, 4}));
    EXPECT_EQ(int64s_of(exec->output(2)), (std::vector<int64_t>{2, 1, 2, 0, 3, 0, 2, 1, 2}));
    EXPECT_EQ(int64s_of(exec->output(3)), (std::vector<int64_t>{2, 2, 4, 1}));
    EXPECT_EQ(f(4), (std::vector<float>{2, 1, 0, 5}));
    EXPECT_EQ(int64s_of(exec->output(5)), (std::vector<int64_t>{0, 1, 3, 4}));
    EXPECT_EQ(exec->output(6).shape(), (TensorShape{2, 3}));
    EXPECT_EQ(f(6), (std::vector<float>{0, 5, 0, 2, 1, 2})); // rows in ascending order
    EXPECT_EQ(int64s_of(exec->output(7)), (std::vector<int64_t>{1, 0, 1}));
    EXPECT_EQ(int64s_of(exec->output(8)), (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(exec->output(9).shape(), (TensorShape{3, 2}));
    EXPECT_EQ(f(9), (std::vector<float>{2, 1, 0, 5, 2, 1})); // columns as first seen
    EXPECT_EQ(int64s_of(exec->output(10)), (std::vector<int64_t>{0, 1, 0}));
    std::string msg = error_of([&] { opr::Unique::make(x, {2, true}); });
    EXPECT_NE(msg.find("axis"), std::string::npos) << msg;
}
