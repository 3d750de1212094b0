// The compile-time fusion pass (graph/graph_pass.h, operators/fused_matmul.h): fused results
// equal unfused ones, the switch turns it off, and gradients are unaffected.
#include "checker.h"

#include "base/thread_pool.h"
#include "graph/graph_pass.h"
#include "operators/dnnl_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

using namespace braid;
using namespace braid::test;

namespace {

size_t count_type(const Executable& exec, const std::string& type) {
    size_t n = 0;
    for (auto& [cn, oprs] : exec.sequences())
        for (auto* opr : oprs) n += type == opr->type_name();
    return n;
}

//! Number of Elemwise operators of `mode` the executable runs.
size_t count_mode(const Executable& exec, opr::ElemMode mode) {
    size_t n = 0;
    for (auto& [cn, oprs] : exec.sequences())
        for (auto* opr : oprs)
            if (auto* e = dynamic_cast<opr::Elemwise*>(opr)) n += e->mode() == mode;
    return n;
}

//! x [batch.., in] -> act(x w + b) for one activation; returns the output and the executable.
struct Dense {
    std::unique_ptr<Executable> exec;
    Tensor y;
};

//! Compiles `outs`, runs them once on input "x" and keeps output 0.
Dense compile_and_run(ComputingGraph& g, const std::vector<OutputSpec>& outs, const Tensor& x) {
    Dense d;
    d.exec = g.compile(outs);
    d.exec->feed("x", x).run();
    d.y = d.exec->output(0);
    return d;
}

Dense run_dense(const TensorShape& xs, size_t out, SymbolVar (*act)(SymbolVar), bool fusion,
                const char* cn, bool fetch_product = false) {
    register_all_operators(); // the fusion pass is registered with the operators
    std::mt19937 rng(11);
    size_t in = xs[xs.ndim() - 1];
    auto w = std::make_shared<Tensor>(random_tensor({in, out}, dtype::Float32(), rng, -.2, .2));
    auto b = std::make_shared<Tensor>(random_tensor({out}, dtype::Float32(), rng, -.5, .5));
    Tensor x = random_tensor(xs, dtype::Float32(), rng, -1, 1);
    GraphOptions opt;
    opt.default_comp_node = cn;
    opt.enable_fusion = fusion;
    auto g = ComputingGraph::make(opt);
    auto xv = opr::Input::make(*g, "x", dtype::Float32(), xs);
    auto wv = opr::SharedParam::make(*g, w);
    auto prod = xs.ndim() == 2 ? opr::matmul(xv, wv) : opr::batched_matmul(xv, wv);
    auto y = prod + opr::SharedParam::make(*g, b);
    if (act) y = act(y);
    std::vector<OutputSpec> outs{y};
    if (fetch_product) outs.emplace_back(prod);
    return compile_and_run(*g, outs, x);
}

} // namespace

TEST(Fusion, MatMulBiasActivationEqualsUnfused) {
    SymbolVar (*acts[])(SymbolVar) = {nullptr,   opr::relu, opr::sigmoid,
                                      opr::tanh, opr::gelu, opr::gelu_tanh};
    for (const char* cn : {"cpu0", "cpu:default"})
        for (auto act : acts) {
            // 64x784x256 is split into tiles on several threads; 5x7x3 runs as one GEMM.
            for (auto [xs, out] : {std::pair{TensorShape{64, 784}, size_t(256)},
                                   std::pair{TensorShape{5, 7}, size_t(3)}}) {
                auto fused = run_dense(xs, out, act, true, cn);
                auto plain = run_dense(xs, out, act, false, cn);
                EXPECT_EQ(count_type(*fused.exec, "FusedMatMul"), 1u);
                EXPECT_EQ(count_type(*fused.exec, "Elemwise"), 0u);
                EXPECT_EQ(count_type(*plain.exec, "FusedMatMul"), 0u);
                expect_tensor_near(fused.y, plain.y, 1e-6, 1e-6, std::string("dense on ") + cn);
            }
        }
}

TEST(Fusion, BatchedProductWithSharedWeightFuses) {
    auto fused = run_dense({2, 16, 32}, 48, opr::gelu, true, "cpu0");
    auto plain = run_dense({2, 16, 32}, 48, opr::gelu, false, "cpu0");
    EXPECT_EQ(count_type(*fused.exec, "FusedMatMul"), 1u);
    EXPECT_EQ(fused.y.shape(), (TensorShape{2, 16, 48}));
    expect_tensor_near(fused.y, plain.y, 1e-6, 1e-6, "batched dense");
}

