// CollectiveComm: one operator type through which N ranks all-reduce, broadcast, reduce,
// gather, scatter and exchange tensors. Each mode is a trait class (collective_modes.cpp)
// that defines the output shape, the execution on a Communicator, and the gradient.
//
// The N peers of one collective share a key. On its first execution an operator registers
// with the group manager (comm::join_group), learns its rank and the root's, takes its
// communicator from the cache by the group hash, and (unless turned off) checks with its
// peers that they agree on mode, dtype, shape and group size. Gradient operators use the
// key + ":grad". CollectiveComm operators are never deduplicated.
#pragma once

#include "comm/group_client.h"
#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

#include <atomic>
#include <memory>

namespace braid::comm {
class Communicator;
}

namespace braid {
struct CollectiveBinding;
}

namespace braid::opr {

//! The group client a model's load-time binding names: its own, one TCP client per server
//! address (shared by every operator naming it), or the process-wide in-process group manager.
//! `what` prefixes the error for a malformed address.
std::shared_ptr<comm::GroupClient> binding_client(const CollectiveBinding& binding,
                                                  const std::string& what);

//! The collectives. See docs/collectives.md for shapes and gradients.
enum class CollectiveMode : uint8_t {
    ALL_REDUCE_SUM,
    ALL_REDUCE_MAX,
    ALL_REDUCE_MIN,
    BROADCAST,
    REDUCE_SUM,
    ALL_GATHER,
    REDUCE_SCATTER_SUM,
    GATHER,
    SCATTER,
    ALL_TO_ALL,
};

//! "ALL_REDUCE_SUM", ...
const char* collective_mode_name(CollectiveMode mode);

//! Everything that defines one rank's collective operator.
struct CollectiveParam {
    std::string key;                      //!< shared by the N peers
    uint32_t nr_devices = 1;              //!< group size N
    bool is_root = false;                 //!< the root of rooted modes (one peer; none: rank 0)
    int32_t rank = comm::UNASSIGNED_RANK; //!< this rank, or assigned by comp node order
    bool local_grad = false;              //!< backward uses the local equivalent, not a collective
    std::shared_ptr<comm::GroupClient> group_client;
    CollectiveMode mode = CollectiveMode::ALL_REDUCE_SUM;
    DType dtype = dtype::Float32(); //!< the declared dtype; inputs must have it
    std::string backend = "local";  //!< "local", "mpi" or "nccl"
    //! Read at each execution when set: 0 runs the collective, 1 skips it (the output keeps
    //! its previous contents); any other value is an error.
    std::shared_ptr<std::atomic<int>> disable;
    //! Exchange (mode, dtype, shape, nr_devices) with the peers before the first collective.
    bool check_consistency = true;
    //! The stored fields (group_client and disable are set at run time, never stored).
    static constexpr auto fields() {
        using P = CollectiveParam;
        return std::tuple{param_field("mode", &P::mode, collective_mode_name),
                          param_field("key", &P::key),
                          param_field("nr_devices", &P::nr_devices),
                          param_field("is_root", &P::is_root),
                          param_field("rank", &P::rank),
                          param_field("local_grad", &P::local_grad),
                          param_field("dtype", &P::dtype),
                          param_field("backend", &P::backend),
                          param_field("check_consistency", &P::check_consistency)};
    }
};

class CollectiveComm final : public ParamOperator<CollectiveComm, CollectiveParam> {
public:
    CollectiveComm(VarNode* input, CollectiveParam param, const OperatorConfig& config);
    /*!
     * The collective of `param.mode` on `input` (nullptr for ranks that contribute no input:
     * BROADCAST and SCATTER non-roots). `graph` is needed when there is no input.
     */
    static SymbolVar make(SymbolVar input, ComputingGraph& graph, CollectiveParam param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "CollectiveComm"; }
    //! The gradient rule (graph/grad.h): the mode trait's, in collective_modes.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    //! Never merged: equal-looking collectives of one rank are distinct exchanges.
    bool allow_dedup() const override { return false; }
    std::string peer_group() const override { return m_param.key; }
    std::shared_ptr<comm::GroupClient> group_client() const override {
        return m_param.group_client;
    }
    void wait_queued_work() override;
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    ValueInference value_inference() const override { return ValueInference::NONE; }
    int inplace_input(size_t) const override;
    void execute(ExecCtx& ctx) override;

    //! Rank and root after the first execution (or the params' values before it).
    uint32_t rank() const { return m_rank; }
    uint32_t root_rank() const { return m_root; }
    //! Whether this rank has an input (BROADCAST and SCATTER non-roots have none).
    bool has_input() const { return !inputs().empty(); }

private:
    void join(const Tensor* input, const TensorShape& output);
    //! Publishes this rank's mode, dtype, group size and input shape as check number
    //! m_checks + 1 of the key and compares every peer's; throws CommError on a mismatch.
    void check_peers(const Tensor* input, const TensorShape& output);

    std::shared_ptr<comm::Communicator> m_comm;
    uint32_t m_rank = 0, m_root = 0;
    //! Consistency checks done, and the input and output shapes of the last one: a later run
    //! whose shapes differ (after re-inference) checks again before it communicates.
    uint64_t m_checks = 0;
    TensorShape m_checked_input, m_checked_output;
};

//! A rank's view of a group: what the short helpers below need. Copies share the key
//! counter, so every rank that builds its graph in the same order gets the same keys.
struct Group {
    std::string key_prefix;
    uint32_t size = 1;
    int32_t rank = comm::UNASSIGNED_RANK;
    std::shared_ptr<comm::GroupClient> client;
    std::string backend = "local";
    uint32_t root = 0;  //!< rank of the root for rooted modes
    CompNode comp_node; //!< where this rank's collectives run (invalid: the input's)
    std::shared_ptr<uint64_t> counter = std::make_shared<uint64_t>(0);

    //! The params of the next collective of this group (keys "<prefix>:<n>").
    CollectiveParam param(CollectiveMode mode, DType dtype, const std::string& name = {}) const;
};

SymbolVar all_reduce_sum(SymbolVar x, const Group& group, const std::string& name = {});
SymbolVar all_reduce_max(SymbolVar x, const Group& group, const std::string& name = {});
SymbolVar all_reduce_min(SymbolVar x, const Group& group, const std::string& name = {});
SymbolVar all_gather(SymbolVar x, const Group& group, const std::string& name = {});
SymbolVar reduce_scatter_sum(SymbolVar x, const Group& group, const std::string& name = {});
SymbolVar all_to_all(SymbolVar x, const Group& group, const std::string& name = {});
//! Root: sends x; others: pass an invalid SymbolVar (they get the root's shape).
SymbolVar broadcast_from_root(SymbolVar x, ComputingGraph& graph, const Group& group, DType dtype,
                              const std::string& name = {});
//! Root: the sum over ranks; others: a {1} placeholder.
SymbolVar reduce_sum_to_root(SymbolVar x, const Group& group, const std::string& name = {});
//! Root: the inputs concatenated along dim 0 in rank order; others: a {1} placeholder.
SymbolVar gather_to_root(SymbolVar x, const Group& group, const std::string& name = {});
//! Root: splits x along dim 0, block i to rank i; others: pass an invalid SymbolVar.
SymbolVar scatter_from_root(SymbolVar x, ComputingGraph& graph, const Group& group, DType dtype,
                            const std::string& name = {});

} // namespace braid::opr
