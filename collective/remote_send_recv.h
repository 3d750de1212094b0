// RemoteSend and RemoteRecv: a point-to-point transfer of one tensor between two ranks, the
// building block of pipeline stages and of ring exchanges.
//
// A send and its recv share a key. On their first execution both register with the group
// manager as a group of two (the sender is rank 0 of that pair, the receiver rank 1), take
// the pair's communicator from the cache (any backend: local, mpi, nccl, ...) and check that
// they agree on dtype and shape. Every later execution moves the tensor once.
//
// Shapes are static on both sides: the sender publishes its input's shape under the key while
// its graph is built (as a BROADCAST root does), and the receiver's shape inference reads it,
// waiting for it with the group manager's deadline when the sender has not been built yet.
// A receiver may also state the shape itself (param `shape`); then it is checked instead.
//
// The sender's output is a placeholder: a float32 {1} zero that exists so the send can be a
// graph output or a dependency, and so that a sender can ask for gradients: grad(placeholder,
// wrt) gives d(loss on the receiver)/d(wrt), the receiver sending back the gradient of what it
// received. Gradients: the gradient of a send is a recv of the gradient (key + ":grad"), the
// gradient of a recv is a send of its output's gradient back to the sender (run as a side
// effect of the receiver's grad(), see graph/grad.h). A receiver whose loss does not depend on
// what it received sends no gradient; its sender's gradient recv then fails at its deadline.
//
// Every wait (registration, the shape, the transfer) ends at the deadline of the backend
// (BRAID_COMM_TIMEOUT, default 300 s) with an error naming the key and the peer's rank.
// Within one graph a send and its recv run as one step of the schedule (peer_group()).
#pragma once

#include "comm/group_client.h"
#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

#include <memory>
#include <optional>

namespace braid::comm {
class Communicator;
}

namespace braid::opr {

//! What defines one side of a transfer.
struct RemoteParam {
    std::string key;                  //!< shared by the send and its recv
    int32_t peer = -1;                //!< the other side's rank in the caller's world (messages)
    std::string backend = "local";    //!< "local", "mpi", "nccl", ...
    DType dtype = dtype::Float32();   //!< the tensor's dtype (a send's input must have it)
    std::optional<TensorShape> shape; //!< recv only: the expected shape (unset: the sender's)
    std::shared_ptr<comm::GroupClient> group_client; //!< set at run time, never stored
    static constexpr auto fields() {
        using P = RemoteParam;
        return std::tuple{param_field("key", &P::key), param_field("peer", &P::peer),
                          param_field("backend", &P::backend), param_field("dtype", &P::dtype),
                          param_field("shape", &P::shape)};
    }
};

//! Common part of both sides: the pair's registration and communicator.
class RemoteTransfer : public ParamOperator<RemoteTransfer, RemoteParam> {
public:
    //! Never merged: each send or recv is one transfer with its peer.
    bool allow_dedup() const override { return false; }
    std::string peer_group() const override { return m_param.key; }
    std::shared_ptr<comm::GroupClient> group_client() const override {
        return m_param.group_client;
    }
    ValueInference value_inference() const override { return ValueInference::NONE; }
    void wait_queued_work() override;

protected:
    RemoteTransfer(RemoteParam param, const OperatorConfig& config);
    //! "RemoteSend \"k\" to rank 3" (or "from rank 3"): the prefix of every message.
    std::string what() const;
    //! Registers the pair and checks that both sides agree on dtype and shape; `is_sender`
    //! picks this side's pair rank.
    void join(bool is_sender, const TensorShape& shape);
    //! Runs `body` with the communicator, naming the peer in a timeout or comm error.
    template <typename Body> void transfer(Body&& body);

    std::shared_ptr<comm::Communicator> m_comm;
};

class RemoteSend final : public RemoteTransfer {
public:
    RemoteSend(VarNode* input, RemoteParam param, const OperatorConfig& config);
    //! Sends x to the recv of `param.key`; returns the placeholder (float32 {1}, zero).
    static SymbolVar make(SymbolVar x, RemoteParam param, const OperatorConfig& config = {});

    const char* type_name() const override { return "RemoteSend"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

class RemoteRecv final : public RemoteTransfer {
public:
    RemoteRecv(RemoteParam param, const OperatorConfig& config);
    //! The tensor the send of `param.key` sends, of dtype param.dtype.
    static SymbolVar make(ComputingGraph& graph, RemoteParam param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "RemoteRecv"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

//! Sends x to rank `peer` under `key` through `client` (backend `backend`).
SymbolVar remote_send(SymbolVar x, const std::string& key, int32_t peer,
                      std::shared_ptr<comm::GroupClient> client,
                      const std::string& backend = "local", const OperatorConfig& config = {});
//! Receives the tensor rank `peer` sends under `key`, of dtype `dtype`, on `config`'s comp node.
SymbolVar remote_recv(ComputingGraph& graph, const std::string& key, int32_t peer, DType dtype,
                      std::shared_ptr<comm::GroupClient> client,
                      const std::string& backend = "local", const OperatorConfig& config = {});

} // namespace braid::opr
