// bench_cuda: braid's CUDA kernels against direct CUDA library calls, in the same run.
//
//   matmul_{bf16,fp32}: a chain of 8 MatMul operators (n x n x n) on cuda0, the last result
//     summed to a scalar so that nothing large is fetched, vs 8 cublasGemmEx / cublasSgemm
//     calls on the same sizes (TFLOP/s; target ratio >= 0.95).
//   add_fp32: a chain of 16 elementwise adds of n floats, summed to a scalar, vs
//     cudaMemcpyAsync device-to-device of n floats (GB/s moved; target ratio >= 0.8).
//
// One JSON line per case:
//   {"bench":"cuda","case":...,"shape":...,"braid":...,"anchor":...,"unit":...,"ratio":...}
// Without a CUDA device it says so and exits 0.
//
//     bench_cuda [--filter NAME] [--n N] [--elems N] [--min-seconds S]
#include "bench/bench_cli.h"
#include "braid.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace braid;

namespace {

#define CHECK_CUDA(call)                                                                           \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            std::fprintf(stderr, "bench_cuda: %s failed: %s\n", #call, cudaGetErrorString(err_));  \
            std::exit(1);                                                                          \
        }                                                                                          \
    } while (0)
#define CHECK_CUBLAS(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            std::fprintf(stderr, "bench_cuda: %s failed: %s\n", #call,                             \
                         cublasGetStatusString(st_));                                              \
            std::exit(1);                                                                          \
        }                                                                                          \
    } while (0)

struct Options {
    std::string filter;
    size_t n = 8192;
    size_t elems = size_t(64) << 20;
    double min_seconds = 1.0;
};

//! Seconds per call of fn (which must leave the device idle when it returns), median of 5
//! batches of at least min_seconds / 5 each.
double seconds_per_call(const std::function<void()>& fn, double min_seconds) {
    using clock = std::chrono::steady_clock;
    fn(); // warm-up
    fn();
    std::vector<double> per_call;
    for (int batch = 0; batch < 5; ++batch) {
        int calls = 0;
        auto start = clock::now();
        double elapsed = 0;
        do {
            fn();
            ++calls;
            elapsed = std::chrono::duration<double>(clock::now() - start).count();
        } while (elapsed < min_seconds / 5);
        per_call.push_back(elapsed / calls);
    }
    std::sort(per_call.begin(), per_call.end());
    return per_call[2];
}

void report(const std::string& name, const std::string& shape, double braid_value,
            double anchor_value, const char* unit, const char* anchor_name, const char* device) {
    std::printf("{\"bench\":\"cuda\",\"case\":\"%s\",\"shape\":\"%s\",\"braid\":%.3f,"
                "\"anchor\":%.3f,\"unit\":\"%s\",\"ratio\":%.3f,\"anchor_name\":\"%s\","
                "\"device\":\"%s\"}\n",
                name.c_str(), shape.c_str(), braid_value, anchor_value, unit,
                braid_value / anchor_value, anchor_name, device);
    std::fflush(stdout);
}

//! A device tensor on `cn` with uniform values in [-scale, scale).
Tensor device_random(CompNode cn, const TensorShape& shape, DType dt, float scale, uint32_t seed) {
    Tensor host(shape, dtype::Float32());
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) host.ptr<float>()[i] = dist(rng);
    Tensor typed(shape, dt);
    convert_elements(dtype::Float32(), host.raw_ptr(), dt, typed.raw_ptr(), shape.total_nr_elems());
    Tensor dev(shape, dt, cn.allocator());
    cn.copy(dev, typed);
    cn.sync();
    return dev;
}

