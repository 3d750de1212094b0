// braid-inspect: what a model file holds — inputs, outputs, operator counts, parameter bytes,
// static shapes and a memory summary; --dot prints the graph for Graphviz; --ranks N prints
// the per-rank plan of the model run as N ranks (memory and every collective's bytes), from
// static inference alone.
//
//     braid-inspect model.braid            braid-inspect model.braid --dot | dot -Tsvg > g.svg
//     braid-inspect dp.braid --ranks 4
//     braid-inspect model.braid --auto-shard dp=2,tp=2 [--memory-limit BYTES] [--json]
//         the automatic sharding plan (parallel/auto_shard.h) and every rank's static plan
//     braid-inspect --pipeline-mlp 2048,8192,2048,8192,2048 --microbatches 2 [--json]
//         the Alpa-style stage profiles of an MLP trained on a pipeline (parallel/
//         pipeline_profile.h): static memory figures; compute_cost with --measure N steps
//     braid-inspect --pipeline-mlp 1024,4096,1024 --microbatches 4 --auto-stages 4
//         the stages and each stage's devices chosen by the inter-operator DP
//
// Exit status: 0 success, 2 usage error, 3 a file that is not a readable model or that this
// build cannot load (what it holds is still printed first). The subgraphs of If and Loop
// operators are listed with their operators, nested.
#include "embed/embed_internal.h"
#include "onnx_import/onnx_import.h"
#include "operators/control_flow.h"
#include "parallel/pipeline_model.h"
#include "parallel/pipeline_profile.h"
#include "parallel/rank_plan.h"
#include "parallel/stage_sharding.h"
#include "tools/auto_shard_report.h"
#include "tools/mem_summary.h"
#include "tools/printable.h"
#include "tools/run_model.h"

#include "base/log.h"

#include <CLI/CLI.hpp>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>

using namespace braid;
using namespace braid::tools;

