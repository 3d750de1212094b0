// The 2-layer MLP of examples/mlp against a plain-loop reference.
#include "checker.h"

#include <gtest/gtest.h>

using namespace braid;
using namespace braid::test;

TEST(Mlp, TwoLayerForwardMatchesPlainLoopReference) {
    const size_t batch = 64, in = 784, hidden = 256, out = 10;
    std::mt19937 rng(7);
    auto w1 =
        std::make_shared<Tensor>(random_tensor({in, hidden}, dtype::Float32(), rng, -.05, .05));
    auto b1 = std::make_shared<Tensor>(random_tensor({hidden}, dtype::Float32(), rng, -.05, .05));
    auto w2 =
        std::make_shared<Tensor>(random_tensor({hidden, out}, dtype::Float32(), rng, -.05, .05));
    auto b2 = std::make_shared<Tensor>(random_tensor({out}, dtype::Float32(), rng, -.05, .05));
    Tensor x = random_tensor({batch, in}, dtype::Float32(), rng, -1, 1);

    for (const char* cn : {"cpu0", "cpu:default"}) {
        GraphOptions opt;
        opt.default_comp_node = cn;
        auto g = ComputingGraph::make(opt);
        auto xv = opr::Input::make(*g, "x", dtype::Float32(), {batch, in});
        auto h = opr::relu(opr::matmul(xv, opr::SharedParam::make(*g, w1)) +
                           opr::SharedParam::make(*g, b1));
        auto y = opr::matmul(h, opr::SharedParam::make(*g, w2)) + opr::SharedParam::make(*g, b2);
        auto exec = g->compile({y});
        exec->feed("x", x).run();

        Tensor expect(TensorShape{batch, out}, dtype::Float32());
        std::vector<double> hid(hidden);
        for (size_t b = 0; b < batch; ++b) {
            for (size_t j = 0; j < hidden; ++j) {
                double s = b1->ptr<float>()[j];
                for (size_t k = 0; k < in; ++k)
                    s += double(x.ptr<float>()[b * in + k]) * w1->ptr<float>()[k * hidden + j];
                hid[j] = s > 0 ? s : 0;
            }
            for (size_t j = 0; j < out; ++j) {
                double s = b2->ptr<float>()[j];
                for (size_t k = 0; k < hidden; ++k) s += hid[k] * w2->ptr<float>()[k * out + j];
                expect.ptr<float>()[b * out + j] = float(s);
            }
        }
        expect_tensor_near(exec->output(0), expect, 1e-4, 1e-5, std::string("mlp on ") + cn);
    }
}
