#include "collective/collective_modes.h"

#include "base/error.h"
#include "comm/communicator.h"
#include "graph/grad.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/grad_util.h"
#include "operators/subtensor.h"

#include <cstring>

namespace braid::opr {

namespace {

size_t elems(const Tensor& t) {
    return t.shape().total_nr_elems();
}

TensorShape with_dim0(const TensorShape& s, size_t d0) {
    TensorShape r = s;
    r[0] = d0;
    return r;
}

void require_dim0(const CollectiveComm& opr, const TensorShape& in) {
    if (in.ndim() == 0)
        BRAID_THROW(ShapeError, "{}: needs an input with at least one dim, got a scalar",
                    opr.describe());
}

void require_divisible(const CollectiveComm& opr, const TensorShape& in) {
    require_dim0(opr, in);
    uint32_t n = opr.param().nr_devices;
    if (in[0] % n != 0)
        BRAID_THROW(ShapeError, "{}: dim 0 of the input {} is {}, not divisible by nr_devices {}",
                    opr.describe(), in.to_string(), in[0], n);
}

//! A non-root's output shape, published by the root under the same key: from the root
//! operator itself when it is in this graph, else from the group manager (waiting for it
//! only when `may_block`; otherwise a quick look, and "not known yet").
bool shape_from_root(const CollectiveComm& opr, TensorShape& out, bool may_block) {
    const auto& key = opr.param().key;
    for (auto& other : opr.graph()->operators()) {
        auto* peer = dynamic_cast<CollectiveComm*>(other.get());
        if (peer && peer != &opr && peer->param().key == key && peer->param().is_root &&
            peer->output(0)->shape_known()) {
            out = peer->output(0)->shape();
            return true;
        }
    }
    if (may_block) {
        out = opr.param().group_client->get_output_shape(key);
        return true;
    }
    try {
        out = opr.param().group_client->get_output_shape(key, comm::Duration(0));
        return true;
    } catch (const TimeoutError&) {
        return false; // the root is not built yet; compile() asks again, then waits
    }
}

//! This rank, which local gradients need when the graph is built.
long known_rank(const CollectiveComm& opr) {
    if (opr.param().rank < 0)
        BRAID_THROW(GraphError,
                    "{}: local_grad needs this rank's number when the graph is built; set "
                    "CollectiveParam::rank",
                    opr.describe());
    return opr.param().rank;
}

//! Rows [rank * rows, (rank + 1) * rows) of x along dim 0.
SymbolVar rank_rows(SymbolVar x, long rank, long rows) {
    return subtensor(x, {AxisIndex::slice(0, rank * rows, (rank + 1) * rows)});
}

//! All-gather's local gradient: this rank's slice of the output gradient.
SymbolVar own_block(CollectiveComm& opr, SymbolVar g) {
    return rank_rows(g, known_rank(opr), long(opr.input(0)->shape()[0]));
}

//! Reduce-scatter's and all-to-all's local gradient: this rank's block of g, placed at the
//! same rows of zeros shaped like the input.
SymbolVar block_in_zeros(CollectiveComm& opr, SymbolVar g) {
    long r = known_rank(opr);
    long rows = long(opr.input(0)->shape()[0] / opr.param().nr_devices);
    SymbolVar block = opr.param().mode == CollectiveMode::ALL_TO_ALL ? rank_rows(g, r, rows) : g;
    return set_subtensor(zeros_like(opr.input(0)), block,
                         {AxisIndex::slice(0, r * rows, (r + 1) * rows)});
}

//! A gradient collective: the forward params with another mode and key "<key>:grad".
SymbolVar grad_collective(CollectiveComm& opr, CollectiveMode mode, SymbolVar input) {
    CollectiveParam p = opr.param();
    p.key += ":grad";
    p.mode = mode;
    return CollectiveComm::make(input, *opr.graph(), p, OperatorConfig::on(opr.comp_node()));
}

// ---------------------------------------------------------------- all-reduce
class AllReduce final : public CollectiveModeTrait {
public:
    explicit AllReduce(comm::ReduceOp op) : m_op(op) {}
    bool inplace() const override { return true; }
    bool output_shape(const CollectiveComm&, const TensorShape* in, TensorShape& out,
                      bool) const override {
        out = *in;
        return true;
    }
    CollectiveTraffic traffic(size_t in, size_t, uint32_t n, bool) const override {
        // Reduce-scatter then all-gather: (n-1)/n of the tensor each way, twice.
        return {2 * (n - 1) * in / n, 2 * (n - 1) * in / n};
    }
    void execute(comm::Communicator& c, const Tensor* in, Tensor& out, uint32_t,
                 uint32_t) const override {
        c.all_reduce(in->raw_ptr(), out.raw_ptr(), elems(out), out.dtype(), m_op);
    }
    VarNode* grad(CollectiveComm& opr, size_t, SymbolVar g) const override {
        // The gradient of a sum over ranks is the sum of the gradients; max and min route
        // it to where this rank's input equals the result.
        SymbolVar summed =
            opr.param().local_grad ? g : grad_collective(opr, CollectiveMode::ALL_REDUCE_SUM, g);
        if (m_op == comm::ReduceOp::SUM) return summed.node();
        SymbolVar x = opr.input(0), y = opr.output(0);
        return (m_op == comm::ReduceOp::MAX ? cond_leq_mov(y, x, summed)
                                            : cond_leq_mov(x, y, summed))
            .node();
    }

private:
    comm::ReduceOp m_op;
};

// ---------------------------------------------------------------- broadcast
class BroadcastMode final : public CollectiveModeTrait {
public:
    bool rank_has_input(bool is_root) const override { return is_root; }
    bool rooted() const override { return true; }
    bool output_shape(const CollectiveComm& opr, const TensorShape* in, TensorShape& out,
                      bool may_block) const override {
        if (in) {
            opr.param().group_client->set_output_shape(opr.param().key, *in);
            out = *in;
            return true;
        }
        return shape_from_root(opr, out, may_block);
    }
    CollectiveTraffic traffic(size_t in, size_t out, uint32_t n, bool is_root) const override {
        return is_root ? CollectiveTraffic{(n - 1) * in, 0} : CollectiveTraffic{0, out};
    }
    void execute(comm::Communicator& c, const Tensor* in, Tensor& out, uint32_t,
                 uint32_t root) const override {
        c.broadcast(in ? in->raw_ptr() : nullptr, out.raw_ptr(), elems(out), out.dtype(), root);
    }
    VarNode* grad(CollectiveComm& opr, size_t, SymbolVar g) const override {
        // Root: the sum of every rank's gradient; non-roots contribute theirs.
        return grad_collective(opr, CollectiveMode::REDUCE_SUM, g).node();
    }
};

// ---------------------------------------------------------------- reduce
class ReduceMode final : public CollectiveModeTrait {
public:
    bool rooted() const override { return true; }
    bool output_shape(const CollectiveComm& opr, const TensorShape* in, TensorShape& out,
                      bool) const override {
        out = opr.param().is_root ? *in : TensorShape{1};
        return true;
    }
    CollectiveTraffic traffic(size_t in, size_t, uint32_t n, bool is_root) const override {
        return is_root ? CollectiveTraffic{0, (n - 1) * in} : CollectiveTraffic{in, 0};
    }
    void execute(comm::Communicator& c, const Tensor* in, Tensor& out, uint32_t rank,
                 uint32_t root) const override {
        bool is_root = rank == root;
        if (!is_root) zero_fill(c, out); // the placeholder output
        c.reduce(in->raw_ptr(), is_root ? out.raw_ptr() : nullptr, elems(*in), in->dtype(),
                 comm::ReduceOp::SUM, root);
    }
    VarNode* grad(CollectiveComm& opr, size_t, SymbolVar g) const override {
        // Every rank's input gets the root's output gradient.
        SymbolVar in = opr.param().is_root ? g : SymbolVar();
        return grad_collective(opr, CollectiveMode::BROADCAST, in).node();
    }
};

// ---------------------------------------------------------------- all-gather
class AllGather final : public CollectiveModeTrait {
public:
    bool output_shape(const CollectiveComm& opr, const TensorShape* in, TensorShape& out,
                      bool) const override {
        require_dim0(opr, *in);
        out = with_dim0(*in, (*in)[0] * opr.param().nr_devices);
        return true;
    }
    CollectiveTraffic traffic(size_t in, size_t, uint32_t n, bool) const override {
        // This rank's block goes to n-1 peers; their n-1 blocks come in.
        return {(n - 1) * in, (n - 1) * in};
    }
    void execute(comm::Communicator& c, const Tensor* in, Tensor& out, uint32_t,
                 uint32_t) const override {
        c.all_gather(in->raw_ptr(), out.raw_ptr(), elems(*in), in->dtype());
    }
    VarNode* grad(CollectiveComm& opr, size_t, SymbolVar g) const override {
        if (opr.param().local_grad) return own_block(opr, g).node();
        return grad_collective(opr, CollectiveMode::REDUCE_SCATTER_SUM, g).node();
    }
};

// ---------------------------------------------------------------- reduce-scatter
class ReduceScatter final : public CollectiveModeTrait {
public:
    bool output_shape(const CollectiveComm& opr, const TensorShape* in, TensorShape& out,
                      bool) const override {
        require_divisible(opr, *in);
        out = with_dim0(*in, (*in)[0] / opr.param().nr_devices);
        return true;
    }
    CollectiveTraffic traffic(size_t in, size_t, uint32_t n, bool) const override {
        return {(n - 1) * in / n, (n - 1) * in / n};
    }
    void execute(comm::Communicator& c, const Tensor* in, Tensor& out, uint32_t,
                 uint32_t) const override {
        c.reduce_scatter(in->raw_ptr(), out.raw_ptr(), elems(out), out.dtype(),
                         comm::ReduceOp::SUM);
    }
    VarNode* grad(CollectiveComm& opr, size_t, SymbolVar g) const override {
        if (opr.param().local_grad) return block_in_zeros(opr, g).node();
        return grad_collective(opr, CollectiveMode::ALL_GATHER, g).node();
    }
};

// ---------------------------------------------------------------- gather
class GatherMode final : public CollectiveModeTrait {
public:
    bool rooted() const override { return true; }
    bool output_shape(const CollectiveComm& opr, const TensorShape* in, TensorShape& out,
                      bool) const override {
        require_dim0(opr, *in);
        out = opr.param().is_root ? with_dim0(*in, (*in)[0] * opr.param().nr_devices)
                                  : TensorShape{1};
        return true;
    }
    CollectiveTraffic traffic(size_t in, size_t, uint32_t n, bool is_root) const override {
        return is_root ? CollectiveTraffic{0, (n - 1) * in} : CollectiveTraffic{in, 0};
    }
    void execute(comm::Communicator& c, const Tensor* in, Tensor& out, uint32_t rank,
                 uint32_t root) const override {
        bool is_root = rank == root;
        if (!is_root) zero_fill(c, out);
        c.gather(in->raw_ptr(), is_root ? out.raw_ptr() : nullptr, elems(*in), in->dtype(), root);
    }
    VarNode* grad(CollectiveComm& opr, size_t, SymbolVar g) const override {
        SymbolVar in = opr.param().is_root ? g : SymbolVar();
        return grad_collective(opr, CollectiveMode::SCATTER, in).node();
    }
};

// ---------------------------------------------------------------- scatter
class ScatterMode final : public CollectiveModeTrait {
public:
    bool rank_has_input(bool is_root) const override { return is_root; }
    bool rooted() const override { return true; }
    bool output_shape(const CollectiveComm& opr, const TensorShape* in, TensorShape& out,
                      bool may_block) const override {
        auto& p = opr.param();
        if (in) {
            require_divisible(opr, *in);
            out = with_dim0(*in, (*in)[0] / p.nr_devices);
            p.group_client->set_output_shape(p.key, out);
            return true;
        }
        return shape_from_root(opr, out, may_block);
    }
    CollectiveTraffic traffic(size_t in, size_t out, uint32_t n, bool is_root) const override {
        return is_root ? CollectiveTraffic{(n - 1) * in / n, 0} : CollectiveTraffic{0, out};
    }
    void execute(comm::Communicator& c, const Tensor* in, Tensor& out, uint32_t,
                 uint32_t root) const override {
        c.scatter(in ? in->raw_ptr() : nullptr, out.raw_ptr(), elems(out), out.dtype(), root);
    }
    VarNode* grad(CollectiveComm& opr, size_t, SymbolVar g) const override {
        return grad_collective(opr, CollectiveMode::GATHER, g).node();
    }
};

// ---------------------------------------------------------------- all-to-all
class AllToAll final : public CollectiveModeTrait {
public:
    bool output_shape(const CollectiveComm& opr, const TensorShape* in, TensorShape& out,
                      bool) const override {
        require_divisible(opr, *in);
        out = *in;
        return true;
    }
    CollectiveTraffic traffic(size_t in, size_t, uint32_t n, bool) const override {
        // Every block but this rank's own leaves, and as many come in.
        return {(n - 1) * in / n, (n - 1) * in / n};
    }
    void execute(comm::Communicator& c, const Tensor* in, Tensor& out, uint32_t,
                 uint32_t) const override {
        uint32_t n = uint32_t(c.nranks());
        c.all_to_all(in->raw_ptr(), out.raw_ptr(), elems(*in) / n, in->dtype());
    }
    VarNode* grad(CollectiveComm& opr, size_t, SymbolVar g) const override {
        if (opr.param().local_grad) return block_in_zeros(opr, g).node();
        return grad_collective(opr, CollectiveMode::ALL_TO_ALL, g).node();
    }
};

} // namespace

VarNode* CollectiveComm::grad_rule(OperatorNode& node, size_t wrt, const VarNodeArray& out_grads) {
    auto& opr = static_cast<CollectiveComm&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) g = filled_like(opr.output(0), 0.0); // still take part in the collective
    return mode_trait(opr.param().mode).grad(opr, wrt, g);
}

