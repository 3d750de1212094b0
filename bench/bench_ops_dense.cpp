// Dense cases of bench_ops: gemm, attention, conv2d. Each builds a braid graph, compiles it
// once and times exec->run(); the anchor is OpenBLAS itself, run directly with as many threads
// as braid's kernels use (kernel_threads()), in the same process and run.
//
//   gemm       float32 MatMul MxKxN = 64x784x256, 128x2048x8192 and 1024^3 vs cblas_sgemm on the
//              same buffers (GFLOP/s).
//   attention  B=1 H=8 S=1024 D=64, non-causal, 4·B·H·S²·D flops, vs the gemm anchor's GFLOP/s
//              (a roofline: attention is two GEMMs plus a softmax).
//   gemm_library  the evidence behind sgemm's choice of kernel (operators/dense_kernels.cpp):
//              oneDNN's sgemm ("onednn") and braid's own (ordered_sgemm, "braid") against
//              OpenBLAS's, all on one thread, on the shapes of the example models and small and
//              narrow ones.
//   conv2d     1x64x56x56, 64 filters 3x3, pad 1, vs cblas_sgemm of its im2col GEMM shape
//              (M = 64 filters, N = 56·56 pixels, K = 64·3·3).
#include "bench/bench_ops.h"

#include "base/thread_pool.h"
#include "braid.h"
#include "operators/ordered_gemm.h"

#include <cblas.h>
#if BRAID_WITH_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <random>
#include <thread>

namespace braid::bench {

namespace {

Tensor random_f32(const TensorShape& shape, std::mt19937& rng) {
    Tensor t(shape, dtype::Float32());
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t.ptr<float>()[i] = dist(rng);
    return t;
}

//! Rounds of alternating braid / anchor measurements; each side keeps its best round, so a
//! burst of load from other processes on a shared machine penalises neither side alone.
constexpr int ROUNDS = 3;

//! A direct row-major cblas_sgemm C[m,n] = A[m,k] · B[k,n] with OpenBLAS threaded like braid's
//! kernels (braid keeps OpenBLAS single-threaded and resets it on its next call).
std::function<void()> blas_call(size_t m, size_t n, size_t k, const float* a, const float* b,
                                float* c) {
    return [=] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.f, a,
                    int(k), b, int(n), 0.f, c, int(n));
    };
}

//! Best seconds per call of braid's `run` and of the BLAS `anchor`, measured alternately.
std::pair<double, double> compare(const std::function<void()>& run,
                                  const std::function<void()>& anchor, const OpsOptions& opt) {
    double braid_s = 1e30, anchor_s = 1e30;
    for (int r = 0; r < ROUNDS; ++r) {
        braid_s = std::min(braid_s, time_per_call(run, opt.min_seconds));
        openblas_set_num_threads(int(kernel_threads()));
        anchor_s = std::min(anchor_s, time_per_call(anchor, opt.min_seconds));
        // Let OpenBLAS's worker threads stop spinning before braid's pool is timed next.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return {braid_s, anchor_s};
}

GraphOptions graph_options(const OpsOptions& opt) {
    GraphOptions g;
    g.default_comp_node = opt.comp_node;
    return g;
}

} // namespace

