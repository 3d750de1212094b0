// Automatic intra-operator sharding (Alpa's ILP pass, OSDI '22): for a graph and a device
// mesh, one sharding strategy per operator, chosen to minimise the predicted step time, then
// lowered into per-rank graphs through the SPMD machinery (parallel/pmap.h).
//
// Strategies: every operator's candidate splits of its iteration dims over the mesh axes
// (parallel/shard_strategies.h).
//
// Costs (seconds per step on one rank, ranks being symmetric):
//  - compute: the operator's time on one device divided by the number of ranks its strategy
//    splits it over; measured per operator on one device (Costs::MEASURED) or estimated from
//    its flops and bytes (Costs::ANALYTIC, repeatable: tests);
//  - resharding on every edge whose producer's placement differs from what its consumer's
//    strategy reads: the steps of reshard_steps() priced by CommModel (latency + bytes moved /
//    bandwidth, with the bandwidth-optimal volume of each collective);
//  - graph outputs are resharded to Replicate.
// Memory per rank: every parameter's and activation's local bytes plus what resharding makes,
// an upper bound of the static plan's arena and parameters (the planner reuses memory).
//
// Operators that only follow their producer (a unary elementwise operator, a reshape, a bias
// add of a parameter) can be merged into it before solving (Alpa merges such "follow" nodes):
// the follower takes the strategy cheapest for each strategy of its producer, which cuts a
// transformer block's ILP nodes by more than half and makes the result optimal over the merged
// space only. By default they are merged in graphs of more than 200 operators.
#pragma once

#include "parallel/mesh.h"
#include "parallel/pmap.h"
#include "parallel/reshard.h"
#include "parallel/shard_ilp.h"
#include "parallel/shard_strategies.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace braid::parallel {

//! The time of moving data between ranks: latency + bytes / bandwidth per collective.
struct CommModel {
    double latency_s = 20e-6; //!< per collective call
    double bytes_per_s = 5e9; //!< per rank link
    //! Seconds of one resharding step on a mesh of `mesh_shape`, for elements of `elem_bytes`.
    double seconds(const ReshardStep& step, const std::vector<uint32_t>& mesh_shape,
                   size_t elem_bytes) const;
    //! Bytes one rank sends in the step.
    static size_t bytes_sent(const ReshardStep& step, const std::vector<uint32_t>& mesh_shape,
                             size_t elem_bytes);
};

//! How to plan.
struct AutoShardOptions {
    enum class Costs : uint8_t { ANALYTIC, MEASURED };
    Costs costs = Costs::ANALYTIC;
    int measure_repeats = 5;          //!< runs per operator time (median) with Costs::MEASURED
    double flops_per_s = 5e10;        //!< Costs::ANALYTIC: arithmetic rate of one rank
    double memory_bytes_per_s = 1e10; //!< Costs::ANALYTIC: memory bandwidth of one rank
    CommModel comm;
    size_t memory_limit = 0;             //!< bytes per rank (0: none)
    double time_limit_s = 30;            //!< the ILP's
    size_t runner_ups = 2;               //!< next-best plans to report
    std::optional<bool> merge_followers; //!< unset: merge in graphs of over 200 operators
};

//! A plan: one strategy per operator, its predicted costs and how it was found.
struct ShardPlan {
    struct Choice {
        OperatorNode* opr = nullptr; //!< of the analysed graph (owned by the planner)
        OperatorStrategy strategy;
    };
    Mesh mesh{{1}, {"x"}};
    std::vector<Choice> operators; //!< in execution order
    double predicted_s = 0;        //!< compute + communication per step
    double compute_s = 0, comm_s = 0;
    double memory_bytes = 0; //!< per rank (upper bound, see the file comment)
    size_t comm_bytes = 0;   //!< sent per rank per step
    bool solved = false;     //!< found by the ILP (not given by plan_where)
    bool optimal = false;    //!< proven by the ILP
    double solve_s = 0;
    size_t ilp_nodes = 0, ilp_edges = 0;
    struct RunnerUp {
        double predicted_s = 0, memory_bytes = 0;
    };
    std::vector<RunnerUp> runner_ups;

    //! The graph's inputs with the specs the plan chose (for Pmap and build_spmd_rank).
    std::vector<PmapArg> args;
    //! Operator, strategy and output placement per line, then the totals.
    std::string to_string() const;
    //! The same as one JSON object.
    std::string to_json() const;
};

//! The placement of each operator's output under pure data parallelism over every axis of
//! `mesh` (of size above 1): dim 0 split, parameters and constants replicated. For
//! AutoSharder::plan_where(), to compare a plan with data parallelism.
std::function<MeshPlacement(const OperatorNode&)> data_parallel_placement(const Mesh& mesh);

/*!
 * Plans the sharding of the graph that computes `outputs` over `mesh`. The graph is copied into
 * one of the planner's own (fusion off, so each operator is seen as built); its Inputs need
 * static shapes. Not thread-safe; keeps the copied graph alive, parameters shared.
 */
class AutoSharder {
public:
    AutoSharder(const SymbolVarArray& outputs, Mesh mesh, AutoShardOptions options = {});
    ~AutoSharder();

    //! The operators of the analysed graph, in execution order, with their candidates.
    size_t nr_operators() const;
    OperatorNode& operator_at(size_t i) const;
    const std::vector<OperatorStrategy>& candidates(size_t i) const;

    //! The ILP (one node per merged group of operators).
    const ShardProblem& problem() const;
    //! Solves it (see AutoShardOptions) and returns the best plan with its runner-ups.
    ShardPlan solve() const;
    /*!
     * The plan of a given choice: per operator, its strategy whose first output has the
     * placement `want(opr)` returns (the cheapest such one); throws ValueError naming the
     * operator when it has none. For hand-written plans (data parallel, Megatron) priced by the
     * same model.
     */
    ShardPlan plan_where(const std::function<MeshPlacement(const OperatorNode&)>& want) const;
    /*!
     * The plan propagated from annotations, as GSPMD propagates a user's sharding annotations:
     * an operator for which `annotate` gives a placement takes its cheapest strategy with that
     * output placement; every other operator, in execution order, the strategy cheapest given
     * its producers' choices (its compute and the resharding of its inputs). Throws ValueError
     * naming an annotated operator without such a strategy.
     */
    ShardPlan plan_propagated(
        const std::function<std::optional<MeshPlacement>(const OperatorNode&)>& annotate) const;

    //! The analysed graph's outputs.
    const SymbolVarArray& outputs() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

//! How lower_plan() builds a rank.
struct LowerOptions {
    //! The function's arguments are the whole inputs (every rank fed the same values), sliced
    //! by each rank as the plan places them; otherwise they are the rank's pieces (as Pmap and
    //! build_spmd_rank make them from ShardPlan::args).
    bool global_inputs = false;
    //! Comp node of the parameters and constants the lowering creates; invalid: the graph's
    //! default.
    CompNode comp_node;
};

/*!
 * The per-rank computation of a plan: builds one rank's graph from the analysed graph, each
 * operator on its local pieces, with the plan's reshardings as collectives; returns the graph's
 * outputs, replicated. The planner and the plan must outlive the function.
 */
SpmdFunction lower_plan(const AutoSharder& planner, const ShardPlan& plan,
                        LowerOptions options = {});

} // namespace braid::parallel
