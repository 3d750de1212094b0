// braid-inspect --auto-shard: a model's automatic sharding plan on a mesh, with the runner-up
// plans, data parallelism's prediction for comparison, and every rank's static plan (memory
// plan and collectives) of the lowered plan, compiled and never run.
#pragma once

#include "graph/loaded_model.h"

#include <string>

namespace braid::tools {

//! What to plan and how to print it.
struct AutoShardRequest {
    std::string mesh;         //!< "2x2" or "dp=2,tp=2" (parallel::parse_mesh)
    size_t memory_limit = 0;  //!< bytes per rank; 0: none
    double time_limit_s = 30; //!< the ILP's
    bool analytic = false;    //!< estimate operator times instead of measuring them
    bool json = false;
};

//! Plans `model`'s graph on the request's mesh and prints the plan (a table, or one JSON line).
void print_auto_shard(const LoadedModel& model, const AutoShardRequest& request);

} // namespace braid::tools
