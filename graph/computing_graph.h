// ComputingGraph: owns operators and vars, deduplicates on insertion, infers shapes and
// values statically, and compiles outputs into an Executable.
#pragma once

#include "base/determinism.h"
#include "graph/operator_node.h"

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace braid {

class Executable;
class SymbolVar;

//! Graph-wide options.
struct GraphOptions {
    //! Comp node of operators that have no input and no explicit comp node.
    std::string default_comp_node = "cpu0";
    //! Plan vars into one arena per comp node; off: every var gets its own allocation.
    bool enable_memory_plan = true;
    //! Memory planner algorithm (MemPlanner::algorithms()); empty: the default, best_fit.
    std::string memory_planner;
    //! Largest number of elements constant-folded at build time per var.
    size_t max_static_value_elems = 4096;
    //! Bytes an executable's static memory plan may take (its arenas and its own allocations),
    //! checked at compile() before anything is allocated (MemoryBudgetError); the model loader
    //! checks each var against it too. 0: BRAID_MEMORY_BUDGET, else physical memory (see
    //! memory/memory_budget.h).
    size_t memory_budget = 0;
    //! Let compile() fuse operators (matmul + bias + activation, convolution + batch norm +
    //! activation; graph/graph_pass.h). Off, or BRAID_FUSION=0 in the environment: every
    //! operator runs as built.
    bool enable_fusion = true;
    //! Deterministic mode (base/determinism.h, docs/determinism.md): every output element is
    //! computed in an order that depends only on the model and its own inputs, not on the batch,
    //! the thread count or the comp node. Default: BRAID_DETERMINISTIC=1 in the environment.
    bool deterministic = deterministic_from_env();
};

//! What compile() should do with an output var: fetch it into a host tensor readable after
//! wait() (no callback), or call `callback` on the comp node's thread once it is computed
//! (with a host copy when the var was computed on a device). A fetched output has memory of
//! its own; the tensor a callback gets may live in the planned arena and is valid only until
//! the callback returns (copy it to keep it).
struct OutputSpec {
    VarNode* var;
    std::function<void(const Tensor&)> callback;

    OutputSpec(VarNode* v) : var(v) {}
    OutputSpec(const SymbolVar& v);
    OutputSpec(const SymbolVar& v, std::function<void(const Tensor&)> cb);
};

/*!
 * What an operator on comp node `target` reads instead of its input `input_idx` when that input
 * lives on another device: normally a Copy operator to `target` (operators/copy.h), inserted
 * before the reader; the rule may also return the input itself (for operators that read
 * across devices on purpose) or throw GraphError.
 */
using CrossDeviceCopyFn = VarNode* (*)(OperatorNode& reader, size_t input_idx, CompNode target);
//! Installs the process-wide cross-device rule (register_all_operators() installs Copy's).
void set_cross_device_copy(CrossDeviceCopyFn fn);

//! A dataflow graph of operators. Build it from one thread; compiled executables run
//! asynchronously on the comp nodes.
class ComputingGraph : public std::enable_shared_from_this<ComputingGraph> {
public:
    static std::shared_ptr<ComputingGraph> make(GraphOptions options = {});
    ~ComputingGraph();

    GraphOptions& options() { return m_options; }
    const GraphOptions& options() const { return m_options; }

    //! Inserts `opr` (built by an operator's make()): checks its inputs belong here, routes
    //! inputs from another device through the cross-device rule (a Copy operator), returns an
    //! equal existing operator when deduplication finds one, otherwise infers its dtypes,
    //! shapes and static values and keeps it.
    OperatorNode* insert_opr(std::unique_ptr<OperatorNode> opr);

    /*!
     * While one lives, every operator inserted into `graph` gets `origin` as its origin()
     * (unless it has one): an importer opens one per source node, so that an error about any
     * operator the node became names the node. Scopes nest; the innermost wins.
     */
    class OriginScope {
    public:
        OriginScope(ComputingGraph& graph, std::string origin)
            : m_graph(graph), m_outer(std::exchange(graph.m_origin, std::move(origin))) {}
        ~OriginScope() { m_graph.m_origin = std::move(m_outer); }
        OriginScope(const OriginScope&) = delete;
        OriginScope& operator=(const OriginScope&) = delete;

    private:
        ComputingGraph& m_graph;
        std::string m_outer;
    };

    //! Operators in insertion (and thus topological) order.
    const std::vector<std::unique_ptr<OperatorNode>>& operators() const { return m_oprs; }

    //! Compiles the computation of `outputs` into an executable. Throws GraphError for an
    //! empty list or vars of another graph.
    std::unique_ptr<Executable> compile(const std::vector<OutputSpec>& outputs);

    //! Re-runs shape and value inference for every operator (after an input's shape
    //! changed). Vars whose shape cannot be inferred become dynamic.
    void reinfer_all();

    //! Held by an executable while it re-infers the graph's shapes for its fed inputs and
    //! plans its memory from them, so executables of one graph may run and re-plan from
    //! several threads. Building the graph itself is single-threaded and not guarded by it.
    std::mutex& inference_mutex() { return m_inference_mutex; }

    //! Runs one operator's shape and value inference; `may_block` lets shape rules that
    //! depend on peers wait for them (see InferCtx::may_block).
    void infer_opr(OperatorNode* opr, bool may_block = false);

    //! Makes every executable that computes `var` also compute `dep` (e.g. a collective's
    //! gradient that peers wait for even though this rank's result does not need it).
    void add_extra_dep(VarNode* var, VarNode* dep);
    //! The extra dependencies of `var` (empty when none).
    const VarNodeArray& extra_deps(VarNode* var) const;

private:
    explicit ComputingGraph(GraphOptions options) : m_options(std::move(options)) {}
    uint64_t dedup_hash(const OperatorNode& opr) const;
    void route_cross_device_inputs(OperatorNode& opr);

    GraphOptions m_options;
    std::string m_origin; //!< of the innermost OriginScope
    std::vector<std::unique_ptr<OperatorNode>> m_oprs;
    std::unordered_multimap<uint64_t, OperatorNode*> m_dedup;
    size_t m_next_var_id = 0;
    std::unordered_map<VarNode*, VarNodeArray> m_extra_deps;
    std::mutex m_inference_mutex;
};

} // namespace braid
