#include "serialization/sharded_model.h"

#include "comm/group_client.h"
#include "graph/input_node.h"
#include "operators/io.h"

#include "base/error.h"

#include <fmt/format.h>

#include <fstream>

namespace braid {

std::string sharded_io_name(const std::string& name, uint32_t rank) {
    return fmt::format("{}@{}", name, rank);
}

void dump_sharded(const parallel::AutoSharder& planner, const parallel::ShardPlan& plan,
                  std::vector<uint8_t>& buffer, DumpOptions options) {
    using namespace braid::parallel;
    const Mesh& mesh = plan.mesh;
    auto graph = ComputingGraph::make();
    // The collectives' group client is replaced by the loading rank's binding.
    auto client = std::make_shared<comm::InProcessGroupClient>();
    SymbolVarArray outputs;
    for (uint32_t rank = 0; rank < mesh.size(); ++rank) {
        CompNode cn = CompNode::load(fmt::format("cpu{}", rank));
        MeshGroups groups(mesh, rank, client, "local", "auto_shard");
        SpmdContext ctx(*graph, groups);
        SymbolVarArray args;
        for (auto& arg : plan.args)
            args.push_back(opr::Input::make(*graph, sharded_io_name(arg.name, rank), arg.dtype,
                                            arg.global_shape, cn));
        LowerOptions lower;
        lower.global_inputs = true;
        lower.comp_node = cn;
        SymbolVarArray outs = lower_plan(planner, plan, lower)(ctx, args);
        for (size_t i = 0; i < outs.size(); ++i) {
            std::string name = planner.outputs()[i].name();
            outputs.push_back(outs[i].rename(sharded_io_name(name, rank)));
        }
    }
    options.metadata.push_back({SHARDED_RANKS_KEY, std::to_string(mesh.size())});
    options.metadata.push_back({SHARDED_MESH_KEY, mesh.to_string()});
    dump(outputs, buffer, options);
}

void dump_sharded(const parallel::AutoSharder& planner, const parallel::ShardPlan& plan,
                  const std::string& path, DumpOptions options) {
    std::vector<uint8_t> bytes;
    dump_sharded(planner, plan, bytes, std::move(options));
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    f.close();
    if (!f)
        BRAID_THROW(SerializationError, "{}: cannot write the sharded model ({} bytes)", path,
                    bytes.size());
}

} // namespace braid