void bench_matmul(const Options& opt, DType dt, const char* device) {
    const int chain = 8;
    size_t n = opt.n;
    CompNode gpu = CompNode::load("cuda0");
    // Entries of variance 1/n keep the chained products of order one.
    Tensor a = device_random(gpu, {n, n}, dt, 1.f, 1);
    Tensor b = device_random(gpu, {n, n}, dt, std::sqrt(3.f / float(n)), 2);

    GraphOptions options;
    options.default_comp_node = "cuda0";
    auto g = ComputingGraph::make(options);
    auto x = opr::Input::make(*g, "a", dt, {n, n});
    auto w = opr::Input::make(*g, "b", dt, {n, n});
    SymbolVar y = x;
    for (int i = 0; i < chain; ++i) y = opr::matmul(y, w);
    auto exec = g->compile({opr::reduce_sum(y)}); // accumulates in float32 on the device
    exec->feed("a", a).feed("b", b);              // device tensors: bound without copies
    double braid_s = seconds_per_call([&] { exec->run(); }, opt.min_seconds);

    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t handle;
    CHECK_CUBLAS(cublasCreate(&handle));
    CHECK_CUBLAS(cublasSetStream(handle, stream));
    Tensor out1(TensorShape{n, n}, dt, gpu.allocator()),
        out2(TensorShape{n, n}, dt, gpu.allocator());
    const float alpha = 1.f, beta = 0.f;
    int ni = int(n);
    auto anchor = [&] {
        const void* in = a.raw_ptr();
        for (int i = 0; i < chain; ++i) {
            void* out = (i % 2 ? out2 : out1).raw_ptr();
            if (dt == dtype::Float32())
                CHECK_CUBLAS(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha,
                                         b.ptr<float>(), ni, static_cast<const float*>(in), ni,
                                         &beta, static_cast<float*>(out), ni));
            else
                CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha,
                                          b.raw_ptr(), CUDA_R_16BF, ni, in, CUDA_R_16BF, ni, &beta,
                                          out, CUDA_R_16BF, ni, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
            in = out;
        }
        CHECK_CUDA(cudaStreamSynchronize(stream));
    };
    double anchor_s = seconds_per_call(anchor, opt.min_seconds);
    CHECK_CUBLAS(cublasDestroy(handle));
    CHECK_CUDA(cudaStreamDestroy(stream));

    double flops = 2.0 * double(n) * double(n) * double(n) * chain;
    std::string shape = std::to_string(n) + "x" + std::to_string(n) + "x" + std::to_string(n) +
                        " x" + std::to_string(chain);
    report(dt == dtype::Float32() ? "matmul_fp32" : "matmul_bf16", shape, flops / braid_s / 1e12,
           flops / anchor_s / 1e12, "TFLOP/s",
           dt == dtype::Float32() ? "cublasSgemm" : "cublasGemmEx", device);
}

void bench_add(const Options& opt, const char* device) {
    const int chain = 16;
    size_t n = opt.elems;
    CompNode gpu = CompNode::load("cuda0");
    Tensor a = device_random(gpu, {n}, dtype::Float32(), 1.f, 3);
    Tensor b = device_random(gpu, {n}, dtype::Float32(), 1.f, 4);

    GraphOptions options;
    options.default_comp_node = "cuda0";
    auto g = ComputingGraph::make(options);
    auto x = opr::Input::make(*g, "a", dtype::Float32(), {n});
    auto w = opr::Input::make(*g, "b", dtype::Float32(), {n});
    SymbolVar y = x;
    for (int i = 0; i < chain; ++i) y = y + w;
    auto exec = g->compile({opr::reduce_sum(y)});
    exec->feed("a", a).feed("b", b);
    double braid_s = seconds_per_call([&] { exec->run(); }, opt.min_seconds);

    Tensor dst(TensorShape{n}, dtype::Float32(), gpu.allocator());
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    auto anchor = [&] {
        CHECK_CUDA(
            cudaMemcpyAsync(dst.raw_ptr(), a.raw_ptr(), n * 4, cudaMemcpyDeviceToDevice, stream));
        CHECK_CUDA(cudaStreamSynchronize(stream));
    };
    double anchor_s = seconds_per_call(anchor, opt.min_seconds);
    CHECK_CUDA(cudaStreamDestroy(stream));

    // Bytes moved: each add reads two arrays and writes one; the final sum reads one.
    double braid_bytes = double(n) * 4 * (3.0 * chain + 1);
    double anchor_bytes = double(n) * 4 * 2;
    report("add_fp32", std::to_string(n) + " x" + std::to_string(chain),
           braid_bytes / braid_s / 1e9, anchor_bytes / anchor_s / 1e9, "GB/s",
           "cudaMemcpyAsync D2D", device);
}

} // namespace

int main(int argc, char** argv) {
    Options opt;
    CLI::App app{"bench_cuda: braid's CUDA kernels against direct cuBLAS / cudaMemcpy calls"};
    app.option_defaults()->always_capture_default();
    app.add_option("--filter", opt.filter, "run only the cases whose name contains this");
    app.add_option("--n", opt.n, "matmul cases: n of the n x n x n products")
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    app.add_option("--elems", opt.elems, "add_fp32: floats per tensor")
        ->check(CLI::Range(size_t(1), size_t(1) << 36));
    app.add_option("--min-seconds", opt.min_seconds, "time each side at least this long")
        ->check(CLI::Range(0.0, 3600.0));
    bool json = false;
    app.add_flag("--json", json, "accepted for symmetry: the output is always JSON lines");
    if (auto status = bench::parse_command_line(app, argc, argv)) return *status;
    if (CompNode::cuda_device_count() == 0) {
        std::printf("bench_cuda: no CUDA device found; nothing to measure\n");
        return 0;
    }
    try {
        register_all_operators();
        cudaDeviceProp prop{};
        CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
        auto selected = [&](const char* name) {
            return opt.filter.empty() || std::string(name).find(opt.filter) != std::string::npos;
        };
        if (selected("matmul_bf16")) bench_matmul(opt, dtype::BFloat16(), prop.name);
        if (selected("matmul_fp32")) bench_matmul(opt, dtype::Float32(), prop.name);
        if (selected("add_fp32")) bench_add(opt, prop.name);
        return 0;
    } catch (const Error& e) {
        std::fprintf(stderr, "bench_cuda: %s\n", e.what());
        return 1;
    }
}