TEST(Fusion, EnvironmentSwitchTurnsFusionOff) {
    ASSERT_EQ(setenv("BRAID_FUSION", "0", 1), 0);
    auto off = run_dense({8, 16}, 4, opr::relu, true, "cpu0");
    unsetenv("BRAID_FUSION");
    EXPECT_EQ(count_type(*off.exec, "FusedMatMul"), 0u);
    EXPECT_EQ(count_type(*off.exec, "MatMul"), 1u);
    auto on = run_dense({8, 16}, 4, opr::relu, true, "cpu0");
    EXPECT_EQ(count_type(*on.exec, "FusedMatMul"), 1u);
}

TEST(Fusion, FetchedIntermediateKeepsItsOperator) {
    // The product is an output: only bias and activation could fuse, so nothing does.
    auto d = run_dense({8, 16}, 4, opr::relu, true, "cpu0", true);
    auto plain = run_dense({8, 16}, 4, opr::relu, false, "cpu0", true);
    EXPECT_EQ(count_type(*d.exec, "FusedMatMul"), 0u);
    expect_tensor_near(d.exec->output(1), plain.exec->output(1), 0, 0, "product");
    expect_tensor_near(d.y, plain.y, 0, 0, "result");
}

TEST(Fusion, GradientsMatchUnfused) {
    register_all_operators();
    std::mt19937 rng(5);
    auto w = std::make_shared<Tensor>(random_tensor({12, 6}, dtype::Float32(), rng, -.5, .5));
    auto b = std::make_shared<Tensor>(random_tensor({6}, dtype::Float32(), rng, -.5, .5));
    Tensor x = random_tensor({4, 12}, dtype::Float32(), rng, -1, 1);
    std::vector<Tensor> results[2];
    for (int fusion = 0; fusion < 2; ++fusion) {
        GraphOptions opt;
        opt.enable_fusion = fusion;
        auto g = ComputingGraph::make(opt);
        auto xv = opr::Input::make(*g, "x", dtype::Float32(), {4, 12});
        auto wv = opr::SharedParam::make(*g, w);
        auto h = opr::tanh(opr::matmul(xv, wv) + opr::SharedParam::make(*g, b));
        auto loss = opr::reduce_sum(h * h);
        auto gw = grad(loss, wv);
        auto exec = g->compile({loss, gw, h});
        exec->feed("x", x).run();
        // The gradient reads x, w and h, none of them inside the chain: it still fuses.
        EXPECT_EQ(count_type(*exec, "FusedMatMul"), size_t(fusion));
        for (size_t i = 0; i < 3; ++i) results[fusion].push_back(exec->output(i));
    }
    for (size_t i = 0; i < 3; ++i)
        expect_tensor_near(results[1][i], results[0][i], 1e-6, 1e-6, "output " + std::to_string(i));
}

namespace {

//! conv (+ bias) + batch norm + activation over a random NCHW input, fusion on or off.
Dense run_conv(bool with_bias, int groups, SymbolVar (*act)(SymbolVar), bool fusion) {
    register_all_operators();
    std::mt19937 rng(3);
    const size_t n = 2, c = 4, h = 9, w = 9, o = 6;
    auto wt = std::make_shared<Tensor>(
        random_tensor({o, c / size_t(groups), 3, 3}, dtype::Float32(), rng, -.3, .3));
    auto stat = [&](double lo, double hi) {
        return std::make_shared<Tensor>(random_tensor({o}, dtype::Float32(), rng, lo, hi));
    };
    auto bias = stat(-.5, .5), scale = stat(.5, 1.5), shift = stat(-.5, .5), mean = stat(-.2, .2),
         var = stat(.5, 2);
    Tensor x = random_tensor({n, c, h, w}, dtype::Float32(), rng, -1, 1);
    GraphOptions opt;
    opt.enable_fusion = fusion;
    auto g = ComputingGraph::make(opt);
    auto param = [&](const std::shared_ptr<Tensor>& t) { return opr::SharedParam::make(*g, t); };
    auto xv = opr::Input::make(*g, "x", dtype::Float32(), {n, c, h, w});
    auto y = opr::conv2d(xv, param(wt), 2, 1, 1, groups);
    if (with_bias) y = y + param(bias).reshape({1, long(o), 1, 1});
    y = opr::batch_norm(y, param(scale), param(shift), param(mean), param(var), 1e-3f);
    if (act) y = act(y);
    return compile_and_run(*g, {y}, x);
}

} // namespace