namespace {

std::string var_text(const ModelVar& v) {
    return fmt::format("{} {}", v.dtype.name(), v.shape_known ? v.shape.to_string() : "dynamic");
}

std::string dot_escape(const std::string& text) {
    std::string r, s = printable(text);
    for (char c : s) {
        if (c == '"' || c == '\\') r += '\\';
        r += c;
    }
    return r;
}

void print_dot(const ModelDescription& d) {
    std::printf("digraph model {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
                "  edge [fontname=\"Helvetica\", fontsize=9];\n");
    std::vector<int> producer(d.vars.size(), -1);
    for (size_t i = 0; i < d.operators.size(); ++i)
        for (uint32_t v : d.operators[i].outputs) producer[v] = int(i);
    for (size_t i = 0; i < d.operators.size(); ++i) {
        auto& o = d.operators[i];
        std::string label = dot_escape(o.type_name) + "\\n" + dot_escape(o.name);
        for (auto& [k, v] : o.params)
            if (v.size() <= 24) label += "\\n" + dot_escape(k + "=" + v);
        const char* style = o.type_name == "Input" ? "shape=ellipse, style=filled, "
                                                     "fillcolor=\"#d0e8ff\""
                            : (o.type_name == "SharedParam" || o.type_name == "ImmutableTensor")
                                ? "shape=box, style=filled, fillcolor=\"#eeeeee\""
                                : "shape=box, style=rounded";
        std::printf("  op%zu [label=\"%s\", %s];\n", i, label.c_str(), style);
    }
    for (size_t i = 0; i < d.operators.size(); ++i)
        for (uint32_t v : d.operators[i].inputs)
            if (producer[v] >= 0)
                std::printf(
                    "  op%d -> op%zu [label=\"%s\"];\n", producer[v], i,
                    dot_escape(d.vars[v].shape_known ? d.vars[v].shape.to_string() : "?").c_str());
    for (size_t k = 0; k < d.outputs.size(); ++k) {
        auto& out = d.outputs[k];
        std::printf(
            "  out%zu [label=\"%s\", shape=ellipse, style=filled, fillcolor=\"#d8f5d0\"];\n", k,
            dot_escape(out.name).c_str());
        for (size_t v = 0; v < d.vars.size(); ++v)
            if (d.vars[v].name == out.name && producer[v] >= 0)
                std::printf("  op%d -> out%zu;\n", producer[v], k);
    }
    std::printf("}\n");
}

void print_summary(const std::string& path, const ModelDescription& d) {
    auto& info = d.info;
    std::printf("model: %s\n", path.c_str());
    std::printf("format: %u.%u, producer \"%s\", %zu bytes, checksum %016llx\n", info.format_major,
                info.format_minor, printable(info.producer).c_str(), info.file_size,
                static_cast<unsigned long long>(info.checksum));
    for (auto& [k, v] : info.metadata)
        std::printf("metadata: %s = %s\n", printable(k).c_str(), printable(v).c_str());
    std::printf("inputs:\n");
    for (auto& in : d.inputs)
        std::printf("  %s: %s %s (default %s)\n", printable(in.name).c_str(), in.dtype.name(),
                    in.shape_string().c_str(), in.default_shape.to_string().c_str());
    std::printf("outputs:\n");
    for (auto& out : d.outputs)
        std::printf("  %s: %s %s\n", printable(out.name).c_str(), out.dtype.name(),
                    out.shape_string().c_str());
    std::map<std::string, size_t> counts;
    for (auto& o : d.operators) ++counts[o.type_name];
    std::printf("operators: %zu\n", d.operators.size());
    for (auto& [type, n] : counts) std::printf("  %-16s %zu\n", printable(type).c_str(), n);
    size_t refs = 0;
    for (auto& o : d.operators)
        for (auto& [k, v] : o.params) refs += v.rfind("tensor #", 0) == 0;
    std::printf("parameters: %zu tensors, %zu bytes (%s), referenced %zu times\n", info.nr_tensors,
                info.tensor_bytes, format_bytes(info.tensor_bytes).c_str(), refs);
    std::printf("vars (static shapes with the default input shapes):\n");
    std::vector<int> producer(d.vars.size(), -1);
    for (size_t i = 0; i < d.operators.size(); ++i)
        for (uint32_t v : d.operators[i].outputs) producer[v] = int(i);
    for (size_t v = 0; v < d.vars.size(); ++v) {
        auto& var = d.vars[v];
        std::string from = producer[v] >= 0
                               ? fmt::format("{} \"{}\"", d.operators[producer[v]].type_name,
                                             d.operators[producer[v]].name)
                               : "?";
        std::printf("  #%-4zu %-24s %-24s <- %s\n", v, printable(var.name).c_str(),
                    var_text(var).c_str(), printable(from).c_str());
    }
}

//! What an imported ONNX model became: its inputs and outputs and braid's operators.
void print_imported(const std::string& path, const LoadedModel& m) {
    std::printf("model: %s (ONNX, producer \"%s\")\n", path.c_str(),
                printable(m.info.producer).c_str());
    std::printf("inputs:\n");
    for (auto& in : m.inputs)
        std::printf("  %s: %s %s (default %s)\n", printable(in.name).c_str(), in.dtype.name(),
                    in.shape_string().c_str(), in.default_shape.to_string().c_str());
    std::printf("outputs:\n");
    for (auto& out : m.outputs)
        std::printf("  %s: %s %s\n", printable(out.name).c_str(), out.dtype.name(),
                    out.shape_string().c_str());
    std::map<std::string, size_t> counts;
    for (auto& o : m.graph->operators()) ++counts[o->type_name()];
    std::printf("braid operators: %zu\n", m.graph->operators().size());
    for (auto& [type, n] : counts) std::printf("  %-16s %zu\n", type.c_str(), n);
}

//! The subgraphs of the control-flow operators in `g` (If branches, Loop bodies), nested, with
//! their operators by type; nothing when there are none.
void print_subgraphs(const ComputingGraph& g, int depth = 1) {
    bool listed = false;
    for (auto& o : g.operators()) {
        std::vector<std::pair<const char*, const opr::Subgraph*>> subs;
        if (auto* op = dynamic_cast<const opr::If*>(o.get()))
            subs = {{"then", &op->branch(0)}, {"else", &op->branch(1)}};
        else if (auto* op = dynamic_cast<const opr::Loop*>(o.get()))
            subs = {{"body", &op->body()}};
        if (subs.empty()) continue;
        if (depth == 1 && !listed) std::printf("subgraphs:\n");
        listed = true;
        std::string pad(size_t(depth) * 2, ' ');
        for (auto& [label, sg] : subs) {
            std::string head =
                fmt::format("{}{} \"{}\" {}", pad, o->type_name(), printable(o->name()), label);
            if (sg->error) {
                std::string msg;
                try {
                    std::rethrow_exception(sg->error);
                } catch (const std::exception& e) {
                    msg = e.what();
                }
                std::replace(msg.begin(), msg.end(), '\n', ' ');
                std::printf("%s: not built (%s)\n", head.c_str(), printable(msg).c_str());
                continue;
            }
            std::map<std::string, size_t> counts;
            for (auto& so : sg->graph->operators()) ++counts[so->type_name()];
            std::string list;
            for (auto& [type, n] : counts)
                list += fmt::format("{}{} {}", list.empty() ? "" : ", ", type, n);
            std::printf("%s: %zu operators (%s), %zu outputs\n", head.c_str(),
                        sg->graph->operators().size(), list.c_str(), sg->outputs.size());
            print_subgraphs(*sg->graph, depth + 1);
        }
    }
}

//! The memory plan of the loaded model; a model over the memory budget is an error, other
//! compile failures (a collective without its peers, say) only leave the plan unavailable.
void print_memory(const LoadedModel& model) {
    try {
        auto exec = model.compile();
        if (auto report = planner_report(*exec)) {
            std::printf("memory plan:\n%s", report->c_str());
            return;
        }
        std::vector<VarNode*> outs;
        for (auto& o : model.outputs) outs.push_back(o.var.node());
        std::printf("memory (the planner report is unavailable in this build; summary from "
                    "static shapes):\n%s",
                    summarize_memory(*exec, outs).to_string().c_str());
    } catch (const MemoryBudgetError&) {
        throw;
    } catch (const std::exception& e) {
        std::string msg = e.what();
        std::replace(msg.begin(), msg.end(), '\n', ' ');
        std::printf("memory: unavailable: %s\n", printable(msg).c_str());
    }
}

/*!
 * --ranks N: the model loaded once per rank, bound as braid-run binds rank r of N (every
 * collective's group size becomes N), and compiled but never run, so no rank waits for its
 * peers; the plan comes from static inference and the memory planner.
 */
void print_rank_plan(const std::string& path, uint32_t nr_ranks) {
    auto client = std::make_shared<comm::InProcessGroupClient>();
    std::vector<LoadedModel> models;
    std::vector<std::unique_ptr<Executable>> execs;
    std::vector<const Executable*> plan_of;
    for (uint32_t r = 0; r < nr_ranks; ++r) {
        LoadOptions opt;
        opt.collective.rank = int(r);
        opt.collective.world_size = int(nr_ranks);
        opt.collective.group_client = client;
        models.push_back(load(path, opt));
        execs.push_back(models.back().compile());
        plan_of.push_back(execs.back().get());
    }
    auto plan = parallel::plan_ranks(plan_of);
    std::printf("per-rank plan for %u ranks (static shapes and memory plans; nothing run):\n%s",
                nr_ranks, plan.to_string().c_str());
}

//! What --pipeline-mlp profiles.
struct PipelineProfileOptions {
    std::vector<size_t> widths, stage_begin;
    std::string activation = "tanh", schedule = "1f1b";
    bool activate_last = false, json = false;
    uint32_t microbatches = 1;
    size_t batch = 0; //!< 0: 64 rows per micro-batch
    int measure = 0;
    uint32_t auto_devices = 0; //!< --auto-stages: devices to split stages and submeshes over
    bool analytic = false;     //!< --auto-stages: estimated operator times
};

//! --auto-stages D: the stages and each stage's devices that Alpa's inter-operator DP chooses,
//! each stage priced by the intra-operator ILP (parallel/stage_sharding.h).
void print_auto_stages(const PipelineProfileOptions& p) {
    using namespace braid::parallel;
    auto model = pipeline_mlp_model(p.widths, 1, p.activation, p.activate_last);
    size_t batch = p.batch ? p.batch : 64 * size_t(p.microbatches);
    size_t rows = batch / p.microbatches;
    AutoShardOptions options;
    options.costs =
        p.analytic ? AutoShardOptions::Costs::ANALYTIC : AutoShardOptions::Costs::MEASURED;
    auto part = auto_partition_submeshes(
        model.layers.size(), p.auto_devices, p.microbatches, [&](size_t a, size_t b, uint32_t m) {
            return sharded_stage_cost(model, a, b, m, rows, options);
        });
    if (p.json) {
        nlohmann::ordered_json j;
        j["devices"] = p.auto_devices;
        j["microbatches"] = p.microbatches;
        j["stage_begin"] = part.stage_begin;
        j["stage_devices"] = part.stage_devices;
        j["stage_cost_s"] = part.stage_cost;
        j["objective_s"] = part.objective;
        std::printf("%s\n", j.dump().c_str());
        return;
    }
    std::printf("stages over %u devices, %u micro-batches of %zu rows (each stage's layers "
                "planned by the sharding ILP, operator times %s):\n",
                p.auto_devices, p.microbatches, rows, p.analytic ? "estimated" : "measured");
    for (size_t s = 0; s < part.stage_begin.size(); ++s) {
        size_t end =
            s + 1 < part.stage_begin.size() ? part.stage_begin[s + 1] : model.layers.size();
        std::printf("  stage %zu: layers %zu..%zu on %u device(s): %.1f us per micro-batch\n", s,
                    part.stage_begin[s], end - 1, part.stage_devices[s], part.stage_cost[s] * 1e6);
    }
    std::printf("predicted step: %.1f us (sum of stages + (micro-batches - 1) x the slowest)\n",
                part.objective * 1e6);
    // How to train it: the example's ShardedPipelineTrainer (parallel/sharded_pipeline.h).
    auto list = [](const auto& v) { return fmt::format("{}", fmt::join(v, ",")); };
    std::printf(
        "train it: pipeline_mlp --widths %s --activation %s%s --microbatches %u --batch %zu "
        "--stage-begin %s --stage-devices %s\n",
        list(p.widths).c_str(), p.activation.c_str(), p.activate_last ? " --activate-last" : "",
        p.microbatches, batch, list(part.stage_begin).c_str(), list(part.stage_devices).c_str());
}

//! Builds the pipeline's stages (threads, nothing run unless `measure`) and prints their
//! profiles.
void print_pipeline_profiles(const PipelineProfileOptions& p) {
    using namespace braid::parallel;
    if (p.auto_devices) {
        print_auto_stages(p);
        return;
    }
    auto model = pipeline_mlp_model(p.widths, 1, p.activation, p.activate_last);
    PipelineOptions o;
    o.stage_begin = p.stage_begin.empty() ? std::vector<size_t>{0} : p.stage_begin;
    o.microbatches = p.microbatches;
    o.schedule = parse_pipeline_schedule(p.schedule);
    o.batch = p.batch ? p.batch : 64 * size_t(p.microbatches);
    PipelineTrainer trainer(model, o);
    std::vector<StageProfile> profiles;
    for (uint32_t i = 0; i < trainer.nr_stages(); ++i)
        profiles.push_back(profile_stage(trainer.stage(i), p.schedule));
    if (p.measure > 0) {
        Tensor x({o.batch, model.input_width}, dtype::Float32());
        Tensor y({o.batch, model.label_width}, dtype::Float32());
        for (size_t i = 0; i < x.shape().total_nr_elems(); ++i) x.ptr<float>()[i] = 0.01f;
        for (size_t i = 0; i < y.shape().total_nr_elems(); ++i) y.ptr<float>()[i] = 0.02f;
        trainer.step(x, y); // warm-up
        measure_compute_cost(trainer, x, y, p.measure, profiles);
    }
    if (p.json)
        std::printf("%s\n", stage_profiles_json(profiles).c_str());
    else
        std::printf("%s%s", stage_profile_table(profiles).c_str(),
                    p.measure > 0 ? ""
                                  : "(compute_cost 0: nothing run; --measure N measures it)\n");
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"Shows what a braid model file holds.", "braid-inspect"};
    std::string path;
    bool dot = false;
    uint32_t ranks = 0;
    PipelineProfileOptions pp;
    auto* model_opt = app.add_option("model", path, "Model file (.braid)");
    auto* pipeline_opt =
        app.add_option("--pipeline-mlp", pp.widths,
                       "Print the stage profiles of this MLP (widths, comma-separated) trained on "
                       "a pipeline, instead of reading a model")
            ->delimiter(',')
            ->excludes(model_opt);
    app.add_option("--stage-begin", pp.stage_begin,
                   "With --pipeline-mlp: first layer of each "
                   "stage (default: one stage)")
        ->delimiter(',')
        ->needs(pipeline_opt);
    app.add_option("--microbatches", pp.microbatches, "With --pipeline-mlp: micro-batches")
        ->check(CLI::Range(1u, 1024u))
        ->needs(pipeline_opt);
    app.add_option("--batch", pp.batch,
                   "With --pipeline-mlp: rows per step (default 64 per "
                   "micro-batch)")
        ->needs(pipeline_opt);
    app.add_option("--schedule", pp.schedule, "With --pipeline-mlp: gpipe or 1f1b")
        ->check(CLI::IsMember({"gpipe", "1f1b"}))
        ->needs(pipeline_opt);
    app.add_option("--activation", pp.activation, "With --pipeline-mlp: tanh or relu")
        ->check(CLI::IsMember({"tanh", "relu"}))
        ->needs(pipeline_opt);
    app.add_flag("--activate-last", pp.activate_last,
                 "With --pipeline-mlp: the activation after the last layer too")
        ->needs(pipeline_opt);
    app.add_option("--measure", pp.measure,
                   "With --pipeline-mlp: run N steps to measure compute_cost")
        ->check(CLI::Range(0, 1000))
        ->needs(pipeline_opt);
    app.add_option("--auto-stages", pp.auto_devices,
                   "With --pipeline-mlp: choose the stages and each stage's devices over N "
                   "devices (Alpa's inter-operator DP, each stage planned by the sharding ILP) "
                   "instead of profiling --stage-begin's stages")
        ->check(CLI::Range(1u, 64u))
        ->needs(pipeline_opt);
    auto* json_flag = app.add_flag("--json", pp.json,
                                   "With --pipeline-mlp or --auto-shard: one JSON line instead of "
                                   "the table");
    auto* dot_flag = app.add_flag("--dot", dot, "Print the graph in Graphviz dot format instead");
    app.add_option("--ranks", ranks,
                   "Print the plan of every rank of an N-rank run instead of the memory plan: "
                   "arena and parameter bytes, each collective's group and bytes")
        ->check(CLI::Range(1u, 4096u))
        ->excludes(dot_flag);
    AutoShardRequest shard;
    std::map<std::string, std::string> shapes;
    auto* shard_opt =
        app.add_option("--auto-shard", shard.mesh,
                       "Plan the sharding of every operator on this mesh (2x2 or dp=2,tp=2) and "
                       "print the plan, its runner-ups and every rank's static plan")
            ->excludes(dot_flag)
            ->needs(model_opt);
    app.add_option("--memory-limit", shard.memory_limit,
                   "With --auto-shard: bytes each rank may hold (parameters and activations)")
        ->needs(shard_opt);
    app.add_option("--time-limit", shard.time_limit_s, "With --auto-shard: seconds for the ILP")
        ->check(CLI::Range(0.1, 3600.0))
        ->needs(shard_opt);
    auto* analytic_flag =
        app.add_flag("--analytic", shard.analytic,
                     "With --auto-shard or --auto-stages: estimate operator times from flops and "
                     "bytes instead of measuring them");
    app.add_option("--input-shape", shapes,
                   "With --auto-shard: NAME=DIMS (e.g. x=64x784) for an input whose shape the "
                   "model leaves open")
        ->needs(shard_opt);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);
        std::fprintf(stderr, "braid-inspect: error: %s (see braid-inspect --help)\n", e.what());
        return EXIT_USAGE;
    }
    if (!std::getenv("BRAID_LOG_LEVEL")) logger()->set_level(spdlog::level::critical);
    pp.analytic = shard.analytic;
    if (*analytic_flag && shard.mesh.empty() && !pp.auto_devices) {
        std::fprintf(stderr, "braid-inspect: error: --analytic goes with --auto-shard or "
                             "--auto-stages (see braid-inspect --help)\n");
        return EXIT_USAGE;
    }
    if (*json_flag && !*pipeline_opt && shard.mesh.empty()) {
        std::fprintf(stderr, "braid-inspect: error: --json goes with --pipeline-mlp or "
                             "--auto-shard (see braid-inspect --help)\n");
        return EXIT_USAGE;
    }
    if (!*model_opt && !*pipeline_opt) {
        std::fprintf(stderr, "braid-inspect: error: a model file or --pipeline-mlp is required "
                             "(see braid-inspect --help)\n");
        return EXIT_USAGE;
    }
    try {
        register_all_operators();
        if (*pipeline_opt) {
            print_pipeline_profiles(pp);
            return EXIT_OK;
        }
        if (onnx_import::is_onnx_path(path)) {
            if (ranks) {
                std::fprintf(stderr, "braid-inspect: --ranks reads braid model files; convert "
                                     "with braid-convert first\n");
                return EXIT_USAGE;
            }
            // An ONNX file: what it becomes in braid (inputs, outputs, operators, memory).
            auto model = embed::open_model(path, {})->impl().loaded;
            if (dot) {
                std::fprintf(stderr, "braid-inspect: --dot reads braid model files; convert "
                                     "with braid-convert first\n");
                return EXIT_USAGE;
            }
            print_imported(path, model);
            print_subgraphs(*model.graph);
            print_memory(model);
            return EXIT_OK;
        }
        if (*shard_opt) {
            shard.json = pp.json;
            LoadOptions opt;
            for (auto& [name, dims] : shapes) opt.input_shapes[name] = parse_shape(dims, name);
            print_auto_shard(embed::open_model(path, opt)->impl().loaded, shard);
            return EXIT_OK;
        }
        auto desc = describe_model(path);
        if (dot)
            print_dot(desc);
        else
            print_summary(path, desc);
        std::fflush(stdout);
        // Building the graph checks what the description cannot (operator types this build
        // has, shape rules, comp nodes, the memory budget): a model that fails is an error,
        // after what it holds was shown.
        auto model = embed::open_model(path, {})->impl().loaded;
        if (ranks) {
            print_rank_plan(path, ranks);
        } else if (!dot) {
            print_subgraphs(*model.graph);
            print_memory(model);
        }
        return EXIT_OK;
    } catch (const std::exception& e) {
        std::string msg = e.what();
        std::replace(msg.begin(), msg.end(), '\n', ' ');
        std::fprintf(stderr, "braid-inspect: error: %s\n", printable(msg).c_str());
        return EXIT_BAD_FILE;
    }
}
