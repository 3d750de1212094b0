// Gradient rules of the dense operators: BatchedMatMul, Conv2d (through Conv2dBackwardData and
// Conv2dBackwardFilter, whose own rules give second order), Pooling (through PoolingBackward),
// BatchNorm and Attention (out and lse).
#include "base/thread_pool.h"
#include "grad_helpers.h"
#include "reference.h"

using namespace braid;
using namespace braid::test;

class GradDense : public ::testing::Test {
protected:
    void SetUp() override { register_all_operators(); }
};

TEST_F(GradDense, BatchedMatMulWithBroadcastAndTransposes) {
    struct Case {
        TensorShape a, b; //!< before the transposes
    };
    std::vector<Case> cases = {{{2, 3, 4}, {2, 4, 5}},
                               {{2, 3, 4}, {4, 5}},
                               {{3, 4}, {2, 4, 5}},
                               {{2, 1, 3, 4}, {3, 4, 2}},
                               {{1, 3, 4}, {2, 4, 2}}};
    auto swap_last = [](TensorShape s) {
        auto d = s.dims();
        std::swap(d[d.size() - 1], d[d.size() - 2]);
        return TensorShape(d);
    };
    for (auto& cs : cases)
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                auto c = grad_case(fmt::format("batched_matmul {} {} {} {}", cs.a.to_string(),
                                               cs.b.to_string(), ta, tb),
                                   {ta ? swap_last(cs.a) : cs.a, tb ? swap_last(cs.b) : cs.b},
                                   [=](const SymbolVarArray& in) {
                                       return opr::batched_matmul(in[0], in[1], ta, tb);
                                   });
                check_gradient(c);
            }
}

TEST_F(GradDense, Conv2dInputAndWeight) {
    struct Case {
        TensorShape x, w;
        opr::Conv2dParam p;
    };
    std::vector<Case> cases = {
        {{2, 3, 5, 5}, {4, 3, 3, 3}, {}},
        {{1, 2, 6, 5}, {3, 2, 3, 2}, {2, 1, 1, 0, 1, 1, 1}},  // stride 2x1, padding 1x0
        {{1, 2, 7, 7}, {2, 2, 3, 3}, {1, 2, 2, 1, 2, 1, 1}},  // dilation 2x1
        {{2, 4, 4, 4}, {6, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 2}},  // groups 2
        {{2, 3, 4, 4}, {5, 3, 1, 1}, {}},                     // 1x1: no im2col
        {{1, 4, 5, 5}, {4, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 4}}}; // depthwise, stride 2
    for (auto& cs : cases) {
        auto p = cs.p;
        auto c =
            grad_case(fmt::format("conv2d {} {}", cs.x.to_string(), cs.w.to_string()), {cs.x, cs.w},
                      [p](const SymbolVarArray& in) { return opr::Conv2d::make(in[0], in[1], p); });
        c.low = -1;
        c.high = 1;
        check_gradient(c);
        // The backward operators' own rules, on their own: both are bilinear, so the finite
        // differences are exact up to rounding.
        auto out_size = [](size_t in, size_t k, int stride, int pad, int dil) {
            return (in + 2 * size_t(pad) - size_t(dil) * (k - 1) - 1) / size_t(stride) + 1;
        };
        TensorShape ys{cs.x[0], cs.w[0],
                       out_size(cs.x[2], cs.w[2], p.stride_h, p.pad_h, p.dilation_h),
                       out_size(cs.x[3], cs.w[3], p.stride_w, p.pad_w, p.dilation_w)};
        // A large step keeps the loss's float32 rounding small against the difference.
        auto bd =
            grad_case("backward_data " + c.name, {cs.w, ys}, [p, cs](const SymbolVarArray& in) {
                return opr::conv2d_backward_data(in[0], in[1], p, cs.x[2], cs.x[3]);
            });
        bd.grad_eps = 0.05;
        check_gradient(bd);
        auto bf =
            grad_case("backward_filter " + c.name, {cs.x, ys}, [p, cs](const SymbolVarArray& in) {
                return opr::conv2d_backward_filter(in[0], in[1], p, cs.w[2], cs.w[3]);
            });
        bf.grad_eps = 0.05;
        check_gradient(bf);
        // Second order: the gradient w.r.t. x and w are themselves differentiated (the rules
        // of Conv2dBackwardData and Conv2dBackwardFilter).
        OprCase s;
        s.name = "second order " + c.name;
        s.shapes = {cs.x, cs.w};
        s.low = -1;
        s.high = 1;
        s.build = [p](const SymbolVarArray& in) -> SymbolVarArray {
            auto y = opr::Conv2d::make(in[0], in[1], p);
            auto loss = opr::reduce_sum(opr::tanh(y));
            auto g = grad(loss, {in[0], in[1]});
            return {g[0] * g[0], g[1]};
        };
        s.grad_eps = 1e-2;
        s.grad_rtol = 3e-2;
        check_gradient(s);
    }
}

