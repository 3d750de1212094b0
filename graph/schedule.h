// The order in which a compiled graph runs its operators.
//
// Every comp node runs its operators in one global order, so a step only ever waits for
// steps earlier in that order. Operators that complete only together with peers (see
// OperatorNode::peer_group(): collectives whose ranks live in one graph) occupy a single
// position of the order: each comp node reaches its member of the group before anything that
// reads another member's result. Without that, comp node A could wait for peer B's
// collective output before starting its own member of the collective, while B waits for A.
#pragma once

#include <vector>

namespace braid {

class ComputingGraph;
class OperatorNode;

/*!
 * Orders `oprs` (every operator to run, in insertion order; their dependencies among
 * themselves via inputs and extra dependencies) topologically, keeping insertion order
 * wherever the peer groups and extra dependencies on later operators allow. Throws GraphError
 * naming the group when the members of a peer group depend on one another, or when groups depend on
 * each other in a cycle (ranks that would wait for each other forever).
 */
std::vector<OperatorNode*> schedule_operators(const ComputingGraph& graph,
                                              const std::vector<OperatorNode*>& oprs);

} // namespace braid