TEST(Fusion, ConvBiasBatchNormActivationEqualsUnfused) {
    for (bool bias : {true, false})
        for (int groups : {1, 2})
            for (auto act :
                 {opr::relu, opr::sigmoid, static_cast<SymbolVar (*)(SymbolVar)>(nullptr)}) {
                auto fused = run_conv(bias, groups, act, true);
                auto plain = run_conv(bias, groups, act, false);
                EXPECT_EQ(count_type(*fused.exec, "FusedConv2d"), 1u);
                EXPECT_EQ(count_type(*fused.exec, "BatchNorm"), 0u);
                EXPECT_EQ(count_type(*plain.exec, "FusedConv2d"), 0u);
                expect_tensor_near(fused.y, plain.y, 1e-5, 1e-6, "conv chain");
            }
}

TEST(Fusion, ReluPassesNaNThroughInEveryConvolutionKernel) {
    // relu(NaN) = NaN, as ONNX's Relu, whichever kernel applies it: fused into the convolution
    // (the epilogue of oneDNN's convolution, whose own relu gave 0 at some instruction sets and
    // NaN at others, or the direct kernel's output ops) or run after it as an Elemwise. One NaN
    // pixel of x reaches the outputs whose windows hold it; the others stay finite and >= 0.
    register_all_operators();
    std::mt19937 rng(11);
    const size_t n = 1, c = 8, h = 12, w = 12, o = 16;
    auto wt = std::make_shared<Tensor>(random_tensor({o, c, 3, 3}, dtype::Float32(), rng, -.3, .3));
    Tensor x = random_tensor({n, c, h, w}, dtype::Float32(), rng, -1, 1);
    const size_t nan_row = 5, nan_col = 7;
    x.ptr<float>()[(2 * h + nan_row) * w + nan_col] = std::numeric_limits<float>::quiet_NaN();
    bool saved = opr::kern::dnnl_conv_enabled();
    for (bool dnnl : {true, false})
        for (bool fusion : {true, false}) {
            opr::kern::set_dnnl_conv_enabled(dnnl && saved);
            GraphOptions opt;
            opt.enable_fusion = fusion;
            auto g = ComputingGraph::make(opt);
            auto xv = opr::Input::make(*g, "x", dtype::Float32(), {n, c, h, w});
            auto y = opr::relu(opr::conv2d(xv, opr::SharedParam::make(*g, wt), 1, 1));
            auto run = compile_and_run(*g, {y}, x);
            auto what = fmt::format("oneDNN {} fusion {}", dnnl && saved, fusion);
            EXPECT_EQ(count_type(*run.exec, "FusedConv2d"), fusion ? 1u : 0u) << what;
            const float* out = run.y.ptr<float>();
            size_t wrong = 0;
            for (size_t k = 0; k < o; ++k)
                for (size_t r = 0; r < h; ++r)
                    for (size_t q = 0; q < w; ++q) {
                        float v = out[(k * h + r) * w + q];
                        bool sees = r + 1 >= nan_row && r <= nan_row + 1 && q + 1 >= nan_col &&
                                    q <= nan_col + 1;
                        wrong += sees ? !std::isnan(v) : !(v >= 0.f);
                    }
            EXPECT_EQ(wrong, 0u) << what;
        }
    opr::kern::set_dnnl_conv_enabled(saved);
}

namespace {

//! x w + b, then GELU written out as ONNX exporters write it: u * (1 + erf(u / sqrt 2)) * 0.5
//! (`half_first`: (u * 0.5) * (1 + erf(u * (1 / sqrt 2)))); `c` perturbs one constant.
Dense run_gelu_erf(bool fusion, bool half_first, float c = 0.f, bool fetch_erf = false) {
    register_all_operators();
    std::mt19937 rng(7);
    auto w = std::make_shared<Tensor>(random_tensor({32, 48}, dtype::Float32(), rng, -.3, .3));
    auto b = std::make_shared<Tensor>(random_tensor({48}, dtype::Float32(), rng, -.5, .5));
    Tensor x = random_tensor({16, 32}, dtype::Float32(), rng, -2, 2);
    GraphOptions opt;
    opt.enable_fusion = fusion;
    auto g = ComputingGraph::make(opt);
    auto k = [&](double v) { return opr::ImmutableTensor::make_scalar(*g, v, dtype::Float32()); };
    auto xv = opr::Input::make(*g, "x", dtype::Float32(), {16, 32});
    auto u = opr::matmul(xv, opr::SharedParam::make(*g, w)) + opr::SharedParam::make(*g, b);
    SymbolVar e =
        half_first ? opr::erf(u * k(M_SQRT1_2)) : opr::erf(opr::true_div(u, k(M_SQRT2 + c)));
    SymbolVar y = half_first ? (u * k(0.5)) * (e + k(1.0)) : (u * (e + k(1.0))) * k(0.5);
    std::vector<OutputSpec> outs{y};
    if (fetch_erf) outs.emplace_back(e);
    return compile_and_run(*g, outs, x);
}

} // namespace