TEST_F(GradDense, ConvBackwardOperatorsMatchTheirDefinition) {
    // backward_data and backward_filter are the adjoints of conv2d:
    // <conv2d(x, w), dy> = <x, backward_data(w, dy)> = <w, backward_filter(x, dy)>.
    opr::Conv2dParam p{2, 1, 1, 2, 1, 2, 1};
    TensorShape xs{2, 3, 7, 6}, ws{4, 3, 3, 2};
    for (DType dt : {dtype::Float32(), dtype::BFloat16()}) {
        std::mt19937 rng(5);
        auto g = ComputingGraph::make();
        auto x = opr::Input::make(*g, "x", dt, xs);
        auto w = opr::Input::make(*g, "w", dt, ws);
        auto y = opr::Conv2d::make(x, w, p);
        auto dy = opr::Input::make(*g, "dy", dt, y.shape());
        auto dx = opr::conv2d_backward_data(w, dy, p, xs[2], xs[3]);
        auto dw = opr::conv2d_backward_filter(x, dy, p, ws[2], ws[3]);
        EXPECT_EQ(dx.shape(), xs);
        EXPECT_EQ(dw.shape(), ws);
        auto f32 = [](SymbolVar v) { return v.astype(dtype::Float32()); };
        auto exec =
            g->compile({opr::reduce_sum(f32(y) * f32(dy)), opr::reduce_sum(f32(x) * f32(dx)),
                        opr::reduce_sum(f32(w) * f32(dw))});
        exec->feed("x", random_tensor(xs, dt, rng))
            .feed("w", random_tensor(ws, dt, rng))
            .feed("dy", random_tensor(y.shape(), dt, rng));
        exec->run();
        double a = exec->output(0).at(0), b = exec->output(1).at(0), c = exec->output(2).at(0);
        double tol = dt == dtype::Float32() ? 1e-3 : 0.05 * std::max(1.0, std::abs(a));
        EXPECT_NEAR(a, b, tol) << dt.name();
        EXPECT_NEAR(a, c, tol) << dt.name();
    }
    auto g = ComputingGraph::make();
    auto w = opr::Input::make(*g, "w", dtype::Float32(), ws);
    auto dy = opr::Input::make(*g, "dy", dtype::Float32(), {2, 4, 3, 3});
    expect_error<ShapeError>([&] { opr::conv2d_backward_data(w, dy, p, 7, 6); },
                             {"does not fit", "{N,4,4,8}"});
}

TEST_F(GradDense, ConvBackwardDataSplitsOverThreadsByChannelsAndMatchesItsAdjoint) {
    // A batch of one (a transposed convolution in a detector's upsampling path) splits its
    // input channels over the threads; each block's columns fold back onto its own channels.
    // Overlapping windows (3x3 stride 2), non-overlapping ones (2x2 stride 2, whose col2im
    // takes a path of its own), 1x1 and groups: the adjoint identity holds, and every thread
    // count gives the 1-thread result.
    struct Case {
        TensorShape x, w;
        opr::Conv2dParam p;
    };
    std::vector<Case> cases = {
        {{1, 32, 79, 80}, {16, 32, 3, 3}, {2, 2, 1, 1, 1, 1, 1}},
        {{1, 24, 160, 160}, {96, 24, 2, 2}, {2, 2, 0, 0, 1, 1, 1}},
        {{1, 96, 40, 40}, {64, 96, 1, 1}, {1, 1, 0, 0, 1, 1, 1}},
        {{1, 18, 41, 40}, {32, 9, 3, 3}, {1, 1, 1, 1, 1, 1, 2}},
        // Windows that do not overlap, smaller than the stride, rows and columns left over:
        {{1, 4, 9, 10}, {8, 4, 1, 2}, {2, 3, 0, 0, 1, 1, 1}},
        {{2, 6, 11, 13}, {4, 3, 2, 2}, {2, 2, 0, 0, 1, 1, 2}},
    };
    size_t saved = kernel_threads();
    for (const auto& cs : cases) {
        std::mt19937 rng(7);
        auto g = ComputingGraph::make();
        auto x = opr::Input::make(*g, "x", dtype::Float32(), cs.x);
        auto w = opr::Input::make(*g, "w", dtype::Float32(), cs.w);
        auto y = opr::Conv2d::make(x, w, cs.p);
        auto dy = opr::Input::make(*g, "dy", dtype::Float32(), y.shape());
        auto dx = opr::conv2d_backward_data(w, dy, cs.p, cs.x[2], cs.x[3]);
        auto exec = g->compile({dx, opr::reduce_sum(y * dy), opr::reduce_sum(x * dx)});
        exec->feed("x", random_tensor(cs.x, dtype::Float32(), rng))
            .feed("w", random_tensor(cs.w, dtype::Float32(), rng))
            .feed("dy", random_tensor(y.shape(), dtype::Float32(), rng));
        Tensor one_thread;
        for (size_t threads : {size_t(1), size_t(2), size_t(3)}) {
            set_kernel_threads(threads);
            exec->run();
            std::string what =
                fmt::format("x{} w{} threads={}", cs.x.to_string(), cs.w.to_string(), threads);
            double a = exec->output(1).at(0), b = exec->output(2).at(0);
            EXPECT_NEAR(a, b, 1e-4 * std::max(1.0, std::abs(a))) << what;
            if (threads == 1)
                one_thread = exec->output(0).copy();
            else
                expect_tensor_near(exec->output(0), one_thread, 1e-5, 1e-5, what);
        }
    }
    set_kernel_threads(saved);
}