void zero_fill(const comm::Communicator& c, Tensor& t) {
    if (!t.nr_bytes()) return;
    if (t.device().kind == Device::Kind::CPU) {
        std::memset(t.raw_ptr(), 0, t.nr_bytes());
        return;
    }
    // The copy may still read its source after returning, so the zeros live for good.
    alignas(16) static const uint8_t zeros[16] = {};
    BRAID_ASSERT(t.nr_bytes() <= sizeof(zeros), "placeholder of {} bytes", t.nr_bytes());
    Tensor host(Storage::wrap(const_cast<uint8_t*>(zeros), sizeof(zeros), Device::cpu()), 0,
                t.layout());
    c.comp_node().copy(t, host);
}

const CollectiveModeTrait& mode_trait(CollectiveMode mode) {
    static const AllReduce sum(comm::ReduceOp::SUM), max(comm::ReduceOp::MAX),
        min(comm::ReduceOp::MIN);
    static const BroadcastMode broadcast;
    static const ReduceMode reduce;
    static const AllGather all_gather;
    static const ReduceScatter reduce_scatter;
    static const GatherMode gather;
    static const ScatterMode scatter;
    static const AllToAll all_to_all;
    switch (mode) {
    case CollectiveMode::ALL_REDUCE_SUM:
        return sum;
    case CollectiveMode::ALL_REDUCE_MAX:
        return max;
    case CollectiveMode::ALL_REDUCE_MIN:
        return min;
    case CollectiveMode::BROADCAST:
        return broadcast;
    case CollectiveMode::REDUCE_SUM:
        return reduce;
    case CollectiveMode::ALL_GATHER:
        return all_gather;
    case CollectiveMode::REDUCE_SCATTER_SUM:
        return reduce_scatter;
    case CollectiveMode::GATHER:
        return gather;
    case CollectiveMode::SCATTER:
        return scatter;
    case CollectiveMode::ALL_TO_ALL:
        return all_to_all;
    }
    BRAID_THROW(ValueError, "unknown collective mode {}", int(mode));
}

} // namespace braid::opr
