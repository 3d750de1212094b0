// Pipeline parallelism: one training step of an MLP split into S stages (threads, stage i on
// comp node cpu<i>, the local backend), for each schedule and number of micro-batches B,
// against the same step on one device (the anchor) in the same run. Kernels use one thread
// each (set_kernel_threads(1)), so a stage is one core, as is the single device.
//
// Reported per case: the median step time; the measured bubble, 1 - (a stage's kernel time
// in the step, sends and recvs excluded) / (step time), averaged over the stages, beside
// GPipe's formula (S - 1) / (B + S - 1); the arena bytes of each stage's memory plan; and
// the speed-up over one device. A last line runs an unbalanced MLP (wide layers first) with
// the equal-layer split and with auto_partition()'s split.
//
//     bench_pipeline [--json] [--stages 2] [--iterations 5] [--batch 256] [--width 512]
//                    [--hidden 2048] [--layers 4]
#include "base/thread_pool.h"
#include "bench/bench_cli.h"
#include "braid.h"
#include "parallel/pipeline.h"
#include "parallel/pipeline_model.h"
#include "parallel/pipeline_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

using namespace braid;
using namespace braid::parallel;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    bool json = false;
    uint32_t stages = 2;
    int iterations = 5;
    size_t batch = 256, width = 512, hidden = 2048, layers = 4;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

PipelineModel make_model(const Options& o) {
    std::vector<size_t> widths{o.width};
    for (size_t l = 0; l < o.layers; ++l) widths.push_back(l % 2 == 0 ? o.hidden : o.width);
    return pipeline_mlp_model(widths, 1);
}

std::pair<Tensor, Tensor> make_batch(const PipelineModel& m, size_t rows) {
    Tensor x({rows, m.input_width}, dtype::Float32()), y({rows, m.label_width}, dtype::Float32());
    for (size_t i = 0; i < x.shape().total_nr_elems(); ++i) x.ptr<float>()[i] = float(i % 7) * 0.1f;
    for (size_t i = 0; i < y.shape().total_nr_elems(); ++i) y.ptr<float>()[i] = float(i % 5) * 0.1f;
    return {x, y};
}

opr::OptimizerConfig sgd() {
    opr::OptimizerConfig c;
    c.lr = 1e-4f;
    return c;
}