TEST_F(GradDense, MaxAndAveragePooling) {
    struct Case {
        TensorShape x;
        opr::PoolingParam p;
    };
    using opr::PoolMode;
    std::vector<Case> cases = {
        {{2, 2, 4, 4}, {PoolMode::MAX, 2, 2, 2, 2, 0, 0}},
        {{1, 2, 5, 5}, {PoolMode::MAX, 3, 3, 2, 2, 1, 1}}, // overlapping windows, padding
        {{1, 1, 5, 4}, {PoolMode::MAX, 2, 3, 1, 2, 1, 1}},
        {{2, 2, 4, 4}, {PoolMode::AVERAGE, 2, 2, 2, 2, 0, 0}},
        {{1, 2, 5, 5}, {PoolMode::AVERAGE, 3, 3, 2, 2, 1, 1, true}},
        {{1, 2, 5, 5}, {PoolMode::AVERAGE, 3, 3, 2, 2, 1, 1, false}},
    };
    for (auto& cs : cases) {
        auto p = cs.p;
        auto c = grad_case(
            fmt::format("pooling {} {}", cs.x.to_string(), opr::pool_mode_name(p.mode)), {cs.x},
            [p](const SymbolVarArray& in) { return opr::Pooling::make(in[0], p); });
        c.fill = distinct_values(2.0); // no ties inside a window
        check_gradient(c);
    }
    // Ties go to the first largest element in row-major window order.
    Tensor x = make_tensor({1, 1, 2, 2}, {1.f, 3.f, 3.f, 0.f});
    Tensor d = eval_grad(x, [](SymbolVar v) { return opr::max_pool2d(v, 2); });
    EXPECT_EQ(values_of(d), std::vector<double>({0, 1, 0, 0}));
    // Second order of average pooling: its backward is linear in dy.
    OprCase s;
    s.name = "average pooling second order";
    s.shapes = {{1, 2, 5, 5}};
    s.build = [](const SymbolVarArray& in) -> SymbolVarArray {
        auto y = opr::avg_pool2d(in[0], 3, 2, 1, false);
        return {grad(opr::reduce_sum(y * y), in[0])};
    };
    check_gradient(s);
}

TEST_F(GradDense, BatchNormEveryInput) {
    for (bool full_rank_stats : {false, true})
        for (auto& xs : std::vector<TensorShape>{{2, 3, 2, 2}, {4, 3}}) {
            std::vector<size_t> sd(xs.ndim(), 1);
            sd[1] = 3;
            TensorShape ss = full_rank_stats ? TensorShape(sd) : TensorShape{3};
            auto c =
                grad_case(fmt::format("batch_norm {} stats {}", xs.to_string(), ss.to_string()),
                          {xs, ss, ss, ss, ss}, [](const SymbolVarArray& in) {
                              return opr::batch_norm(in[0], in[1], in[2], in[3], in[4], 1e-3f);
                          });
            c.fill = [](std::mt19937& rng, Tensor& t, size_t idx) {
                // The variance (input 4) stays positive.
                t = random_tensor(t.shape(), t.dtype(), rng, idx == 4 ? 0.5 : -2.0, 2.0);
            };
            check_gradient(c);
        }
}

TEST_F(GradDense, AttentionOutAndLse) {
    struct Case {
        size_t sq, sk;
        bool causal;
    };
    for (auto& cs : std::vector<Case>{
             {3, 3, false}, {3, 3, true}, {2, 4, true}, {4, 2, true}, {2, 5, false}}) {
        // Both outputs in the loss, then out alone and lse alone.
        for (int which = 0; which < 3; ++which) {
            OprCase c;
            c.name = fmt::format("attention sq {} sk {} causal {} outputs {}", cs.sq, cs.sk,
                                 cs.causal, which);
            c.shapes = {{1, 2, cs.sq, 3}, {1, 2, cs.sk, 3}, {1, 2, cs.sk, 2}};
            c.low = -1;
            c.high = 1;
            bool causal = cs.causal;
            c.build = [causal, which](const SymbolVarArray& in) -> SymbolVarArray {
                auto r = opr::scaled_dot_product_attention(in[0], in[1], in[2], causal, 0.7f);
                // Fully masked rows have lse = -inf: keep them out of the loss.
                SymbolVar lse = opr::where(opr::less(opr::scalar_like(r[1], -1e30), r[1]), r[1],
                                           opr::scalar_like(r[1], 0.0));
                if (which == 1) return {r[0]};
                if (which == 2) return {lse};
                return {r[0], lse};
            };
            if (which == 2) c.grad_inputs = {0, 1}; // lse does not depend on v
            check_gradient(c);
        }
    }
}
