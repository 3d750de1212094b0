// The candidate sharding strategies of one operator on a mesh, for the automatic sharding
// planner (parallel/auto_shard.h).
//
// Every operator is seen as a loop nest over iteration dims (an einsum): MatMul a[m,k] b[k,n]
// -> c[m,n] iterates m, n, k; an elementwise operator its output dims; Reduce its input dims,
// the reduced ones summed; Attention batch, heads and the sequence dims; a reshape maps the
// major dim of each merged or split group to its counterpart; Conv2d its batch, output and
// input channels; Embedding the ids' dims and the row width. A strategy picks, per mesh axis,
// one iteration dim to split over that axis, or none. It fixes the placement of every input and
// output: a tensor dim iterated by the split dim is Shard(dim) over that axis, a tensor without
// it is Replicate, and an output of a split reduction dim is Partial (sum, max or min). Dims
// that cannot be split (softmax's axis, a layer norm's normalized dims, attention's sequence
// dims, convolution's spatial dims) are never chosen. An operator of any other type keeps one
// strategy: everything replicated. A RemoteRecv (a pipeline stage's transfer from its
// neighbour) is received by the mesh's first rank only: its output is Partial(sum), zeros on
// the other ranks; a RemoteSend reads its input replicated and sends from the first rank.
#pragma once

#include "parallel/mesh.h"
#include "parallel/reshard.h"

#include <string>
#include <vector>

namespace braid::parallel {

//! One candidate strategy of one operator.
struct OperatorStrategy {
    std::string name;       //!< "m@x n@y", "replicated"
    std::vector<int> split; //!< per mesh axis: the iteration dim split over it, or -1
    std::vector<MeshPlacement> inputs, outputs;
    double compute_s = 0;
};

/*!
 * Every strategy of `opr` on `mesh` whose sharded dims divide by their axes' sizes (the
 * replicated one first), each costing `full_time_s` divided by the ranks it splits over. The
 * shapes of the operator's inputs and outputs must be static; otherwise only the replicated
 * strategy is given.
 */
std::vector<OperatorStrategy> enumerate_strategies(const OperatorNode& opr, const Mesh& mesh,
                                                   double full_time_s);

//! The operator's floating-point operations as its loop nest counts them (0 when unknown).
double operator_flops(const OperatorNode& opr);

//! Input, SharedParam or ImmutableTensor.
bool is_source_operator(const OperatorNode& opr);
//! An operator whose outputs are known at build time (GetVarShape, arithmetic on constants):
//! planned and lowered as a constant of its global value, whatever its inputs' placements.
bool is_constant_operator(const OperatorNode& opr);
//! Inputs whose placement the operator does not care about: a ParamUpdate's inputs after the
//! parameter and its gradient only order it; a constant operator reads only shapes.
bool ignores_input_placement(const OperatorNode& opr, size_t k);
//! Inputs that must be their producer's var itself: a ParamUpdate updates its SharedParam in
//! place, so the parameter's placement is the update's.
bool forbids_input_reshard(const OperatorNode& opr, size_t k);
//! Operators that may join their producer's group when merging (elementwise operators,
//! conversions, dimshuffles and reshapes).
bool follows_its_input(const OperatorNode& opr);

} // namespace braid::parallel