double single_device_ms(const Options& o) {
    auto model = make_model(o);
    auto [x, y] = make_batch(model, o.batch);
    GraphOptions go;
    go.enable_fusion = false; // as the pipeline's stages compile
    auto g = ComputingGraph::make(go);
    auto l = build_sequential_loss(*g, model, o.batch);
    std::vector<OutputSpec> outs{l.loss};
    for (auto& u : opr::minimize(l.loss, l.params, sgd())) outs.push_back(u);
    auto exec = g->compile(outs);
    exec->feed("x", x).feed("labels", y).run();
    std::vector<double> ms;
    for (int i = 0; i < o.iterations; ++i) {
        auto t0 = Clock::now();
        exec->run();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return median(ms);
}

void run_case(const Options& o, PipelineSchedule schedule, uint32_t b, double anchor_ms) {
    auto model = make_model(o);
    auto [x, y] = make_batch(model, o.batch);
    PipelineOptions po;
    po.stage_begin = equal_layer_split(model.layers.size(), o.stages);
    po.microbatches = b;
    po.schedule = schedule;
    po.optimizer = sgd();
    po.batch = o.batch;
    po.key = fmt::format("bench/{}/{}", pipeline_schedule_name(schedule), b);
    PipelineTrainer trainer(model, po);
    trainer.step(x, y); // first run: registration, communicators
    std::vector<double> busy(o.stages, 0);
    std::mutex mutex;
    for (uint32_t i = 0; i < o.stages; ++i)
        trainer.stage(i).step->set_step_observer(
            [&busy, &mutex, i](const OperatorNode& opr, auto begin, auto end) {
                std::string t = opr.type_name();
                if (t == "RemoteSend" || t == "RemoteRecv") return;
                std::lock_guard<std::mutex> lock(mutex);
                busy[i] += std::chrono::duration<double, std::milli>(end - begin).count();
            });
    std::vector<double> step_ms, bubble;
    for (int it = 0; it < o.iterations; ++it) {
        std::fill(busy.begin(), busy.end(), 0.0);
        auto t0 = Clock::now();
        trainer.step(x, y);
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        step_ms.push_back(ms);
        double idle = 0;
        for (double b_ms : busy) idle += 1.0 - b_ms / ms;
        bubble.push_back(idle / o.stages);
    }
    double formula = double(o.stages - 1) / double(b + o.stages - 1);
    std::string arenas;
    for (uint32_t i = 0; i < o.stages; ++i)
        arenas += fmt::format("{}{}", i ? "," : "",
                              trainer.stage(i).step->memory_report().nodes.at(0).arena_bytes);
    double ms = median(step_ms);
    if (o.json)
        std::printf("{\"bench\":\"pipeline\",\"stages\":%u,\"microbatches\":%u,\"schedule\":\"%s\","
                    "\"step_ms\":%.3f,\"bubble_measured\":%.3f,\"bubble_formula\":%.3f,"
                    "\"peak_arena_bytes\":[%s],\"single_device_ms\":%.3f,\"speedup\":%.3f,"
                    "\"batch\":%zu,\"width\":%zu,\"hidden\":%zu,\"layers\":%zu,"
                    "\"kernel_threads\":1}\n",
                    o.stages, b, pipeline_schedule_name(schedule), ms, median(bubble), formula,
                    arenas.c_str(), anchor_ms, anchor_ms / ms, o.batch, o.width, o.hidden,
                    o.layers);
    else
        std::printf("%-6s S=%u B=%-2u step %8.2f ms  bubble %.3f (formula %.3f)  arenas [%s] B  "
                    "one device %8.2f ms (%.2fx)\n",
                    pipeline_schedule_name(schedule), o.stages, b, ms, median(bubble), formula,
                    arenas.c_str(), anchor_ms, anchor_ms / ms);
    std::fflush(stdout);
}

//! An unbalanced MLP (four wide layers, then five narrow ones) on S stages, 1F1B with B = 4:
//! the equal-layer split against auto_partition() over measured per-layer profiles, same run.
void run_partition(const Options& o) {
    std::vector<size_t> widths{o.width, o.hidden, o.width, o.hidden, o.width / 4};
    for (int l = 0; l < 5; ++l) widths.push_back(o.width / 4);
    auto model = pipeline_mlp_model(widths, 1);
    uint32_t b = 4;
    auto layers = profile_layers(model, o.batch / b, 5, 2);
    auto equal = equal_layer_split(model.layers.size(), o.stages);
    auto best = auto_partition(layers, o.stages, b);
    auto [x, y] = make_batch(model, o.batch);
    auto step_ms = [&](const std::vector<size_t>& begin) {
        PipelineOptions po;
        po.stage_begin = begin;
        po.microbatches = b;
        po.optimizer = sgd();
        po.batch = o.batch;
        po.key = fmt::format("bench/partition/{}", begin[1]);
        PipelineTrainer trainer(model, po);
        trainer.step(x, y);
        std::vector<double> ms;
        for (int it = 0; it < o.iterations; ++it) {
            auto t0 = Clock::now();
            trainer.step(x, y);
            ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
        return median(ms);
    };
    auto list = [](const std::vector<size_t>& v) {
        std::string out;
        for (size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{}", i ? "," : "", v[i]);
        return out;
    };
    double equal_ms = step_ms(equal), auto_ms = step_ms(best.stage_begin);
    double equal_obj = partition_objective(layers, equal, b);
    if (o.json)
        std::printf("{\"bench\":\"pipeline_partition\",\"stages\":%u,\"microbatches\":%u,"
                    "\"schedule\":\"1f1b\",\"layers\":%zu,\"equal_split\":[%s],"
                    "\"auto_split\":[%s],\"equal_objective_ms\":%.3f,\"auto_objective_ms\":%.3f,"
                    "\"equal_step_ms\":%.3f,\"auto_step_ms\":%.3f,\"speedup\":%.3f}\n",
                    o.stages, b, model.layers.size(), list(equal).c_str(),
                    list(best.stage_begin).c_str(), equal_obj * 1e3, best.objective * 1e3, equal_ms,
                    auto_ms, equal_ms / auto_ms);
    else
        std::printf("unbalanced %zu-layer MLP, S=%u B=%u: equal split [%s] %.2f ms (objective "
                    "%.2f ms), auto split [%s] %.2f ms (objective %.2f ms): %.2fx\n",
                    model.layers.size(), o.stages, b, list(equal).c_str(), equal_ms,
                    equal_obj * 1e3, list(best.stage_begin).c_str(), auto_ms, best.objective * 1e3,
                    equal_ms / auto_ms);
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"bench_pipeline: GPipe and 1F1B training steps of an MLP on S stages against one "
                 "device"};
    app.option_defaults()->always_capture_default();
    app.add_flag("--json", o.json, "one JSON object per case instead of a sentence");
    app.add_option("--stages", o.stages, "pipeline stages (threads, stage i on cpu<i>)")
        ->check(CLI::Range(1u, 1024u));
    app.add_option("--iterations", o.iterations,
                   "timed steps per case, after one warm-up step (the median is reported)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--batch", o.batch, "samples per step, split into the micro-batches")
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    app.add_option("--width", o.width,
                   "the MLP's input width and the output width of its layers 1, 3, ...")
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    app.add_option("--hidden", o.hidden, "output width of the MLP's layers 0, 2, ...")
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    app.add_option("--layers", o.layers, "layers of the balanced MLP")
        ->check(CLI::Range(size_t(1), size_t(4096)));
    if (auto status = bench::parse_command_line(app, argc, argv)) return *status;
    try {
        register_all_operators();
        set_kernel_threads(1);
        double anchor = single_device_ms(o);
        for (auto schedule : {PipelineSchedule::GPIPE, PipelineSchedule::ONE_F_ONE_B})
            for (uint32_t b : {1u, 2u, 4u, 8u}) run_case(o, schedule, b, anchor);
        run_partition(o);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_pipeline: %s\n", e.what());
        return 1;
    }
}
