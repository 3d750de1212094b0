// Elementwise, normalization and reduction cases of bench_ops.
//
// Every case builds a braid graph, compiles it once and times exec->run(). Throughput is in
// GB/s of the bytes the operator must move (inputs read once, output written once), against
// the memcpy roofline measured in the same run, right after the case: memcpy of 64 MiB into
// another 64 MiB buffer, split over the same kernel threads, counting 2 x 64 MiB. A ratio of 1.0
// means the operator moves its bytes as fast as memcpy does.
#include "bench/bench_ops.h"

#include "base/thread_pool.h"
#include "braid.h"

#include <cstring>
#include <random>

namespace braid::bench {

namespace {

constexpr size_t MIB = size_t(1) << 20;

Tensor filled(const TensorShape& shape, float lo, float hi, uint32_t seed) {
    Tensor t(shape, dtype::Float32());
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    float* p = t.ptr<float>();
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) p[i] = dist(rng);
    return t;
}

//! GB/s of memcpy from one 64 MiB buffer to another on the kernel pool, counting read + write.
double memcpy_gbps(const OpsOptions& opt) {
    size_t bytes = 64 * MIB;
    std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
    size_t chunk = 1 * MIB;
    double s = time_per_call(
        [&] {
            parallel_for(bytes / chunk, 1, [&](size_t b, size_t e) {
                std::memcpy(dst.data() + b * chunk, src.data() + b * chunk, (e - b) * chunk);
            });
        },
        opt.min_seconds);
    return 2.0 * double(bytes) / s / 1e9;
}

//! Times exec->run() of a graph over float32 inputs; returns GB/s for `bytes` moved per run.
double graph_gbps(const OpsOptions& opt, const std::vector<TensorShape>& shapes,
                  const std::function<SymbolVar(const SymbolVarArray&)>& build, double bytes,
                  bool fusion = true) {
    register_all_operators(); // the compile passes, the fusion among them
    GraphOptions go;
    go.default_comp_node = opt.comp_node;
    go.enable_fusion = fusion;
    auto g = ComputingGraph::make(go);
    SymbolVarArray in;
    for (size_t i = 0; i < shapes.size(); ++i)
        in.push_back(opr::Input::make(*g, "in" + std::to_string(i), dtype::Float32(), shapes[i]));
    auto exec = g->compile({build(in)});
    for (size_t i = 0; i < shapes.size(); ++i)
        exec->feed(in[i], filled(shapes[i], -4.f, 4.f, uint32_t(i + 1)));
    double s = time_per_call([&] { exec->run(); }, opt.min_seconds);
    return bytes / s / 1e9;
}

std::string with_threads(const std::string& shape) {
    return shape + " f32 " + std::to_string(kernel_threads()) + "thr";
}

} // namespace

