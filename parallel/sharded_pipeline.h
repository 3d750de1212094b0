// Pipeline training whose stages each run on several ranks: the lowering of Alpa's
// inter-operator plan (parallel/stage_sharding.h), stage boundaries and a 1-d submesh per stage,
// with each stage's operators sharded by the intra-operator ILP (parallel/auto_shard.h).
//
// Stage i is first built as on one device (build_pipeline_stage(): its micro-batches in the
// schedule's order, the activation and gradient transfers with its neighbours, the gradient
// accumulators and the update). A stage of one rank runs that graph. A stage of m ranks has
// that graph planned on a mesh of m ranks and lowered into m graphs (lower_plan()), in the same
// order, so the schedule holds on every rank. Only a stage's first rank transfers: what it
// receives is Partial(sum) on the stage's mesh (zeros on the other ranks), so the ILP prices the
// all-reduce that spreads it, and what it sends is resharded to Replicate first. The ranks of
// the whole pipeline are numbered stage by stage (stage i's ranks follow stage i - 1's); rank r
// runs on comp node "cpu<r>"; every stage's collectives have keys of their own.
//
// The model's parameter tensors are updated after every step: a stage of one rank updates them
// in place, a stage of several ranks trains per-rank pieces and copies the whole updated values
// back (from its first rank) when the step ends.
//
// Thread safety: built and driven from one thread; step() runs every rank on a thread of its own.
#pragma once

#include "parallel/auto_shard.h"
#include "parallel/pipeline.h"

#include <memory>
#include <string>
#include <vector>

namespace braid::parallel {

//! How to train a model on a pipeline of sharded stages.
struct ShardedPipelineOptions {
    //! Stages, micro-batches, schedule, optimizer, batch and key as for PipelineTrainer; backend
    //! "local" (ranks are threads of this process); `comp_node` and `rank` are set by the
    //! trainer; a null `client`: an in-process group manager.
    PipelineOptions pipeline;
    //! Ranks of each stage (one per stage of pipeline.stage_begin); empty: one each.
    std::vector<uint32_t> stage_devices;
    //! How stages of several ranks are planned. Their graphs hold transfers, so they cannot run
    //! alone to be measured: costs are analytic.
    AutoShardOptions sharding;
};

class ShardedPipelineTrainer {
public:
    /*!
     * Builds every stage (stage by stage: a stage's activation recvs learn their shapes from
     * the stage before). Throws ValueError for stage_devices that do not match the stages or
     * hold a zero, and what build_pipeline_stage() and the planner throw.
     */
    ShardedPipelineTrainer(const PipelineModel& model, ShardedPipelineOptions options);
    ~ShardedPipelineTrainer();

    //! One step on the batch x {batch, input_width}, labels {batch, label_width}: every rank
    //! on a thread of its own; returns the mean loss. When ranks fail, throws Error naming each
    //! failed stage and rank with its error (the others end at their deadline at the latest).
    double step(const Tensor& x, const Tensor& labels);

    uint32_t nr_stages() const;
    uint32_t nr_ranks() const;
    //! Stage i's ranks and its plan (nullptr for a stage of one rank).
    uint32_t stage_devices(uint32_t stage) const;
    const ShardPlan* stage_plan(uint32_t stage) const;
    //! A line per stage: its layers and ranks, and for a sharded stage how many operators its
    //! plan splits and the predicted time (stage_plan() has the plan itself).
    std::string to_string() const;

private:
    struct Stage;
    ShardedPipelineOptions m_options;
    std::vector<std::unique_ptr<Stage>> m_stages;
};

} // namespace braid::parallel
