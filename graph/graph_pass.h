// Compile-time graph passes: rewrites that compile() applies to the operators one executable
// runs, without changing the graph the user built (so gradients, other executables and
// serialization still see the original operators).
//
// A pass gets the scheduled operator order of one executable and may insert new operators into
// the graph (through their make()) and substitute them into that order: it removes the operators
// it replaces and records, for each var those operators produced that something still reads,
// the var of a new operator that now holds its value. Rules a pass keeps:
//  - a var it removes is read by no operator left in the order, is not an output of the
//    executable and is no extra dependency (CompilePassCtx::removable());
//  - a new operator takes the position of the last operator it replaces, so its inputs are all
//    computed earlier in the order;
//  - the result is equal to the original within the operator tests' tolerances.
// Passes are registered once per process (operators/ registers the fusion passes); compile()
// runs them when GraphOptions::enable_fusion is set and the environment variable BRAID_FUSION is
// not "0".
#pragma once

#include "graph/computing_graph.h"

#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace braid {

//! What a compile-time pass sees and edits.
class CompilePassCtx {
public:
    CompilePassCtx(ComputingGraph& graph, std::vector<OperatorNode*>& order,
                   const std::unordered_set<VarNode*>& pinned,
                   std::unordered_map<VarNode*, VarNode*>& replaced);

    ComputingGraph& graph() const { return m_graph; }
    //! The operators the executable runs, in order; a pass edits it in place.
    std::vector<OperatorNode*>& order() const { return m_order; }
    //! The var that holds `var`'s value for the operators of the order: `var`, or what an
    //! earlier replace() substituted for it (followed through later substitutions). An
    //! operator that a pass left in place still lists the vars it was built with.
    VarNode* current(VarNode* var) const;
    //! Number of operators in the order that read `var` (once per reading operator).
    size_t nr_readers(VarNode* var) const;
    //! Whether a pass may drop `var`: exactly `readers` operators of the order read it, and
    //! neither it nor a var it holds the value of (current()) is an output of the executable
    //! or an extra dependency.
    bool removable(VarNode* var, size_t readers = 1) const;
    //! The operator in the order that reads `var`, when exactly one does; else null.
    OperatorNode* single_reader(VarNode* var) const;
    //! Replaces the operators `old_oprs` by `new_opr`, placed where `old_oprs.back()` was: the
    //! last one must be the operator whose output 0 `new_opr`'s output now holds, which comes
    //! after the others in the order (the rest may be listed in any order).
    void replace(const std::vector<OperatorNode*>& old_oprs, OperatorNode* new_opr);
    //! The same with several new operators, placed in the given order where the last of
    //! `old_oprs` was; the last new operator's output 0 holds the value of
    //! `old_oprs.back()`'s output 0.
    void replace(const std::vector<OperatorNode*>& old_oprs,
                 const std::vector<OperatorNode*>& new_oprs);

private:
    void index_readers();

    ComputingGraph& m_graph;
    std::vector<OperatorNode*>& m_order;
    const std::unordered_set<VarNode*>& m_pinned;
    std::unordered_map<VarNode*, VarNode*>& m_replaced;
    std::unordered_map<VarNode*, std::vector<OperatorNode*>> m_readers;
};

//! A compile-time pass (see the file comment).
using CompilePass = void (*)(CompilePassCtx& ctx);

//! Adds `pass` to the passes compile() runs, in registration order. Not thread-safe: call it
//! from register_all_operators().
void register_compile_pass(const char* name, CompilePass pass);

//! Whether compile() fuses for graphs with `options`: GraphOptions::enable_fusion, unless the
//! environment variable BRAID_FUSION is "0" (which turns fusion off process-wide).
bool fusion_enabled(const GraphOptions& options);

/*!
 * Runs every registered pass over `order` (the scheduled operators of one executable);
 * `pinned` are the vars that must stay (outputs, extra dependencies). Returns the vars whose
 * value now lives in another var: old var -> new var, transitively resolved.
 */
std::unordered_map<VarNode*, VarNode*>
run_compile_passes(ComputingGraph& graph, std::vector<OperatorNode*>& order,
                   const std::unordered_set<VarNode*>& pinned);

} // namespace braid