void run_dense_cases(const OpsOptions& opt) {
    std::mt19937 rng(42);
    bool want_gemm = case_selected(opt, "gemm"), want_attention = case_selected(opt, "attention"),
         want_conv = case_selected(opt, "conv2d");
    [[maybe_unused]] bool want_library = case_selected(opt, "gemm_library");
    if (!want_gemm && !want_attention && !want_conv && !want_library) return;
    std::string threads = fmt::format(" threads={}", kernel_threads());

    // gemm: braid's MatMul and the anchor on the same input and output buffers. The same
    // anchor call is the roofline of the attention case.
    const size_t n = 1024;
    const double gemm_flops = 2.0 * double(n * n * n);
    Tensor av = random_f32({n, n}, rng), bv = random_f32({n, n}, rng);
    Tensor anchor_out(TensorShape{n, n}, dtype::Float32());
    if (want_gemm) {
        // The small MLP's first layer, the large MLP's first layer, and the cube.
        const size_t shapes[][3] = {{64, 784, 256}, {128, 2048, 8192}, {n, n, n}};
        for (auto [m, k, nn] : shapes) {
            auto g = ComputingGraph::make(graph_options(opt));
            auto a = opr::Input::make(*g, "a", dtype::Float32(), {m, k});
            auto b = opr::Input::make(*g, "b", dtype::Float32(), {k, nn});
            auto exec = g->compile({opr::matmul(a, b)});
            Tensor at = random_f32({m, k}, rng), bt = random_f32({k, nn}, rng);
            exec->feed(a, at).feed(b, bt);
            exec->run();
            float* out = reinterpret_cast<float*>(exec->output(0).raw_ptr());
            auto [braid_s, anchor_s] =
                compare([&] { exec->run(); },
                        blas_call(m, nn, k, at.ptr<float>(), bt.ptr<float>(), out), opt);
            double flops = 2.0 * double(m) * double(k) * double(nn);
            report_case(opt, "gemm", fmt::format("{}x{}x{}{}", m, k, nn, threads),
                        flops / braid_s * 1e-9, flops / anchor_s * 1e-9, "GFLOP/s", "cblas_sgemm");
        }
    }

#if BRAID_WITH_DNNL
    if (want_library) {
        // M x K x N, row-major, no transposes.
        const size_t shapes[][3] = {
            {64, 784, 256},     {64, 256, 10},  {128, 256, 768}, {128, 256, 1024}, {128, 1024, 256},
            {128, 2048, 8192},  {16, 256, 256}, {64, 256, 16},   {100, 100, 100},  {32, 32, 32},
            {1024, 1024, 1024}, {1, 784, 256},  {1, 256, 10},    {8, 64, 64}};
        openblas_set_num_threads(1);
        omp_set_num_threads(1); // oneDNN on this thread alone, as braid runs it
        for (auto [m, k, nn] : shapes) {
            Tensor at = random_f32({m, k}, rng), bt = random_f32({k, nn}, rng);
            Tensor ct(TensorShape{m, nn}, dtype::Float32());
            const float *a = at.ptr<float>(), *b = bt.ptr<float>();
            float* c = ct.ptr<float>();
            double dnnl_s = 1e30, blas_s = 1e30, own_s = 1e30;
            for (int r = 0; r < ROUNDS; ++r) {
                own_s =
                    std::min(own_s, time_per_call(
                                        [&] {
                                            opr::kern::ordered_sgemm(false, false, m, nn, k, 1.f, a,
                                                                     k, b, nn, 0.f, c, nn);
                                        },
                                        opt.min_seconds));
                dnnl_s =
                    std::min(dnnl_s, time_per_call(
                                         [&] {
                                             dnnl_sgemm('N', 'N', dnnl_dim_t(m), dnnl_dim_t(nn),
                                                        dnnl_dim_t(k), 1.f, a, dnnl_dim_t(k), b,
                                                        dnnl_dim_t(nn), 0.f, c, dnnl_dim_t(nn));
                                         },
                                         opt.min_seconds));
                blas_s =
                    std::min(blas_s, time_per_call(blas_call(m, nn, k, a, b, c), opt.min_seconds));
            }
            double flops = 2.0 * double(m) * double(k) * double(nn);
            report_case(opt, "gemm_library", fmt::format("{}x{}x{} onednn threads=1", m, k, nn),
                        flops / dnnl_s * 1e-9, flops / blas_s * 1e-9, "GFLOP/s",
                        "cblas_sgemm_1_thread");
            report_case(opt, "gemm_library", fmt::format("{}x{}x{} braid threads=1", m, k, nn),
                        flops / own_s * 1e-9, flops / blas_s * 1e-9, "GFLOP/s",
                        "cblas_sgemm_1_thread");
        }
    }
#endif

    if (want_attention) {
        const size_t batch = 1, heads = 8, seq = 1024, dim = 64;
        auto g = ComputingGraph::make(graph_options(opt));
        TensorShape shape{batch, heads, seq, dim};
        auto q = opr::Input::make(*g, "q", dtype::Float32(), shape);
        auto k = opr::Input::make(*g, "k", dtype::Float32(), shape);
        auto v = opr::Input::make(*g, "v", dtype::Float32(), shape);
        auto outs = opr::scaled_dot_product_attention(q, k, v, false);
        auto exec = g->compile({outs[0], outs[1]});
        exec->feed(q, random_f32(shape, rng))
            .feed(k, random_f32(shape, rng))
            .feed(v, random_f32(shape, rng));
        auto [braid_s, anchor_s] = compare(
            [&] { exec->run(); },
            blas_call(n, n, n, av.ptr<float>(), bv.ptr<float>(), anchor_out.ptr<float>()), opt);
        double flops = 4.0 * double(batch * heads) * double(seq * seq) * double(dim);
        report_case(opt, "attention",
                    fmt::format("B{} H{} S{} D{} full{}", batch, heads, seq, dim, threads),
                    flops / braid_s * 1e-9, gemm_flops / anchor_s * 1e-9, "GFLOP/s",
                    "cblas_sgemm_1024_roofline");
    }

    if (want_conv) {
        // A 3x3 convolution of a ResNet stage, and a speech embedding's 1x3 and 3x1 ones (braid's
        // direct kernel, operators/conv_direct.h).
        struct ConvCase {
            size_t c, o, h, w, kh, kw;
            int ph, pw;
        };
        const ConvCase cases[] = {{64, 64, 56, 56, 3, 3, 1, 1},
                                  {24, 24, 74, 32, 1, 3, 0, 1},
                                  {48, 48, 36, 16, 3, 1, 0, 0}};
        for (const auto& cc : cases) {
            auto g = ComputingGraph::make(graph_options(opt));
            auto x = opr::Input::make(*g, "x", dtype::Float32(), {1, cc.c, cc.h, cc.w});
            auto w = opr::Input::make(*g, "w", dtype::Float32(), {cc.o, cc.c, cc.kh, cc.kw});
            opr::Conv2dParam param;
            param.pad_h = cc.ph;
            param.pad_w = cc.pw;
            auto y = opr::Conv2d::make(x, w, param);
            auto exec = g->compile({y});
            exec->feed(x, random_f32({1, cc.c, cc.h, cc.w}, rng))
                .feed(w, random_f32({cc.o, cc.c, cc.kh, cc.kw}, rng));
            size_t oh = cc.h + 2 * size_t(cc.ph) - cc.kh + 1,
                   ow = cc.w + 2 * size_t(cc.pw) - cc.kw + 1;
            size_t m = cc.o, pixels = oh * ow, kdim = cc.c * cc.kh * cc.kw;
            // The anchor: the same GEMM shape on fresh buffers (the im2col matrix of this input).
            Tensor wa = random_f32({m, kdim}, rng), cols = random_f32({kdim, pixels}, rng);
            Tensor out(TensorShape{m, pixels}, dtype::Float32());
            auto [braid_s, anchor_s] = compare(
                [&] { exec->run(); },
                blas_call(m, pixels, kdim, wa.ptr<float>(), cols.ptr<float>(), out.ptr<float>()),
                opt);
            double flops = 2.0 * double(m * pixels * kdim);
            double gflops = flops / braid_s * 1e-9, anchor = flops / anchor_s * 1e-9;
            report_case(opt, "conv2d",
                        fmt::format("1x{}x{}x{} w{}x{}x{}x{} pad{},{}{}", cc.c, cc.h, cc.w, cc.o,
                                    cc.c, cc.kh, cc.kw, cc.ph, cc.pw, threads),
                        gflops, anchor, "GFLOP/s",
                        fmt::format("cblas_sgemm_{}x{}x{}", m, pixels, kdim));
        }
    }
}

} // namespace braid::bench
