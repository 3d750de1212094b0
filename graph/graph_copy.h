// Copying a part of a graph into another graph: the operators that compute some vars are
// rebuilt in the target graph, each from its params through its descriptor's dump and load
// functions (graph/operator_registry.h), as a model file would rebuild them, but in memory
// (tensors are shared, not copied: a SharedParam's copy reads and updates the same values, as
// the gradient of a branch that reads a parameter must). Inputs of the source are replaced by given
// vars of the target, or copied as Inputs of the target. Subgraphs (an If's branches, a Loop's
// body) are copied with their operator. The copy is a graph of its own: its shapes are inferred
// there, so it may be fed other shapes than the source.
//
// Used where an operator needs its own instance of a subgraph, such as the gradient of an If.
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

#include <map>

namespace braid {

/*!
 * Rebuilds in `target` the operators that compute `outputs` (vars of one source graph) and
 * returns the copies of `outputs`. An Input var of the source found in `replace` becomes the
 * var it maps to (a var of `target` of the same dtype); any other Input is copied. Throws
 * GraphError naming an operator whose type cannot be dumped or loaded.
 */
//! With `keep_comp_nodes` false, the copies take the comp node of their first input (or the
//! target's default), as operators built without one do.
SymbolVarArray copy_graph(const SymbolVarArray& outputs, ComputingGraph& target,
                          const std::map<VarNode*, SymbolVar>& replace = {},
                          bool keep_comp_nodes = true);

/*!
 * Rebuilds one operator in `target` on the given inputs (vars of `target`, one per input of
 * `opr`, in order) and returns its outputs. The copy infers its own shapes, so the inputs may
 * have other shapes than the source's (an operator whose params hold sizes keeps them). The
 * copy takes the comp node of its first input, or the target's default. Throws GraphError as
 * copy_graph() does, and for a wrong number of inputs.
 */
SymbolVarArray copy_operator(OperatorNode& opr, ComputingGraph& target,
                             const SymbolVarArray& inputs);

} // namespace braid
