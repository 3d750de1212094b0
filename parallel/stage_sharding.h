// Alpa's inter-operator pass with submeshes: split a sequential model's layers into pipeline
// stages and give each stage a number of devices, each stage's time being what the
// intra-operator ILP (parallel/auto_shard.h) predicts for its layers on its devices.
//
// For every candidate t_max (each stage option's time), a DP over (first layer, devices left)
// finds the least Σ t_i of stages that cover the layers in order, use every device, and each
// take at most t_max; the answer minimises Σ t_i + (B − 1) · t_max over the candidates (B
// micro-batches; auto_partition()'s objective, with the stage times now depending on the
// devices too). Stages whose layers fit no plan within the memory limit are never chosen.
#pragma once

#include "parallel/auto_shard.h"
#include "parallel/pipeline.h"

#include <functional>
#include <optional>
#include <vector>

namespace braid::parallel {

//! Stages, their devices and predicted times.
struct SubmeshPartition {
    std::vector<size_t> stage_begin;     //!< first layer of each stage
    std::vector<uint32_t> stage_devices; //!< ranks of each stage's (1-d) submesh
    std::vector<double> stage_cost;      //!< seconds per micro-batch
    double objective = 0;                //!< Σ t_i + (B − 1) max t_i
};

//! Seconds per micro-batch of layers [begin, end) on `devices` ranks; nullopt: no plan fits.
using StageCostFn =
    std::function<std::optional<double>(size_t begin, size_t end, uint32_t devices)>;

/*!
 * The DP of the file comment over `nr_layers` layers and `nr_devices` devices. `cost` is called
 * once per (range, devices). Throws ValueError when no partition exists (no stage option fits).
 */
SubmeshPartition auto_partition_submeshes(size_t nr_layers, uint32_t nr_devices,
                                          uint32_t microbatches, const StageCostFn& cost);

/*!
 * The ILP's predicted time of one micro-batch of `rows` rows through layers [begin, end) of
 * `model`, forward and backward (the gradients of the layers' parameters and of their input), on
 * a 1-d mesh of `devices` ranks, plus its transfers priced by options.comm: the activation it
 * receives and the gradient it sends back, the activation it sends and the gradient it
 * receives, and on several ranks an all-reduce of each received tensor; nullopt when no plan
 * fits `options.memory_limit`.
 */
std::optional<double> sharded_stage_cost(const PipelineModel& model, size_t begin, size_t end,
                                         uint32_t devices, size_t rows,
                                         const AutoShardOptions& options);

} // namespace braid::parallel