TEST(Fusion, GeluWrittenWithErfBecomesOneOperatorInTheGemm) {
    for (bool half_first : {false, true}) {
        auto fused = run_gelu_erf(true, half_first);
        auto plain = run_gelu_erf(false, half_first);
        EXPECT_EQ(count_type(*fused.exec, "FusedMatMul"), 1u) << half_first;
        EXPECT_EQ(count_type(*fused.exec, "Elemwise"), 0u) << half_first;
        EXPECT_GE(count_type(*plain.exec, "Elemwise"), 6u);
        expect_tensor_near(fused.y, plain.y, 1e-6, 1e-5, "gelu written with erf");
    }
}

TEST(Fusion, GeluPatternNeedsItsConstantsAndPrivateIntermediates) {
    // sqrt 2 off by 1e-3: not GELU; the erf stays (its arithmetic may run as elementwise
    // chains, which give the same values).
    auto off = run_gelu_erf(true, false, 1e-3f);
    EXPECT_EQ(count_mode(*off.exec, opr::ElemMode::ERF), 1u);
    EXPECT_EQ(count_mode(*off.exec, opr::ElemMode::GELU), 0u);
    auto plain = run_gelu_erf(false, false, 1e-3f);
    expect_tensor_near(off.y, plain.y, 1e-6, 1e-6, "near-gelu");
    // The erf is an output too: no GELU forms.
    auto kept = run_gelu_erf(true, false, 0.f, true);
    EXPECT_EQ(count_mode(*kept.exec, opr::ElemMode::ERF), 1u);
    EXPECT_EQ(count_mode(*kept.exec, opr::ElemMode::GELU), 0u);
    auto kept_plain = run_gelu_erf(false, false, 0.f, true);
    expect_tensor_near(kept.exec->output(1), kept_plain.exec->output(1), 0, 0, "erf output");
}

namespace {

enum class ScoreScale { MUL, DIV, NONE };

//! softmax(q kᵀ · c) v from primitives, as ONNX exporters write attention; `transpose_b` takes kᵀ
//! from the product's flag instead of a Transpose; `fetch_probs` also fetches the softmax.
Dense run_attention(const TensorShape& qs, size_t dv, ScoreScale scale, bool transpose_b,
                    bool fusion, bool fetch_probs = false) {
    register_all_operators();
    std::mt19937 rng(13);
    size_t r = qs.ndim();
    TensorShape vs = qs;
    vs[r - 1] = dv;
    Tensor q = random_tensor(qs, dtype::Float32(), rng, -2, 2);
    Tensor k = random_tensor(qs, dtype::Float32(), rng, -2, 2);
    Tensor v = random_tensor(vs, dtype::Float32(), rng, -1, 1);
    GraphOptions opt;
    opt.enable_fusion = fusion;
    auto g = ComputingGraph::make(opt);
    auto qv = opr::Input::make(*g, "q", dtype::Float32(), qs);
    auto kv = opr::Input::make(*g, "k", dtype::Float32(), qs);
    auto vv = opr::Input::make(*g, "v", dtype::Float32(), vs);
    std::vector<int> swap(r);
    for (size_t i = 0; i < r; ++i) swap[i] = int(i);
    std::swap(swap[r - 1], swap[r - 2]);
    SymbolVar s = transpose_b ? opr::batched_matmul(qv, kv, false, true)
                              : opr::batched_matmul(qv, opr::dimshuffle(kv, swap));
    double d = double(qs[r - 1]);
    auto c = [&](double x) { return opr::ImmutableTensor::make_scalar(*g, x, dtype::Float32()); };
    if (scale == ScoreScale::MUL) s = s * c(1 / std::sqrt(d));
    if (scale == ScoreScale::DIV) s = opr::true_div(s, c(std::sqrt(d)));
    auto p = opr::softmax(s, -1);
    std::vector<OutputSpec> outs{opr::batched_matmul(p, vv)};
    if (fetch_probs) outs.emplace_back(p);
    Dense out;
    out.exec = g->compile(outs);
    out.exec->feed("q", q).feed("k", k).feed("v", v).run();
    out.y = out.exec->output(0);
    return out;
}

} // namespace

