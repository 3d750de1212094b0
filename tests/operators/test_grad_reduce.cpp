// Gradient rules of Reduce's MAX, MIN, PROD and SUM_SQR modes (SUM and MEAN are in
// test_grad.cpp), over several axis sets, with ties and zeros.
#include "grad_helpers.h"

using namespace braid;
using namespace braid::test;

class GradReduce : public ::testing::Test {
protected:
    void SetUp() override { register_all_operators(); }
};

namespace {

struct AxisCase {
    std::vector<int> axes;
    bool keepdims;
};
const std::vector<AxisCase> kAxes = {{{1}, false}, {{}, false}, {{0, 2}, true}, {{-1}, true}};

std::string axes_name(const AxisCase& a) {
    std::string s = " axes";
    for (int x : a.axes) s += " " + std::to_string(x);
    return s + (a.keepdims ? " keepdims" : "");
}

} // namespace

TEST_F(GradReduce, MaxAndMinRouteToTheExtreme) {
    for (auto& a : kAxes)
        for (bool is_max : {true, false}) {
            auto c = grad_case((is_max ? "max" : "min") + axes_name(a), {{2, 3, 4}},
                               [a, is_max](const SymbolVarArray& in) {
                                   return is_max ? opr::reduce_max(in[0], a.axes, a.keepdims)
                                                 : opr::reduce_min(in[0], a.axes, a.keepdims);
                               });
            c.fill = distinct_values(); // no two elements within 0.1
            check_gradient(c);
        }
}

TEST_F(GradReduce, TiesShareTheGradientEvenly) {
    Tensor x = make_tensor({2, 4}, {1.f, 3.f, 3.f, 2.f, 5.f, 5.f, 5.f, -1.f});
    Tensor d = eval_grad(x, [](SymbolVar v) { return opr::reduce_max(v, {1}); });
    std::vector<double> expected = {0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0};
    for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(d.at(i), expected[i], 1e-7) << i;
    Tensor m = eval_grad(x, [](SymbolVar v) { return opr::reduce_min(v); });
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(m.at(i), i == 7 ? 1.0 : 0.0) << i;
}

TEST_F(GradReduce, ProdWithAndWithoutZeros) {
    for (auto& a : kAxes) {
        auto c = grad_case("prod" + axes_name(a), {{2, 3, 4}}, [a](const SymbolVarArray& in) {
            return opr::reduce_prod(in[0], a.axes, a.keepdims);
        });
        c.low = 0.5; // products of up to 24 factors stay moderate
        c.high = 1.5;
        check_gradient(c);
    }
    // Rows with no zero, one zero and two zeros: the product of the others, exactly.
    Tensor x = make_tensor({3, 3}, {2.f, 3.f, 4.f, 2.f, 0.f, 4.f, 0.f, 3.f, 0.f});
    Tensor d = eval_grad(x, [](SymbolVar v) { return opr::reduce_prod(v, {1}); });
    std::vector<double> expected = {12, 8, 6, 0, 8, 0, 0, 0, 0};
    for (size_t i = 0; i < 9; ++i) EXPECT_EQ(d.at(i), expected[i]) << i;
    // The finite-difference check through zeros (the product is linear in each element).
    auto z = grad_case("prod through zeros", {{3, 3}},
                       [](const SymbolVarArray& in) { return opr::reduce_prod(in[0], {1}); });
    z.fill = [](std::mt19937&, Tensor& t, size_t) {
        float v[] = {2.f, 3.f, 4.f, 2.f, 0.f, 4.f, 0.f, 3.f, 0.f};
        for (size_t i = 0; i < 9; ++i) t.ptr<float>()[i] = v[i];
    };
    check_gradient(z);
}

TEST_F(GradReduce, SumOfSquares) {
    for (auto& a : kAxes) {
        auto c = grad_case("sum_sqr" + axes_name(a), {{2, 3, 4}}, [a](const SymbolVarArray& in) {
            return opr::reduce_sum_sqr(in[0], a.axes, a.keepdims);
        });
        check_gradient(c);
    }
}
