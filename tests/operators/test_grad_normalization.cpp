// Gradient rules of Softmax, log-softmax, LayerNorm and RMSNorm (input, weight and bias).
#include "grad_helpers.h"

using namespace braid;
using namespace braid::test;

class GradNormalization : public ::testing::Test {
protected:
    void SetUp() override { register_all_operators(); }
};

TEST_F(GradNormalization, SoftmaxAndLogSoftmaxAlongAnyAxis) {
    for (int axis : {-1, 0, 1})
        for (bool log : {false, true}) {
            auto c = grad_case(fmt::format("{} axis {}", log ? "log_softmax" : "softmax", axis),
                               {{2, 3, 4}}, [=](const SymbolVarArray& in) {
                                   return log ? opr::log_softmax(in[0], axis)
                                              : opr::softmax(in[0], axis);
                               });
            check_gradient(c);
        }
}

TEST_F(GradNormalization, LayerNormAndRmsNormWithEveryInputCombination) {
    struct Case {
        TensorShape x;
        size_t ndim;
    };
    for (const Case& cs : {Case{{3, 5}, 1}, Case{{2, 3, 4}, 2}})
        for (bool rms : {false, true})
            for (int parts = 0; parts < 4; ++parts) {
                TensorShape xs = cs.x;
                size_t ndim = cs.ndim;
                bool has_w = parts & 1, has_b = parts & 2;
                std::vector<size_t> dims = xs.dims();
                std::vector<size_t> tail(dims.end() - long(ndim), dims.end());
                std::vector<TensorShape> shapes{xs};
                if (has_w) shapes.push_back(TensorShape(tail));
                if (has_b) shapes.push_back(TensorShape(tail));
                auto c = grad_case(fmt::format("{} {} ndim {} weight {} bias {}",
                                               rms ? "rms_norm" : "layer_norm", xs.to_string(),
                                               ndim, has_w, has_b),
                                   shapes, [=](const SymbolVarArray& in) {
                                       SymbolVar w = has_w ? in[1] : SymbolVar();
                                       SymbolVar b = has_b ? in[has_w ? 2 : 1] : SymbolVar();
                                       return rms ? opr::rms_norm(in[0], w, b, ndim, 1e-3f)
                                                  : opr::layer_norm(in[0], w, b, ndim, 1e-3f);
                                   });
                check_gradient(c);
            }
}