TEST(Fusion, AttentionWrittenInPrimitivesBecomesOneAttention) {
    struct Case {
        TensorShape q;
        size_t dv;
        ScoreScale scale;
        bool transpose_b;
    };
    for (auto c : {Case{{4, 33, 16}, 16, ScoreScale::MUL, false},
                   Case{{4, 128, 64}, 64, ScoreScale::MUL, false},
                   Case{{2, 3, 17, 8}, 5, ScoreScale::DIV, false},
                   Case{{3, 9, 8}, 8, ScoreScale::NONE, true}}) {
        auto fused = run_attention(c.q, c.dv, c.scale, c.transpose_b, true);
        auto plain = run_attention(c.q, c.dv, c.scale, c.transpose_b, false);
        std::string what = "attention " + c.q.to_string();
        EXPECT_EQ(count_type(*fused.exec, "Attention"), 1u) << what;
        EXPECT_EQ(count_type(*fused.exec, "Softmax"), 0u) << what;
        EXPECT_EQ(count_type(*fused.exec, "BatchedMatMul"), 0u) << what;
        EXPECT_EQ(count_type(*plain.exec, "Attention"), 0u) << what;
        EXPECT_EQ(fused.y.shape(), plain.y.shape()) << what;
        expect_tensor_near(fused.y, plain.y, 1e-5, 1e-5, what);
    }
}

TEST(Fusion, AttentionWithFetchedProbabilitiesStaysUnfused) {
    auto kept = run_attention({2, 8, 4}, 4, ScoreScale::MUL, false, true, true);
    auto plain = run_attention({2, 8, 4}, 4, ScoreScale::MUL, false, false, true);
    EXPECT_EQ(count_type(*kept.exec, "Attention"), 0u);
    expect_tensor_near(kept.y, plain.y, 0, 0, "attention output");
    expect_tensor_near(kept.exec->output(1), plain.exec->output(1), 0, 0, "probabilities");
}

TEST(Fusion, PowByTwoBecomesASquare) {
    // x ^ 2 with a constant exponent of 2 runs as SQUARE, with the same values as the power;
    // another exponent stays a power.
    register_all_operators();
    std::mt19937 rng(5);
    Tensor x = random_tensor({3, 257}, dtype::Float32(), rng, -30, 30);
    for (double exponent : {2.0, 3.0}) {
        std::vector<Tensor> results;
        for (bool fusion : {true, false}) {
            GraphOptions opt;
            opt.enable_fusion = fusion;
            auto g = ComputingGraph::make(opt);
            auto xv = opr::Input::make(*g, "x", dtype::Float32(), {3, 257});
            auto y =
                opr::pow(xv, opr::ImmutableTensor::make_scalar(*g, exponent, dtype::Float32()));
            auto exec = g->compile({y});
            exec->feed("x", x).run();
            results.push_back(exec->output(0).copy());
            EXPECT_EQ(count_mode(*exec, opr::ElemMode::POW), fusion && exponent == 2.0 ? 0u : 1u)
                << exponent << " " << fusion;
        }
        expect_tensor_near(results[0], results[1], 0, 0, fmt::format("x ^ {}", exponent));
        if (exponent == 2.0) {
            for (size_t i = 0; i < 3 * 257; ++i)
                EXPECT_EQ(results[0].ptr<float>()[i], x.ptr<float>()[i] * x.ptr<float>()[i]);
        }
    }
}

namespace {

//! HardSwish as exporters write it, x * min(max(x + 3, 0), 6) / 6, on x of `shape`; with
//! `fetch_clip` the clipped value is an output too.
std::unique_ptr<Executable> hard_swish(const TensorShape& shape, bool fusion, bool fetch_clip) {
    register_all_operators();
    GraphOptions opt;
    opt.enable_fusion = fusion;
    auto g = ComputingGraph::make(opt);
    auto k = [&](double v) { return opr::ImmutableTensor::make_scalar(*g, v, dtype::Float32()); };
    auto x = opr::Input::make(*g, "x", dtype::Float32(), shape);
    auto clip = opr::minimum(opr::maximum(x + k(3), k(0)), k(6));
    auto y = opr::true_div(x * clip, k(6));
    std::vector<OutputSpec> outs{y};
    if (fetch_clip) outs.emplace_back(clip);
    return g->compile(outs);
}

} // namespace

