// braid-run: runs a serialized model and reports load time, latency statistics and outputs.
//
//     braid-run model.braid [--input x=in.npy] [--iter 50] [--json] ...
//     braid-run model.braid --devices 4                      # 4 ranks as threads
//     braid-run model.braid --server host:port --rank R --world-size N
//     mpirun -np 2 braid-run model.braid --backend mpi
//     braid-launch -n 3 -- braid-run model.braid --backend gloo   # ranks from the environment
//
// Exit status: 0 success, 2 usage error, 3 bad model or input file, 4 failure while running.
// Every error is one line on stderr. See docs/cli.md.
#include "base/cpu_isa.h"
#include "base/hash.h"
#include "base/host_port.h"
#include "base/log.h"
#include "operators/dense_kernels.h"
#include "tools/printable.h"
#include "tools/run_model.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>

using namespace braid;
using namespace braid::tools;

namespace {

constexpr size_t FIRST_VALUES = 6;

std::string checksum_hex(const Tensor& t) {
    Tensor c = t.contiguous();
    return fmt::format("{:016x}", xxhash64(c.raw_ptr(), c.nr_bytes()));
}

std::vector<double> first_values(const Tensor& t) {
    std::vector<double> v;
    for (size_t i = 0; i < std::min(FIRST_VALUES, t.shape().total_nr_elems()); ++i)
        v.push_back(t.at(i));
    return v;
}

std::string value_text(double v, DType dt) {
    if (dt == dtype::Uint64()) return fmt::format("{}", uint64_t(v));
    if (!dt.is_float()) return fmt::format("{}", int64_t(v));
    return fmt::format("{:.6g}", v);
}

std::vector<double> all_iterations(const RunResult& r) {
    std::vector<double> all;
    for (auto& rank : r.ranks)
        all.insert(all.end(), rank.iteration_ms.begin(), rank.iteration_ms.end());
    return all;
}

void print_text(const RunConfig& cfg, const RunResult& r) {
    auto& info = r.info;
    auto& r0 = r.ranks.at(0);
    std::printf("model: %s (format %u.%u, %zu operators, %zu parameter tensors, %s)\n",
                cfg.model_path.c_str(), info.format_major, info.format_minor, info.nr_operators,
                info.nr_tensors, format_bytes(info.tensor_bytes).c_str());
    if (!r.note.empty()) std::printf("%s\n", r.note.c_str());
    std::string devices;
    if (cfg.devices > 1)
        devices = fmt::format(", devices: {} ({})", cfg.devices,
                              r.collectives ? "ranks as threads, in-process group manager"
                                            : "independent copies: no collective operators");
    std::printf("comp node: %s, kernel threads: %zu, kernel ISA: %s, memory plan: %s%s%s\n",
                r0.comp_node.c_str(), r.kernel_threads, cpu_isa_name(cpu_isa()),
                cfg.mem_plan ? "on" : "off", cfg.deterministic ? ", deterministic" : "",
                devices.c_str());
    std::printf("float32 GEMMs: %s\n", opr::kern::sgemm_library_rule());
    std::printf("load: %.3f ms (%s of parameters used in place from the mapped file), "
                "compile: %.3f ms\n",
                r0.load_ms, format_bytes(info.mapped_bytes).c_str(), r0.compile_ms);
    for (auto& in : r.inputs)
        std::printf("input %s: %s %s (model shape %s)\n", printable(in.name).c_str(),
                    printable(in.source).c_str(), in.description().c_str(), in.model_shape.c_str());
    auto s = latency_stats(all_iterations(r));
    std::printf("iterations: %zu after %zu warm-up%s\n", cfg.iterations, cfg.warmup,
                cfg.devices > 1 ? fmt::format(" (per rank; {} samples)", s.count).c_str() : "");
    std::printf("time per iteration (ms): min %.3f  median %.3f  mean %.3f  p90 %.3f  p99 %.3f  "
                "max %.3f\n",
                s.min, s.median, s.mean, s.p90, s.p99, s.max);
    for (auto& [name, t] : r0.outputs) {
        std::printf("output %s: %s %s checksum %s\n", printable(name).c_str(), t.dtype().name(),
                    t.shape().to_string().c_str(), checksum_hex(t).c_str());
        std::string vals;
        for (double v : first_values(t)) vals += " " + value_text(v, t.dtype());
        std::printf("  first values:%s%s\n", vals.c_str(),
                    t.shape().total_nr_elems() > FIRST_VALUES ? " ..." : "");
    }
    // The other ranks' outputs, by checksum (--json and --output-dir have rank 0's values).
    for (size_t k = 1; k < r.ranks.size(); ++k)
        for (size_t i = 0; i < r.ranks[k].outputs.size(); ++i) {
            auto& [name, t] = r.ranks[k].outputs[i];
            std::string sum = checksum_hex(t);
            std::printf("rank %zu output %s: %s %s checksum %s (%s rank 0)\n", k,
                        printable(name).c_str(), t.dtype().name(), t.shape().to_string().c_str(),
                        sum.c_str(),
                        sum == checksum_hex(r0.outputs[i].second) ? "same as" : "differs from");
        }
    if (cfg.mem_report) {
        if (r0.planner_report)
            std::printf("memory:\n%s", r0.memory_report.c_str());
        else
            std::printf("memory (the planner report is unavailable in this build; summary from "
                        "static shapes):\n%s",
                        r0.memory_report.c_str());
        const ProcessMemory &before = r.memory_before, &after = r0.memory;
        if (!r0.memory_report.empty() && r0.memory_report.back() != '\n') std::printf("\n");
        std::printf("process: %s resident before loading, peak %s (%s above); the run needs %s "
                    "(parameters and constants, arena, own allocations, inputs%s); after the "
                    "run %s anonymous (%s generated code), %s file-backed\n",
                    format_bytes(before.rss).c_str(), format_bytes(after.peak_rss).c_str(),
                    format_bytes(after.peak_rss - std::min(after.peak_rss, before.rss)).c_str(),
                    format_bytes(r.need_bytes()).c_str(),
                    r0.has_subgraphs ? "; not those of its If and Loop subgraphs" : "",
                    format_bytes(after.anon).c_str(), format_bytes(after.jit_code).c_str(),
                    format_bytes(after.file).c_str());
    }
    if (!cfg.profile_path.empty())
        std::printf("profile: %s (Chrome trace; open in Perfetto)\n", cfg.profile_path.c_str());
    if (!cfg.output_dir.empty()) std::printf("outputs written to %s/\n", cfg.output_dir.c_str());
}

//! [{name, dtype, shape, first_values, checksum}, ...]
nlohmann::ordered_json outputs_json(const std::vector<std::pair<std::string, Tensor>>& outputs) {
    auto list = nlohmann::ordered_json::array();
    for (auto& [name, t] : outputs)
        list.push_back({{"name", name},
                        {"dtype", t.dtype().name()},
                        {"shape", t.shape().dims()},
                        {"first_values", first_values(t)},
                        {"checksum", checksum_hex(t)}});
    return list;
}

void print_json(const RunConfig& cfg, const RunResult& r) {
    auto& r0 = r.ranks.at(0);
    auto s = latency_stats(all_iterations(r));
    nlohmann::ordered_json j = {
        {"model", cfg.model_path},
        {"format", {{"major", r.info.format_major}, {"minor", r.info.format_minor}}},
        {"producer", r.info.producer},
        {"operators", r.info.nr_operators},
        {"parameter_tensors", r.info.nr_tensors},
        {"parameter_bytes", r.info.tensor_bytes},
        {"mapped_bytes", r.info.mapped_bytes},
        {"comp_node", r0.comp_node},
        {"kernel_threads", r.kernel_threads},
        {"kernel_isa", cpu_isa_name(cpu_isa())},
        {"gemm_library", opr::kern::sgemm_library_rule()},
        {"memory_plan", cfg.mem_plan},
        {"deterministic", cfg.deterministic},
        {"devices", cfg.devices}};
    if (r.world_size > 0) {
        j["rank"] = r.rank;
        j["world_size"] = r.world_size;
    }
    j["load_ms"] = r0.load_ms;
    j["compile_ms"] = r0.compile_ms;
    j["warmup"] = cfg.warmup;
    j["iterations"] = cfg.iterations;
    j["latency_ms"] = {{"min", s.min}, {"median", s.median}, {"mean", s.mean},
                       {"p90", s.p90}, {"p99", s.p99},       {"max", s.max}};
    j["iteration_ms"] = r0.iteration_ms;
    if (r.ranks.size() > 1) {
        auto ranks = nlohmann::ordered_json::array();
        for (auto& rank : r.ranks)
            ranks.push_back({{"rank", rank.rank},
                             {"comp_node", rank.comp_node},
                             {"load_ms", rank.load_ms},
                             {"median_ms", latency_stats(rank.iteration_ms).median},
                             {"outputs", outputs_json(rank.outputs)}});
        j["ranks"] = std::move(ranks);
    }
    auto inputs = nlohmann::ordered_json::array();
    for (auto& in : r.inputs) {
        nlohmann::ordered_json j_in = {{"name", in.name}, {"source", in.source}};
        if (in.none) {
            j_in["none"] = true;
        } else if (in.sequence) {
            auto elements = nlohmann::ordered_json::array();
            for (auto& e : in.elements)
                elements.push_back({{"dtype", e.dtype().name()}, {"shape", e.shape().dims()}});
            j_in["elements"] = std::move(elements);
        } else {
            j_in["dtype"] = in.value.dtype().name();
            j_in["shape"] = in.value.shape().dims();
        }
        inputs.push_back(std::move(j_in));
    }
    j["inputs"] = std::move(inputs);
    j["outputs"] = outputs_json(r0.outputs);
    if (cfg.mem_report)
        j["memory"] = {{"planner_report", r0.planner_report}, {"text", r0.memory_report}};
    auto process_json = [](const ProcessMemory& m) {
        return nlohmann::ordered_json{{"rss", m.rss},
                                      {"peak_rss", m.peak_rss},
                                      {"anon", m.anon},
                                      {"file", m.file},
                                      {"jit_code", m.jit_code}};
    };
    j["process_memory"] = {{"before_load", process_json(r.memory_before)},
                           {"after_run", process_json(r0.memory)},
                           {"need", r.need_bytes()},
                           {"need_counts_subgraphs", !r0.has_subgraphs},
                           {"constants", r0.constant_bytes},
                           {"arena", r0.arena_bytes},
                           {"own_allocations", r0.own_allocation_bytes}};
    if (!cfg.profile_path.empty()) j["profile"] = cfg.profile_path;
    if (!r.note.empty()) j["note"] = r.note;
    // Names and paths that are not UTF-8 are printed with U+FFFD in place of the bad bytes.
    std::printf("%s\n",
                j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
}

int error_exit(int code, const std::string& msg) {
    std::string line = msg;
    std::replace(line.begin(), line.end(), '\n', ' ');
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::fprintf(stderr, "braid-run: error: %s\n", printable(line).c_str());
    return code;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"Runs a serialized braid model: load time, latency statistics, outputs.",
                 "braid-run"};
    RunConfig cfg;
    std::vector<std::string> inputs;
    app.add_option("model", cfg.model_path, "Model file (.braid)")->required();
    app.add_option("--input", inputs,
                   "NAME=FILE.npy, NAME=random or NAME=random:SHAPE (e.g. x=random:4x784); "
                   "a sequence input NAME=A.npy,B.npy,...; an optional input NAME=none for no "
                   "value; repeat for each input. Inputs not given are random with the "
                   "model's default shape")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    std::vector<std::string> binds;
    app.add_option("--bind", binds,
                   "NAME=V0,V1,... or NAME=FILE.npy: the value of an ONNX shape input (an input "
                   "read as a shape, axes, sizes or scales), fixed when the model is imported; "
                   "repeat for each")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.add_option("--iter", cfg.iterations, "Timed iterations")
        ->capture_default_str()
        ->check(CLI::Range(size_t(1), size_t(1) << 30));
    app.add_option("--warmup", cfg.warmup, "Untimed iterations first")
        ->capture_default_str()
        ->check(CLI::Range(size_t(0), size_t(1) << 30));
    app.add_option("--threads", cfg.threads, "Kernel threads (default: BRAID_NUM_THREADS or all)")
        ->check(CLI::Range(size_t(1), size_t(4096)));
    app.add_option("--comp-node", cfg.comp_node,
                   "Run every operator on this comp node: cpu0, cpu:default, cuda0, ... "
                   "(default: cpu:default, the calling thread; cpu0 with --devices)");
    app.add_option("--output-dir", cfg.output_dir, "Write each output as DIR/NAME.npy");
    app.add_flag("--json", cfg.json, "Print one JSON object instead of text");
    app.add_option("--profile", cfg.profile_path,
                   "Write per-operator timings of the timed iterations as a Chrome trace");
    app.add_flag("--mem-report", cfg.mem_report, "Print the memory plan report");
    app.add_option("--memory-budget", cfg.memory_budget,
                   "Most bytes the model's vars and memory plan may take, e.g. 8G (default: "
                   "BRAID_MEMORY_BUDGET, else physical memory); a model over it exits 3")
        ->transform(
            [](std::string s) -> std::string {
                try {
                    return std::to_string(parse_byte_size(s, "--memory-budget"));
                } catch (const std::exception& e) {
                    throw CLI::ValidationError(e.what());
                }
            },
            "BYTES");
    bool no_mem_plan = false;
    app.add_flag("--no-mem-plan", no_mem_plan, "Give every var its own allocation");
    bool no_fusion = false;
    app.add_flag("--no-fusion", no_fusion,
                 "Run every operator as built: no matmul or convolution epilogue fusion");
    app.add_flag("--deterministic", cfg.deterministic,
                 "Deterministic mode: each output element's bits depend only on the model and "
                 "its own inputs, not on the batch, the threads or the comp node "
                 "(docs/determinism.md; also BRAID_DETERMINISTIC=1)");
    app.add_option("--seed", cfg.seed, "Seed of random inputs")->capture_default_str();
    auto* devices =
        app.add_option("--devices", cfg.devices,
                       "Run N ranks as threads of this process (one comp node each) with an "
                       "in-process group manager")
            ->check(CLI::Range(size_t(1), size_t(256)));
    auto* server =
        app.add_option("--server", cfg.server, "Group manager HOST:PORT (multi-process ranks)")
            ->check(CLI::Validator(
                [](std::string& s) -> std::string {
                    if (parse_host_port(s)) return {};
                    return "expected HOST:PORT (a port in 1..65535), got \"" + s + "\"";
                },
                "HOST:PORT"));
    app.add_option("--rank", cfg.rank,
                   "This process's rank (with --server; under --backend mpi, checked against "
                   "MPI's)")
        ->check(CLI::Range(0, 1 << 20));
    app.add_option("--world-size", cfg.world_size, "Number of ranks (with --server)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--backend", cfg.backend,
                   "Collective backend: local (ranks as threads, the default), mpi (one rank "
                   "per process under mpirun; MPI rank 0 hosts the group manager unless "
                   "--server is given), gloo (one rank per process, on any host, meeting at "
                   "--server; the default under braid-launch), nccl")
        ->check(CLI::IsMember({"local", "mpi", "gloo", "nccl"}));
    devices->excludes(server);

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);
        return error_exit(EXIT_USAGE, std::string(e.what()) + " (see braid-run --help)");
    }
    cfg.mem_plan = !no_mem_plan;
    cfg.fusion = !no_fusion;
    // Kernel failures are reported once, by this tool; the library's own error log would
    // repeat them. BRAID_LOG_LEVEL still wins when set.
    if (!std::getenv("BRAID_LOG_LEVEL")) logger()->set_level(spdlog::level::critical);

    try {
        apply_launch_environment(cfg);
        for (auto& s : inputs) cfg.inputs.push_back(parse_input_spec(s));
        for (auto& s : binds) {
            auto [name, value] = parse_binding(s);
            if (!cfg.bound_inputs.emplace(name, value).second)
                throw ToolError(EXIT_USAGE, "--bind " + name + " is given twice");
        }
        RunResult result = run_model(cfg);
        if (!result.report) return EXIT_OK; // an MPI rank other than 0
        if (cfg.json)
            print_json(cfg, result);
        else
            print_text(cfg, result);
        std::fflush(stdout);
        return EXIT_OK;
    } catch (const ToolError& e) {
        int code = error_exit(e.exit_code(), e.what());
        if (cfg.backend == "mpi") abort_mpi_job(code);
        return code;
    } catch (const std::exception& e) {
        int code = error_exit(EXIT_RUN_FAILED, e.what());
        if (cfg.backend == "mpi") abort_mpi_job(code);
        return code;
    }
}
