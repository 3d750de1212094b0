// A model for pipeline training to be built from widths alone: the MLP the pipeline tests,
// examples/pipeline_mlp and bench/bench_pipeline train, with layers of any sizes so that a
// model can be made unbalanced on purpose (for the partitioner).
#pragma once

#include "parallel/pipeline.h"

#include <cstdint>
#include <string>
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

//! max over the parameters of max_i |a_i - b_i| / max_i |b_i| (one scale per tensor).
double max_relative_difference(const PipelineModel& a, const PipelineModel& b);

} // namespace braid::parallel