TEST(Fusion, AnElementwiseChainRunsAsOneOperatorWithTheSameBits) {
    std::mt19937 rng(17);
    // Several blocks of 1024 with a tail, and more than one task for the pool.
    for (TensorShape shape : {TensorShape{7}, TensorShape{3, 50001}}) {
        Tensor x = random_tensor(shape, dtype::Float32(), rng, -8, 8);
        x.ptr<float>()[0] = std::numeric_limits<float>::quiet_NaN();
        auto fused = hard_swish(shape, true, false);
        auto plain = hard_swish(shape, false, false);
        EXPECT_EQ(count_type(*fused, "ElemwiseChain"), 1u) << shape.to_string();
        EXPECT_EQ(count_type(*fused, "Elemwise"), 0u) << shape.to_string();
        EXPECT_EQ(count_type(*plain, "Elemwise"), 5u);
        fused->feed("x", x).run();
        plain->feed("x", x).run();
        Tensor a = fused->output(0).contiguous(), b = plain->output(0).contiguous();
        EXPECT_EQ(std::memcmp(a.raw_ptr(), b.raw_ptr(), a.nr_bytes()), 0) << shape.to_string();
        EXPECT_TRUE(std::isnan(a.ptr<float>()[0]));
    }
}

TEST(Fusion, QuantizationArithmeticIsOneChainWithTheSameBits) {
    // DynamicQuantizeLinear's elementwise part, clip(round(x / scale) + zp, 0, 255), and the
    // floor and ceiling of a scaled value: one pass, bitwise as the operators one by one
    // (round half to even: x / scale lands on halves).
    std::mt19937 rng(23);
    Tensor x = random_tensor({3, 40000}, dtype::Float32(), rng, -300, 300);
    for (size_t i = 0; i < 64; ++i) x.ptr<float>()[i] = float(i) * 0.25f - 8.f; // halves
    std::vector<Tensor> results;
    for (bool fusion : {true, false}) {
        register_all_operators();
        GraphOptions opt;
        opt.enable_fusion = fusion;
        auto g = ComputingGraph::make(opt);
        auto k = [&](double v) {
            return opr::ImmutableTensor::make_scalar(*g, v, dtype::Float32());
        };
        auto xv = opr::Input::make(*g, "x", dtype::Float32(), x.shape());
        auto q = opr::clip(opr::round(opr::true_div(xv, k(0.5))) + k(3), 0.0, 255.0);
        auto f = opr::floor(xv * k(0.1)) + opr::ceil(xv * k(0.3));
        auto exec = g->compile({q, f});
        if (fusion) {
            EXPECT_EQ(count_type(*exec, "ElemwiseChain"), 2u);
            EXPECT_EQ(count_type(*exec, "Elemwise"), 0u);
        }
        exec->feed("x", x).run();
        results.push_back(exec->output(0).copy());
        results.push_back(exec->output(1).copy());
    }
    for (size_t i = 0; i < 2; ++i)
        expect_tensor_near(results[i], results[i + 2], 0, 0, fmt::format("output {}", i));
}

TEST(Fusion, AChainKeepsAnIntermediateSomethingElseReads) {
    // The clipped value is an output: the chain ends there, and the rest (a Mul and a Div)
    // becomes a second chain reading it.
    std::mt19937 rng(19);
    Tensor x = random_tensor({64, 33}, dtype::Float32(), rng, -8, 8);
    auto fused = hard_swish({64, 33}, true, true);
    auto plain = hard_swish({64, 33}, false, true);
    EXPECT_EQ(count_type(*fused, "ElemwiseChain"), 2u);
    fused->feed("x", x).run();
    plain->feed("x", x).run();
    for (size_t i = 0; i < 2; ++i)
        expect_tensor_near(fused->output(i), plain->output(i), 0, 0, fmt::format("output {}", i));
    // A new input shape after compiling: the chain re-infers and runs at it.
    Tensor wide = random_tensor({5, 4000}, dtype::Float32(), rng, -8, 8);
    fused->feed("x", wide).run();
    plain->feed("x", wide).run();
    expect_tensor_near(fused->output(0), plain->output(0), 0, 0, "after a new shape");
}

namespace {

//! The activations and scales exporters write as primitives, on x: 0 x * clip(x + 3, 0, 6) / 6,
//! 1 x * clip(x * (1/6) + 0.5, 0, 1) (ONNX's HardSwish as imported), 2 clip(x * 0.2 + 0.5, 0, 1)
//! (HardSigmoid), 3 x * 0.7 + 0.25; these have loops of their own (ChainRunner). 4: the first
//! with a product by 1/6 for the division, which has none.
SymbolVar clip_activation(SymbolVar x, int form) {
    auto k = [&](double v) { return opr::scalar_like(x, v); };
    switch (form) {
    case 0:
        return opr::true_div(x * opr::clip(x + k(3), 0.0, 6.0), k(6));
    case 1:
        return opr::clip(x * k(1.0 / 6.0) + k(0.5), 0.0, 1.0) * x;
    case 2:
        return opr::clip(k(0.2) * x + k(0.5), 0.0, 1.0);
    case 3:
        return k(0.25) + x * k(0.7);
    default:
        return x * opr::clip(x + k(3), 0.0, 6.0) * k(1.0 / 6.0);
    }
}

constexpr int CHAIN_FORMS = 5, LOOP_FORMS = 4;

} // namespace

