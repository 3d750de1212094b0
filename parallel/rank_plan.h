// The static per-rank plan of a distributed computation: for every rank, what its memory plan
// needs and what its collectives move, read from compiled executables before anything runs.
//
// compile() infers every static shape and plans memory without executing an operator and
// without contacting the group manager (collectives join their groups at their first
// execution), so a plan can be made for N ranks of a job from N per-rank executables in one
// process, e.g. braid-inspect MODEL --ranks N loads the model once per rank. A single graph
// that holds every rank, each on a comp node of its own, is planned per comp node.
//
// The bytes a collective sends and receives come from its mode trait
// (opr::CollectiveModeTrait::traffic): the bandwidth-optimal algorithm's volume for the
// rank's static input and output shapes. A collective whose shape is known only at execution
// reports no bytes and says so. plan_ranks() also matches the collectives of the ranks by key
// and reports, as problems, keys whose peers disagree on the group size, the mode or the
// number of ranks that hold them: a job with such a key would wait at the group manager until
// its deadline.
#pragma once

#include "collective/collective_comm.h"
#include "graph/executable.h"

#include <string>
#include <vector>

namespace braid::parallel {

//! One CollectiveComm operator of a rank, as planned.
struct PlannedCollective {
    std::string name; //!< the operator's name
    std::string key;  //!< shared by the peers of the collective
    opr::CollectiveMode mode = opr::CollectiveMode::ALL_REDUCE_SUM;
    std::string backend;   //!< "local", "mpi", "nccl"
    std::string comp_node; //!< where it runs
    uint32_t group_size = 1;
    int32_t group_rank = comm::UNASSIGNED_RANK; //!< as the params say (unassigned: -1)
    bool is_root = false;
    DType dtype;
    bool has_input = true;
    bool shape_known = false; //!< input and output shapes static
    TensorShape input_shape;  //!< empty when the rank has no input
    TensorShape output_shape;
    size_t bytes_sent = 0;     //!< 0 when !shape_known
    size_t bytes_received = 0; //!< 0 when !shape_known
    //! The ranks of the plan that hold this key, ascending (filled by plan_ranks()).
    std::vector<uint32_t> group_ranks;
};

//! What one rank needs and moves per run, from its executable's static shapes and memory plan.
struct RankPlan {
    uint32_t rank = 0;
    size_t arena_bytes = 0;  //!< the memory plans' arenas, over every comp node of the rank
    size_t param_bytes = 0;  //!< parameters and constants held by the graph
    size_t input_bytes = 0;  //!< fed inputs at their static shapes
    size_t output_bytes = 0; //!< fetched outputs kept in their own allocations
    size_t dynamic_vars = 0; //!< vars allocated only at execution (not in the figures above)
    std::vector<PlannedCollective> collectives; //!< in execution order per comp node

    //! Total bytes the rank's collectives send / receive per run.
    size_t bytes_sent() const;
    size_t bytes_received() const;
};

//! The plans of every rank of a job, and the static mismatches between their collectives.
struct DistributedPlan {
    std::vector<RankPlan> ranks;
    //! One line per key whose peers disagree (empty when the collectives match up).
    std::vector<std::string> problems;

    //! A per-rank table (arena, parameters, collective totals), then every collective of
    //! every rank with its group and bytes, then the problems.
    std::string to_string() const;
};

/*!
 * The plan of one rank from its compiled executable (which has not run, or has: the figures
 * are those of its current memory plan). `exec` is only read; not thread-safe against a run of
 * it in flight.
 */
RankPlan plan_rank(const Executable& exec, uint32_t rank);

/*!
 * The plans of ranks 0 .. N-1 from their executables (execs[r] is rank r's), with every
 * collective's group_ranks filled in and the problems listed. Throws ValueError for an empty
 * list or a null executable.
 */
DistributedPlan plan_ranks(const std::vector<const Executable*>& execs);

/*!
 * The plans of one executable whose graph holds every rank, each rank on a comp node of its
 * own (N collectives of one key on N comp nodes): one rank per comp node, numbered in the
 * order of exec.sequences(), with group_ranks and problems as plan_ranks() gives them.
 */
DistributedPlan plan_comp_node_ranks(const Executable& exec);

} // namespace braid::parallel
