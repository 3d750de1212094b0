// braid-convert: writes a model file in braid's own format, e.g. from ONNX, so that services
// load it without importing it again.
//
//   braid-convert model.onnx -o model.braid [--input-shape x=-1,3,224,224] [--bind axes=0,2]
//   braid-convert model.braid --auto-shard dp=2,tp=2 -o sharded.braid [--memory-limit BYTES]
//       every rank's part of the automatic sharding plan (parallel/auto_shard.h) in one file
//       (serialization/sharded_model.h), run by braid-run --devices 4, mpirun or braid-launch
//
// Exit status: 0 success, 2 usage error, 3 a model that cannot be read or converted.
#include "braid.h"
#include "embed/embed_internal.h"
#include "parallel/auto_shard.h"
#include "serialization/sharded_model.h"
#include "tools/printable.h"
#include "tools/run_model.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

using namespace braid;
using braid::tools::printable;

int main(int argc, char** argv) {
    CLI::App app{"Converts a model (ONNX or braid) to braid's model format"};
    std::string in, out;
    std::vector<std::string> open_dims;
    app.add_option("model", in, "the model file (.onnx, or .braid)")->required();
    app.add_option("-o,--output", out, "the braid model file to write")->required();
    app.add_option("--input-shape", open_dims,
                   "NAME=D0,D1,... the shape recorded for an input, -1 for a dim fixed at run "
                   "time (default: the model's own, its symbolic dims as -1)");
    std::vector<std::string> binds;
    app.add_option("--bind", binds,
                   "NAME=V0,V1,... or NAME=FILE.npy: the value of an ONNX shape input, fixed in "
                   "the converted model (the input is then no longer one of its inputs)");
    std::string mesh;
    size_t memory_limit = 0;
    bool analytic = false;
    auto* shard_opt = app.add_option(
        "--auto-shard", mesh,
        "Plan the sharding of every operator on this mesh (2x2 or dp=2,tp=2) and write every "
        "rank's part into one file; --input-shape then gives the shapes planned for");
    app.add_option("--memory-limit", memory_limit,
                   "With --auto-shard: bytes each rank may hold (parameters and activations)")
        ->needs(shard_opt);
    app.add_flag("--analytic", analytic,
                 "With --auto-shard: estimate operator times from flops and bytes instead of "
                 "measuring them")
        ->needs(shard_opt);
    CLI11_PARSE(app, argc, argv);
    try {
        LoadOptions lopt;
        for (auto& spec : binds) {
            auto [name, value] = tools::parse_binding(spec);
            lopt.input_values[name] = value;
        }
        if (!mesh.empty()) {
            // The shapes to plan for: given ones, else the model's defaults.
            for (auto& spec : open_dims) {
                auto eq = spec.find('=');
                if (eq == std::string::npos)
                    throw tools::ToolError(tools::EXIT_USAGE,
                                           "--input-shape \"" + spec + "\": expected NAME=DIMS");
                lopt.input_shapes[spec.substr(0, eq)] =
                    tools::parse_shape(spec.substr(eq + 1), spec.substr(0, eq));
            }
            auto model = embed::open_model(in, lopt)->impl().loaded;
            SymbolVarArray outputs;
            for (auto& io : model.outputs) outputs.push_back(io.var.rename(io.name));
            parallel::AutoShardOptions options;
            options.memory_limit = memory_limit;
            options.costs = analytic ? parallel::AutoShardOptions::Costs::ANALYTIC
                                     : parallel::AutoShardOptions::Costs::MEASURED;
            parallel::AutoSharder planner(outputs, parallel::parse_mesh(mesh), options);
            parallel::ShardPlan plan = planner.solve();
            DumpOptions opt;
            opt.producer = "braid-convert";
            opt.metadata.push_back({"source", in.substr(in.rfind('/') + 1)});
            dump_sharded(planner, plan, out, opt);
            std::printf("%s: sharded over %s (%u ranks): predicted step %.1f us, memory <= %.2f "
                        "MiB per rank -> %s\n",
                        in.c_str(), plan.mesh.to_string().c_str(), plan.mesh.size(),
                        plan.predicted_s * 1e6, plan.memory_bytes / 1048576.0, out.c_str());
            return 0;
        }
        auto model = embed::open_model(in, lopt)->impl().loaded;
        DumpOptions opt;
        opt.producer = "braid-convert";
        opt.metadata.push_back({"source", in.substr(in.rfind('/') + 1)});
        for (auto& io : model.inputs) opt.input_shapes[io.name] = io.shape;
        for (auto& spec : open_dims) {
            auto eq = spec.find('=');
            if (eq == std::string::npos) {
                std::fprintf(stderr, "braid-convert: --input-shape \"%s\": expected NAME=D0,D1\n",
                             printable(spec).c_str());
                return 2;
            }
            std::vector<long> dims;
            std::string rest = spec.substr(eq + 1);
            for (size_t pos = 0; pos <= rest.size();) {
                size_t comma = std::min(rest.find(',', pos), rest.size());
                dims.push_back(std::stol(rest.substr(pos, comma - pos)));
                pos = comma + 1;
            }
            opt.input_shapes[spec.substr(0, eq)] = dims;
        }
        SymbolVarArray outputs;
        for (auto& io : model.outputs) outputs.push_back(io.var.rename(io.name));
        dump(outputs, out, opt);
        std::printf("%s: %zu inputs, %zu outputs, %zu operators -> %s\n", in.c_str(),
                    model.inputs.size(), model.outputs.size(), model.graph->operators().size(),
                    out.c_str());
        return 0;
    } catch (const tools::ToolError& e) {
        std::fprintf(stderr, "braid-convert: error: %s\n", printable(e.what()).c_str());
        return e.exit_code() == tools::EXIT_USAGE ? 2 : 3;
    } catch (const std::exception& e) {
        std::string msg = e.what();
        std::replace(msg.begin(), msg.end(), '\n', ' ');
        std::fprintf(stderr, "braid-convert: error: %s\n", printable(msg).c_str());
        return 3;
    }
}