TEST(Fusion, ClippedActivationChainsGiveTheStepsBits) {
    // Values at and around the clip edges (x = -3, 3 for the first form), signed zeros, NaN,
    // infinities; several blocks with a tail.
    std::mt19937 rng(29);
    Tensor x = random_tensor({3, 1501}, dtype::Float32(), rng, -8, 8);
    float* xp = x.ptr<float>();
    const float special[] = {-3.f,
                             3.f,
                             -2.5f,
                             2.5f,
                             0.f,
                             -0.f,
                             std::nanf(""),
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity()};
    for (size_t i = 0; i < std::size(special); ++i) xp[i * 97] = special[i];
    for (int form = 0; form < CHAIN_FORMS; ++form) {
        std::vector<Tensor> results;
        for (bool fusion : {true, false}) {
            register_all_operators();
            GraphOptions opt;
            opt.enable_fusion = fusion;
            auto g = ComputingGraph::make(opt);
            auto xv = opr::Input::make(*g, "x", dtype::Float32(), x.shape());
            auto exec = g->compile({clip_activation(xv, form)});
            if (fusion) {
                EXPECT_EQ(count_type(*exec, "ElemwiseChain"), 1u) << form;
            }
            exec->feed("x", x).run();
            results.push_back(exec->output(0).contiguous());
        }
        EXPECT_EQ(std::memcmp(results[0].raw_ptr(), results[1].raw_ptr(), results[0].nr_bytes()), 0)
            << "form " << form;
    }
}

namespace {

//! A k x k convolution [+ batch norm] then a clipped activation (clip_activation's `form`);
//! with `fetch_conv` the convolution's result is an output too. 3 x 3 runs in oneDNN where the
//! build has it, 1 x 1 in braid's GEMM path: both call the chain on each output block.
Dense run_conv_activation(bool batch_norm, int form, bool fusion, bool fetch_conv = false,
                          size_t k = 3, size_t side = 12) {
    register_all_operators();
    std::mt19937 rng(5);
    const size_t n = 1, c = 8, h = side, w = side - 2, o = 16;
    auto wt = std::make_shared<Tensor>(random_tensor({o, c, k, k}, dtype::Float32(), rng, -.4, .4));
    auto stat = [&](double lo, double hi) {
        return std::make_shared<Tensor>(random_tensor({o}, dtype::Float32(), rng, lo, hi));
    };
    auto scale = stat(.5, 1.5), shift = stat(-.5, .5), mean = stat(-.2, .2), var = stat(.5, 2);
    Tensor x = random_tensor({n, c, h, w}, dtype::Float32(), rng, -2, 2);
    GraphOptions opt;
    opt.enable_fusion = fusion;
    auto g = ComputingGraph::make(opt);
    auto param = [&](const std::shared_ptr<Tensor>& t) { return opr::SharedParam::make(*g, t); };
    auto xv = opr::Input::make(*g, "x", dtype::Float32(), {n, c, h, w});
    auto y = opr::conv2d(xv, param(wt), 1, int(k / 2), 1, 1);
    if (batch_norm)
        y = opr::batch_norm(y, param(scale), param(shift), param(mean), param(var), 1e-3f);
    std::vector<OutputSpec> outs{clip_activation(y, form)};
    if (fetch_conv) outs.emplace_back(y);
    return compile_and_run(*g, outs, x);
}

} // namespace

