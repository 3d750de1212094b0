// MemoryPlan: the graph side of static memory planning. It turns a compiled executable's
// per-comp-node step sequences into planner blocks, decides forwarding, lays every var's
// tensor out in one arena per comp node, and reports the result.
//
// Which vars go where:
//  - arena: PLANNED outputs with a static shape. A var lives from the step that writes it to
//    the last step that reads it, on its comp node, counting readers of its read-only views;
//  - no memory of their own: READONLY_FORWARD outputs (reshape views). Their readers extend
//    the lifetime of the var at the root of the view chain;
//  - in place: an output whose operator names it in inplace_input() takes over the input's
//    arena block when that operator is the block's last reader (views of it included), the
//    input's block lives on the same comp node and is read by no other comp node, input,
//    block and output have the same byte size, the dtypes agree, and the input is the
//    block's var itself or a layout-keeping view of it (forward_keeps_layout());
//  - workspaces: an operator's scratch memory (OperatorNode::workspace_bytes(), asked for when
//    its input shapes are static) is a block of the arena alive during its step alone;
//  - outside the arena: BOUND outputs (fed inputs, parameters, constants), outputs the user
//    fetches and the vars they view (own allocation, valid after execute()), and
//    dynamic-shape vars (allocated at execution; their tensor is released after their last
//    reading step when every reader is on one comp node).
//
// Cross-comp-node reads: a var of comp node P read on another comp node Q stays alive to the
// end of P's sequence, so P never waits for Q to reuse memory. (A wait for Q's reader would
// be a dependency the graph does not have; collectives make peers on different comp nodes
// wait for each other, and such a wait can then deadlock.) The next run starts only after
// every comp node finished, so the bytes are free again by then.
//
// With GraphOptions::enable_memory_plan off every static PLANNED var gets its own
// allocation and no hooks are produced (the behaviour before planning). Not thread-safe.
#pragma once

#include "graph/computing_graph.h"
#include "memory/memory_budget.h"
#include "memory/planner.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace braid {

//! What memory planning did, per comp node.
struct MemoryReport {
    //! One arena var: its bytes, offset and lifetime in the comp node's steps.
    struct VarPlacement {
        std::string name;
        size_t bytes = 0;          //!< aligned size
        size_t offset = 0;         //!< byte offset in the arena
        size_t lifetime_begin = 0; //!< step that writes it
        size_t lifetime_end = 0;   //!< one past the last step it must stay intact
        bool in_place = false;     //!< took over the memory of one of its operator's inputs
        long inplace_of = -1;      //!< index of the placement it took over, or -1
        bool workspace = false;    //!< an operator's scratch memory ("workspace of <opr>")
    };
    //! One comp node's plan.
    struct Node {
        std::string comp_node;
        std::string planner;             //!< algorithm name
        size_t alignment = 0;            //!< offset alignment in bytes
        size_t nr_steps = 0;             //!< operators in the comp node's sequence
        size_t arena_bytes = 0;          //!< bytes the plan needs
        size_t arena_capacity_bytes = 0; //!< bytes of the arena held (>= arena_bytes on re-plans)
        size_t lower_bound_bytes = 0;    //!< largest total size alive at one step
        size_t no_reuse_bytes = 0;  //!< sum of the planned vars' sizes: the arena without reuse
        size_t nr_planned_vars = 0; //!< vars placed in the arena (in-place ones included)
        size_t nr_workspaces = 0;   //!< operators' scratch blocks placed in the arena
        size_t workspace_bytes = 0; //!< their sizes summed
        size_t nr_readonly_forwarded = 0;  //!< views sharing a planned var's memory
        size_t nr_inplace_forwarded = 0;   //!< outputs written over their input's memory
        size_t nr_own_allocation_vars = 0; //!< fetched outputs (and what they view) kept apart
        size_t own_allocation_bytes = 0;
        size_t nr_dynamic_vars = 0;     //!< allocated at execution
        size_t nr_dynamic_released = 0; //!< of those, released after their last read
        size_t nr_cross_node_reads = 0; //!< vars kept to the end as another comp node reads them
        double plan_ms = 0;             //!< time spent planning this comp node
        //! Every arena var in step order, then the workspaces in step order.
        std::vector<VarPlacement> placements;

        //! Read-only plus in-place forwarded vars.
        size_t nr_forwarded() const { return nr_readonly_forwarded + nr_inplace_forwarded; }
        //! The `n` largest placements, largest first.
        std::vector<VarPlacement> largest_vars(size_t n) const;
    };

    bool enabled = false; //!< false: planning was off, every var has its own allocation
    std::vector<Node> nodes;
    double total_plan_ms = 0;     //!< the whole plan (wall clock): analysis, nodes, tensors
    double total_plan_cpu_ms = 0; //!< the same in CPU time of the planning thread

    //! A few lines per comp node: the totals and the largest vars with their lifetimes.
    std::string to_string(size_t nr_largest = 8) const;
};

//! Plans and applies the memory of one executable. Not thread-safe.
class MemoryPlan {
public:
    //! Extra work the executable does around one step of a sequence.
    struct StepHooks {
        //! (node index, steps that node must have finished) before the step may start.
        std::vector<std::pair<size_t, uint32_t>> waits;
        //! Var indices whose tensors are released once the step finished.
        std::vector<size_t> release_after;
        //! A step on another comp node waits for this one.
        bool notify = false;
        //! The step's workspace: bytes of the arena (empty: none planned).
        Tensor workspace;
    };
    //! One comp node's compiled sequence.
    using Sequence = std::pair<CompNode, std::vector<OperatorNode*>>;

    //! Takes the planning options of `options`; an unknown planner name throws ValueError.
    explicit MemoryPlan(const GraphOptions& options);

    /*!
     * Plans (or, with planning off, allocates) every var of an executable and assigns
     * `tensors[i]` for each static PLANNED var `vars[i]`; dynamic PLANNED tensors are
     * cleared. `var_index` maps each var to its index; `sequences` are the executable's
     * operators per comp node; `fetched` lists the indices of vars read after execute().
     * Arenas of a previous call are reused when large enough.
     */
    void plan(const std::vector<VarNode*>& vars,
              const std::unordered_map<VarNode*, size_t>& var_index,
              const std::vector<Sequence>& sequences, const std::vector<size_t>& fetched,
              std::vector<Tensor>& tensors);

    //! Hooks of step `step` of sequence `node` from the last plan().
    const StepHooks& hooks(size_t node, size_t step) const { return m_hooks[node][step]; }
    const MemoryReport& report() const { return m_report; }

    //! The offset alignment used on `cn`: its allocator's, at least 64 on CPU, 256 on CUDA.
    static size_t alignment_for(CompNode cn);

private:
    struct Analysis;
    void plan_node(Analysis& a, size_t node, std::vector<Tensor>& tensors);
    void allocate_without_plan(Analysis& a, std::vector<Tensor>& tensors);

    //! Adds `bytes` (named by `what`) to what this plan allocates; throws MemoryBudgetError,
    //! naming the largest var, when that passes the budget.
    void charge_budget(size_t bytes, const std::string& what);

    bool m_enabled;
    std::string m_planner;
    MemoryBudget m_budget;
    size_t m_budget_used = 0;
    std::string m_largest_var;          //!< "name" of Opr "x": {shape} dtype, N bytes; for errors
    std::vector<Storage> m_arenas;      //!< per comp node, kept across plans
    std::vector<bool> m_own_allocation; //!< tensors[i] owns its storage (may be kept)
    std::vector<std::vector<StepHooks>> m_hooks;
    MemoryReport m_report;
};

} // namespace braid
