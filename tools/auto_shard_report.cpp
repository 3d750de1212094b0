#include "tools/auto_shard_report.h"

#include "parallel/auto_shard.h"
#include "parallel/rank_plan.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>

namespace braid::tools {

void print_auto_shard(const LoadedModel& model, const AutoShardRequest& request) {
    using namespace braid::parallel;
    Mesh mesh = parse_mesh(request.mesh);
    AutoShardOptions options;
    options.costs =
        request.analytic ? AutoShardOptions::Costs::ANALYTIC : AutoShardOptions::Costs::MEASURED;
    options.memory_limit = request.memory_limit;
    options.time_limit_s = request.time_limit_s;
    SymbolVarArray outputs;
    for (auto& o : model.outputs) outputs.push_back(o.var);
    AutoSharder planner(outputs, mesh, options);
    ShardPlan plan = planner.solve();

    // Data parallelism priced by the same model, where every input's first dim divides.
    std::optional<ShardPlan> dp;
    try {
        dp = planner.plan_where(data_parallel_placement(mesh));
    } catch (const ValueError&) {
    }

    // Every rank's static plan of the lowered plan: compiled, never run.
    std::vector<ShardingSpec> out_specs;
    for (auto& out : planner.outputs())
        out_specs.push_back(mesh_placement_spec(out.shape().ndim(),
                                                replicated_placement(mesh.ndim()), mesh.shape()));
    Pmap lowered(lower_plan(planner, plan), mesh, plan.args, out_specs);
    DistributedPlan ranks = lowered.plan();

    if (request.json) {
        auto j = nlohmann::ordered_json::parse(plan.to_json());
        if (dp) j["data_parallel_predicted_s"] = dp->predicted_s;
        auto rs = nlohmann::ordered_json::array();
        for (auto& r : ranks.ranks)
            rs.push_back({{"rank", r.rank},
                          {"arena_bytes", r.arena_bytes},
                          {"param_bytes", r.param_bytes},
                          {"bytes_sent", r.bytes_sent()},
                          {"bytes_received", r.bytes_received()},
                          {"collectives", r.collectives.size()}});
        j["ranks"] = rs;
        std::printf("%s\n", j.dump().c_str());
        return;
    }
    std::printf("%s", plan.to_string().c_str());
    if (dp)
        std::printf("data parallelism, same model: %.1f us (automatic plan: %.2fx)\n",
                    dp->predicted_s * 1e6, plan.predicted_s / dp->predicted_s);
    std::printf("operator costs: %s\n", request.analytic
                                            ? "estimated from flops and bytes (--analytic)"
                                            : "measured on one device");
    std::printf("\nthe lowered plan, per rank (static shapes and memory plans; nothing run):\n%s",
                ranks.to_string().c_str());
}

} // namespace braid::tools
