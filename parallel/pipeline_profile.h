// Stage profiles in Alpa's terms (alpa/pipeline_parallel/stage_profiling.py, StageProfileResult)
// and the automatic stage partition (Alpa's inter-operator dynamic program).
//
// A stage's step is one graph (parallel/pipeline.h); its modules are cut out of it:
//  - forward:    the FORWARD ops of one micro-batch (the last one);
//  - backward:   that micro-batch's BACKWARD ops, the gradient accumulation included;
//  - apply_grad: what runs once per step after the last backward (the mean and the updates).
// Sends and recvs belong to no module: what a recv delivers is a module input, what a send
// reads a module output. For each module, from the static memory plan before anything runs:
//  - input bytes:  vars its ops read that other ops wrote (parameters, the received input,
//                  the forward's activations for the backward, the accumulators);
//  - output bytes: vars its ops wrote that later ops read (activations kept for the backward,
//                  the sent output, the accumulated gradients);
//  - donated:      inputs whose arena block an output took over in place (the accumulators);
//  - temp_buffer_size: the largest total size of its arena vars that live inside it only,
//                  at one of its steps;
//  - peak_memory:  inputs + outputs + temp - donated (Alpa's identity:
//                  temp = peak - inputs - outputs + donated).
// compute_cost is measured: the summed kernel time of the module's ops, the mean over runs.
#pragma once

#include "parallel/pipeline.h"

#include <string>
#include <vector>

namespace braid::parallel {

//! One module of a stage.
struct ModuleProfile {
    std::string name;        //!< "stage_0_forward", "stage_0_backward", "stage_0_apply_grad"
    double compute_cost = 0; //!< seconds, measured (0 until measure_compute_cost())
    size_t peak_memory = 0;  //!< bytes
    size_t temp_buffer_size = 0;
    size_t input_bytes = 0, output_bytes = 0, donated_bytes = 0;
    size_t nr_inputs = 0, nr_outputs = 0, nr_donated = 0;
    std::vector<size_t> op_indices; //!< the graph operators of the module
};

//! One stage: its modules and totals.
struct StageProfile {
    uint32_t stage = 0;
    size_t first_layer = 0, end_layer = 0;
    uint32_t microbatches = 0;
    std::string schedule;
    size_t initial_var_size = 0; //!< bytes of the stage's parameters
    size_t available_memory = 0; //!< the memory budget (GraphOptions, BRAID_MEMORY_BUDGET)
    size_t step_arena_bytes = 0; //!< the whole step's arena (all micro-batches)
    std::vector<ModuleProfile> modules;
};

//! The static part of stage `stage`'s profile (compute_cost 0).
StageProfile profile_stage(const PipelineStage& stage, const std::string& schedule = "");
//! Runs `steps` steps on x/labels and fills every module's compute_cost (seconds, mean per
//! step) of `profiles` (one per stage of the trainer).
void measure_compute_cost(PipelineTrainer& trainer, const Tensor& x, const Tensor& labels,
                          int steps, std::vector<StageProfile>& profiles);
//! A fixed-width table, one row per module.
std::string stage_profile_table(const std::vector<StageProfile>& profiles);
//! {"stages":[{"stage":0,...,"modules":[{"name":...,"compute_cost":...}]}]} on one line.
std::string stage_profiles_json(const std::vector<StageProfile>& profiles);

//! One layer's cost for the partitioner.
struct LayerProfile {
    double compute_cost = 0; //!< seconds per micro-batch, forward + backward
    size_t memory = 0;       //!< bytes a stage holding it needs (see profile_layers)
};

/*!
 * Profiles every layer of `model` alone on one device for micro-batches of `rows` rows:
 * compute_cost is the measured forward + backward kernel time (median of `repeats` runs);
 * memory is its parameters, their gradient accumulator and optimizer state (3x the parameter
 * bytes for SGD with momentum) plus the activation bytes one micro-batch keeps for the backward
 * (from the static memory plan), times `in_flight` micro-batches.
 */
std::vector<LayerProfile> profile_layers(const PipelineModel& model, size_t rows, int repeats,
                                         uint32_t in_flight);

//! A partition chosen by auto_partition().
struct StagePartition {
    std::vector<size_t> stage_begin;
    std::vector<double> stage_cost; //!< Σ of its layers' compute_cost
    double objective = 0;           //!< Σ t_i + (B - 1) max t_j
};

/*!
 * Alpa's dynamic program: split the layers into `nr_stages` contiguous stages minimising
 * Σ t_i + (B - 1) · max t_j, with every stage's memory (Σ of its layers' memory) at most
 * `memory_limit` (0: no limit). For each candidate t_max (every stage cost), a DP finds the
 * least Σ t_i using stages no costlier than t_max. Throws ValueError when no partition fits.
 */
StagePartition auto_partition(const std::vector<LayerProfile>& layers, uint32_t nr_stages,
                              uint32_t microbatches, size_t memory_limit = 0);
//! The objective of a given partition.
double partition_objective(const std::vector<LayerProfile>& layers,
                           const std::vector<size_t>& stage_begin, uint32_t microbatches);

} // namespace braid::parallel