void run_elemwise_cases(const OpsOptions& opt) {
    const std::string anchor = "memcpy_64MiB_same_threads";
    // Measured again right after each case: on a shared machine the bandwidth available
    // drifts, and the ratio should compare the two under the same conditions.
    auto anchor_gbps = [&] { return memcpy_gbps(opt); };
    const size_t n = 16 * MIB; // 64 MiB of float32
    const double f32_bytes = 4.0 * double(n);
    if (case_selected(opt, "add")) {
        double gbps = graph_gbps(
            opt, {{n}, {n}}, [](const SymbolVarArray& in) { return in[0] + in[1]; }, 3 * f32_bytes);
        report_case(opt, "add", with_threads("16777216+16777216"), gbps, anchor_gbps(), "GB/s",
                    anchor);
    }
    if (case_selected(opt, "add_bcast")) {
        double gbps = graph_gbps(
            opt, {{4096, 4096}, {4096}}, [](const SymbolVarArray& in) { return in[0] + in[1]; },
            2 * f32_bytes);
        report_case(opt, "add_bcast", with_threads("4096x4096+4096"), gbps, anchor_gbps(), "GB/s",
                    anchor);
    }
    // HardSwish as exporters write it, x * min(max(x + 3, 0), 6) / 6 (five Elemwise operators,
    // run step by step as one ElemwiseChain) or x * clip(x + 3, 0, 6) / 6 (four, a chain with a
    // loop of its own); the anchor is the same graph unfused, in the same run. Large (64 MiB,
    // memory-bound) and cache-resident (1 MiB); bytes count the input read and the chain's
    // result written once.
    for (bool clip : {false, true}) {
        const char* name = clip ? "hard_swish_clip" : "hard_swish_chain";
        if (!case_selected(opt, name)) continue;
        // Summed at the end, so that the graph's output is one float: a 64 MiB output tensor
        // would be allocated (and faulted in) anew by every run, hiding the chain's traffic.
        auto hard_swish = [clip](const SymbolVarArray& in) {
            auto k = [&](double v) { return opr::scalar_like(in[0], v); };
            SymbolVar t = clip ? opr::clip(in[0] + k(3), 0.0, 6.0)
                               : opr::minimum(opr::maximum(in[0] + k(3), k(0)), k(6));
            return opr::reduce_sum(opr::true_div(in[0] * t, k(6)), {0});
        };
        for (size_t elems : {n, size_t(256) * 1024}) {
            double bytes = 2 * 4.0 * double(elems);
            double fused = graph_gbps(opt, {{elems}}, hard_swish, bytes, true);
            double unfused = graph_gbps(opt, {{elems}}, hard_swish, bytes, false);
            report_case(opt, name, with_threads(std::to_string(elems)), fused, unfused, "GB/s",
                        clip ? "the_4_elemwise_unfused" : "the_5_elemwise_unfused");
        }
    }
    if (case_selected(opt, "gelu")) {
        double gbps = graph_gbps(
            opt, {{n}}, [](const SymbolVarArray& in) { return opr::gelu(in[0]); }, 2 * f32_bytes);
        report_case(opt, "gelu", with_threads("16777216"), gbps, anchor_gbps(), "GB/s", anchor);
    }
    if (case_selected(opt, "gelu_tanh")) {
        double gbps = graph_gbps(
            opt, {{n}}, [](const SymbolVarArray& in) { return opr::gelu_tanh(in[0]); },
            2 * f32_bytes);
        report_case(opt, "gelu_tanh", with_threads("16777216"), gbps, anchor_gbps(), "GB/s",
                    anchor);
    }
    if (case_selected(opt, "softmax")) {
        double gbps = graph_gbps(
            opt, {{4096, 4096}}, [](const SymbolVarArray& in) { return opr::softmax(in[0]); },
            2 * f32_bytes);
        report_case(opt, "softmax", with_threads("4096x4096 axis=-1"), gbps, anchor_gbps(), "GB/s",
                    anchor);
    }
    if (case_selected(opt, "layer_norm")) {
        double gbps = graph_gbps(
            opt, {{4096, 4096}, {4096}, {4096}},
            [](const SymbolVarArray& in) { return opr::layer_norm(in[0], in[1], in[2]); },
            2 * f32_bytes);
        report_case(opt, "layer_norm", with_threads("4096x4096 w+b"), gbps, anchor_gbps(), "GB/s",
                    anchor);
    }
    if (case_selected(opt, "reduce_sum")) {
        double gbps = graph_gbps(
            opt, {{4096, 4096}},
            [](const SymbolVarArray& in) { return opr::reduce_sum(in[0], {-1}); }, f32_bytes);
        report_case(opt, "reduce_sum", with_threads("4096x4096 axis=-1"), gbps, anchor_gbps(),
                    "GB/s", anchor);
    }
    if (case_selected(opt, "transpose")) {
        double gbps = graph_gbps(
            opt, {{4096, 4096}}, [](const SymbolVarArray& in) { return opr::transpose(in[0]); },
            2 * f32_bytes);
        report_case(opt, "transpose", with_threads("4096x4096"), gbps, anchor_gbps(), "GB/s",
                    anchor);
    }
}

} // namespace braid::bench