TEST(Fusion, AClippedActivationFoldsIntoTheConvolutionBeforeIt) {
    for (size_t k : {3, 1})
        for (bool bn : {true, false})
            for (int form = 0; form < CHAIN_FORMS; ++form) {
                auto fused = run_conv_activation(bn, form, true, false, k);
                auto plain = run_conv_activation(bn, form, false, false, k);
                auto what = fmt::format("{0}x{0} batch norm {1} form {2}", k, bn, form);
                // A chain without a loop of its own stays an operator.
                bool folds = form < LOOP_FORMS;
                EXPECT_EQ(count_type(*fused.exec, "FusedConv2d"), folds || bn ? 1u : 0u) << what;
                EXPECT_EQ(count_type(*fused.exec, "ElemwiseChain"), folds ? 0u : 1u) << what;
                EXPECT_EQ(count_type(*fused.exec, "Elemwise"), 0u) << what;
                expect_tensor_near(fused.y, plain.y, 1e-5, 1e-5, what);
            }
    // Three threads on a larger map: the convolution splits into bands of rows, and the chain
    // runs on each band's rows of every channel.
    size_t saved = kernel_threads();
    set_kernel_threads(3);
    for (size_t k : {3, 1}) {
        auto fused = run_conv_activation(true, 0, true, false, k, 66);
        auto plain = run_conv_activation(true, 0, false, false, k, 66);
        EXPECT_EQ(count_type(*fused.exec, "ElemwiseChain"), 0u);
        expect_tensor_near(fused.y, plain.y, 1e-5, 1e-5, fmt::format("{0}x{0}, 3 threads", k));
    }
    set_kernel_threads(saved);
    // The convolution's result is fetched too: the chain stays an operator of its own.
    auto fetched = run_conv_activation(true, 0, true, true);
    EXPECT_EQ(count_type(*fetched.exec, "ElemwiseChain"), 1u);
    expect_tensor_near(fetched.y, run_conv_activation(true, 0, false, true).y, 1e-5, 1e-5,
                       "with the convolution fetched");
}

namespace {

//! x {4, 96} times w's three row blocks reordered (slices and a concat, as exporters rebuild
//! an LSTM's gate blocks) times 0.5, with w {96, 48} an ImmutableTensor (constant, 4,608
//! elements: over build-time folding's limit) or a SharedParam (`param`).
SymbolVar constant_weights_graph(ComputingGraph& g, const std::shared_ptr<Tensor>& w, bool param) {
    auto wv = param ? opr::SharedParam::make(g, w) : opr::ImmutableTensor::make(g, *w);
    auto rows = [&](long a, long b) {
        return opr::subtensor(wv, {opr::AxisIndex::slice(0, a, b)});
    };
    auto reordered =
        opr::concat({rows(64, 96), rows(0, 32), rows(32, 64)}, 0) * opr::scalar_like(wv, 0.5);
    auto x = opr::Input::make(g, "x", dtype::Float32(), {4, 96});
    return opr::matmul(x, reordered);
}

} // namespace

TEST(Fusion, ConstantSubgraphsRunOnceWhenCompiled) {
    register_all_operators();
    std::mt19937 rng(31);
    auto w = std::make_shared<Tensor>(random_tensor({96, 48}, dtype::Float32(), rng));
    Tensor x = random_tensor({4, 96}, dtype::Float32(), rng);
    std::vector<Tensor> results;
    for (bool fusion : {true, false}) {
        GraphOptions opt;
        opt.enable_fusion = fusion;
        auto g = ComputingGraph::make(opt);
        SymbolVar y = constant_weights_graph(*g, w, false);
        auto exec = g->compile({y});
        // Folded: the slices, the concat and the scale leave the executable.
        EXPECT_EQ(count_type(*exec, "Concat"), fusion ? 0u : 1u);
        EXPECT_EQ(count_type(*exec, "Subtensor"), fusion ? 0u : 3u);
        EXPECT_EQ(count_type(*exec, "Elemwise"), fusion ? 0u : 1u);
        exec->feed("x", x).run();
        results.push_back(exec->output(0).copy());
        if (fusion) {
            // A second compile finds the same constant: the graph does not grow.
            size_t oprs = g->operators().size();
            auto again = g->compile({y});
            EXPECT_EQ(g->operators().size(), oprs);
            again->feed("x", x).run();
            expect_tensor_near(again->output(0), results[0], 0, 0, "second compile");
        }
    }
    expect_tensor_near(results[0], results[1], 0, 0, "folded against unfolded");
}

TEST(Fusion, ParametersAreNotFolded) {
    // A SharedParam may change between runs: what is computed from it stays in the executable
    // and sees the change.
    register_all_operators();
    std::mt19937 rng(37);
    auto w = std::make_shared<Tensor>(random_tensor({96, 48}, dtype::Float32(), rng));
    Tensor x = random_tensor({4, 96}, dtype::Float32(), rng);
    auto g = ComputingGraph::make({});
    auto exec = g->compile({constant_weights_graph(*g, w, true)});
    EXPECT_EQ(count_type(*exec, "Concat"), 1u);
    exec->feed("x", x).run();
    Tensor before = exec->output(0).copy();
    for (size_t i = 0; i < w->shape().total_nr_elems(); ++i) w->ptr<float>()[i] *= 2.f;
    exec->feed("x", x).run();
    Tensor after = exec->output(0).copy();
    for (size_t i = 0; i < before.shape().total_nr_elems(); ++i)
        ASSERT_EQ(after.ptr<float>()[i], 2.f * before.ptr<float>()[i]) << i;
}
