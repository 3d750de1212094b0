// A model for pipeline training to be built from widths alone: the MLP the pipeline tests,
// examples/pipeline_mlp and bench/bench_pipeline train, with layers of any sizes so that a
// model can be made unbalanced on purpose (for the partitioner).
#pragma once

#include "operators/optimizer.h"
#include "parallel/pipeline.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace braid::parallel {

/*!
 * Dense layers widths[0] -> widths[1] -> ... -> widths.back(): layer l is
 * act(x W_l + b_l) with act "tanh" or "relu" (the last layer without it unless
 * `activate_last`), W_l uniform in +-1/sqrt(fan-in) from `seed`, b_l small; the loss is the
 * mean over rows of the squared error summed over the row.
 */
PipelineModel pipeline_mlp_model(const std::vector<size_t>& widths, uint32_t seed,
                                 const std::string& activation = "tanh",
                                 bool activate_last = false);

//! Independent copies of the model's parameter tensors (a model to train elsewhere).
PipelineModel clone_model(const PipelineModel& model);

//! `steps` batches of x {batch, input_width} and labels {batch, label_width}, every value drawn
//! from N(0, 1) with `seed`.
std::vector<std::pair<Tensor, Tensor>> random_batches(const PipelineModel& model, size_t steps,
                                                      size_t batch, uint32_t seed);

//! Trains `model` on one device, one optimizer step per batch on the whole batch (the reference
//! a pipeline must equal); returns the loss of every step.
std::vector<double> train_on_one_device(const PipelineModel& model,
                                        const std::vector<std::pair<Tensor, Tensor>>& batches,
                                        const opr::OptimizerConfig& optimizer);

//! max over the parameters of max_i |a_i - b_i| / max_i |b_i| (one scale per tensor).
double max_relative_difference(const PipelineModel& a, const PipelineModel& b);

} // namespace braid::parallel
