#include "collective/ring_attention.h"
#include "graph/operator_registry.h"

#include "base/error.h"
#include "collective/collective_comm.h"
#include "comm/communicator.h"
#include "graph/grad.h"
#include "operators/attention_kernels.h"
#include "operators/grad_util.h"

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

namespace braid::opr {

const char* ring_rotation_name(RingRotation rotation) {
    switch (rotation) {
    case RingRotation::ALL_GATHER:
        return "ALL_GATHER";
    case RingRotation::RING:
        return "RING";
    }
    return "?";
}

//! One thread that runs the ring's transfers in submission order while the caller computes.
class RingAttentionBase::Lane {
public:
    Lane() : m_thread([this] { run(); }) {}
    ~Lane() {
        {
            std::lock_guard lk(m_mutex);
            m_stop = true;
        }
        m_cv.notify_all();
        m_thread.join();
    }
    std::future<void> submit(std::function<void()> fn) {
        std::packaged_task<void()> task(std::move(fn));
        auto done = task.get_future();
        {
            std::lock_guard lk(m_mutex);
            m_tasks.push_back(std::move(task));
        }
        m_cv.notify_one();
        return done;
    }

private:
    void run() {
        for (;;) {
            std::packaged_task<void()> task;
            {
                std::unique_lock lk(m_mutex);
                m_cv.wait(lk, [&] { return m_stop || !m_tasks.empty(); });
                if (m_tasks.empty()) return;
                task = std::move(m_tasks.front());
                m_tasks.pop_front();
            }
            task(); // an exception reaches the caller through the future
        }
    }

    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::deque<std::packaged_task<void()>> m_tasks;
    bool m_stop = false;
    std::thread m_thread;
};

namespace {

constexpr float NINF = -std::numeric_limits<float>::infinity();

//! What rank `rank` computes at `step`: query rows [q_begin, q_end) of its shard against key
//! rows [k_begin, k_end) of the block it holds then, with or without the causal mask.
struct BlockPlan {
    bool skip = false;
    size_t q_begin = 0, q_end = 0, k_begin = 0, k_end = 0;
    bool causal = false;
};

BlockPlan plan_step(const RingAttentionParam& p, uint32_t step, size_t rows) {
    uint32_t n = p.nr_devices, r = uint32_t(p.rank), src = (r + n - step) % n;
    size_t half = rows / 2;
    if (!p.causal) return {false, 0, rows, 0, rows, false};
    if (step == 0) return {false, 0, rows, 0, rows, true};
    if (p.load_balance) {
        if (src < r) return {false, 0, rows, 0, half, false}; // the block's earlier chunk
        return {false, half, rows, 0, rows, false};           // the later local chunk
    }
    if (src < r) return {false, 0, rows, 0, rows, false};
    return {true};
}

//! Pass `count` floats to the next rank and take as many from the previous one. Sends are
//! synchronous on some backends, so even ranks send first and odd ranks receive first: every
//! send meets a posted receive (for an odd N, rank N−1 and rank 0 both send first and the
//! chain resolves from rank 1).
void ring_exchange(comm::Communicator& c, const float* send, float* recv, size_t count) {
    uint32_t n = uint32_t(c.nranks()), r = uint32_t(c.rank());
    if (n == 1) return;
    uint32_t next = (r + 1) % n, prev = (r + n - 1) % n;
    if (r % 2 == 0) {
        c.send(send, count, dtype::Float32(), next);
        c.recv(recv, count, dtype::Float32(), prev);
    } else {
        c.recv(recv, count, dtype::Float32(), prev);
        c.send(send, count, dtype::Float32(), next);
    }
}

//! Waits for a pending transfer when leaving a scope early, so it never outlives the buffers.
struct PendingTransfer {
    std::future<void> done;
    void wait() {
        if (done.valid()) done.get();
    }
    ~PendingTransfer() {
        if (done.valid()) done.wait();
    }
};

//! [heads, rows, d] k then [heads, rows, dv] v, packed into one transfer buffer.
void pack_kv(const Tensor& k, const Tensor& v, float* dst) {
    size_t kn = k.shape().total_nr_elems();
    std::memcpy(dst, k.ptr<float>(), kn * sizeof(float));
    std::memcpy(dst + kn, v.ptr<float>(), v.shape().total_nr_elems() * sizeof(float));
}

//! One execution's sizes: heads (B·H), rows per rank, head dims, and the ring's shape.
struct Dims {
    size_t heads, rows, d, dv;
    float scale;
    uint32_t n, rank;
    bool ring; //!< RING rotation (else ALL_GATHER)
    size_t k_floats() const { return heads * rows * d; }
    size_t kv_floats() const { return heads * rows * (d + dv); }
};

Dims dims_of(const RingAttentionParam& p, const TensorShape& q, const TensorShape& v) {
    float scale = p.scale ? *p.scale : 1.f / std::sqrt(float(q[3]));
    return {q[0] * q[1],
            q[2],
            q[3],
            v[3],
            scale,
            p.nr_devices,
            uint32_t(p.rank),
            p.rotation == RingRotation::RING};
}

//! The key/value blocks a pass starts from: this rank's packed in slot 0 of two (RING), or
//! every rank's gathered into N slots (ALL_GATHER).
void load_blocks(std::vector<float>& blocks, const Dims& dims, const Tensor& k, const Tensor& v,
                 comm::Communicator& c) {
    size_t kv = dims.kv_floats();
    blocks.resize((dims.ring ? std::min<size_t>(dims.n, 2) : dims.n) * kv);
    if (dims.ring) {
        pack_kv(k, v, blocks.data());
        return;
    }
    pack_kv(k, v, blocks.data() + dims.rank * kv);
    if (dims.n > 1)
        c.all_gather(blocks.data() + dims.rank * kv, blocks.data(), kv, dtype::Float32());
}

//! The geometry and strides of `plan`'s block: queries from a shard of `dims.rows` rows, keys
//! from a packed block of as many rows.
std::pair<kern::AttentionGeometry, kern::HeadStrides> block_geometry(const Dims& dims,
                                                                     const BlockPlan& plan) {
    kern::AttentionGeometry g{plan.q_end - plan.q_begin,
                              plan.k_end - plan.k_begin,
                              dims.d,
                              dims.dv,
                              dims.scale,
                              plan.causal};
    kern::HeadStrides st{dims.rows * dims.d, dims.rows * dims.d, dims.rows * dims.dv,
                         dims.rows * dims.dv, dims.rows};
    return {g, st};
}

} // namespace

// ---- common part

RingAttentionBase::RingAttentionBase(RingAttentionParam param, const OperatorConfig& config)
    : ParamOperator(std::move(param), config) {
    if (m_param.key.empty()) BRAID_THROW(GraphError, "RingAttention: the key is empty");
    if (!m_param.group_client)
        BRAID_THROW(GraphError, "RingAttention \"{}\": no group client given", m_param.key);
    if (m_param.nr_devices == 0)
        BRAID_THROW(ValueError, "RingAttention \"{}\": nr_devices must be at least 1", m_param.key);
    if (m_param.rank < 0 || uint32_t(m_param.rank) >= m_param.nr_devices)
        BRAID_THROW(ValueError,
                    "RingAttention \"{}\": rank {} is not in 0..{}; the layout of the sequence "
                    "depends on it, so it must be known when the graph is built",
                    m_param.key, m_param.rank, m_param.nr_devices - 1);
    if (m_param.scale && !std::isfinite(*m_param.scale))
        BRAID_THROW(ValueError, "RingAttention \"{}\": scale must be finite, got {}", m_param.key,
                    *m_param.scale);
}

RingAttentionBase::~RingAttentionBase() = default;

void RingAttentionBase::check_qkv(const TensorShape& q, const TensorShape& k,
                                  const TensorShape& v) const {
    if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4)
        BRAID_THROW(ShapeError, "{}: q, k and v must be 4-D [B, H, S/N, D], got {}, {} and {}",
                    describe(), q.to_string(), k.to_string(), v.to_string());
    if (k[0] != q[0] || k[1] != q[1] || v[0] != q[0] || v[1] != q[1] || k[3] != q[3])
        BRAID_THROW(ShapeError, "{}: batch, heads or head dims differ: q {}, k {}, v {}",
                    describe(), q.to_string(), k.to_string(), v.to_string());
    if (k[2] != q[2] || v[2] != q[2])
        BRAID_THROW(ShapeError,
                    "{}: every rank holds as many keys as queries (its share of one sequence), "
                    "got q {}, k {}, v {}",
                    describe(), q.to_string(), k.to_string(), v.to_string());
    uint32_t n = m_param.nr_devices;
    if (m_param.causal && m_param.load_balance && n > 1 && q[2] % 2 != 0)
        BRAID_THROW(ShapeError,
                    "{}: load balancing cuts the sequence of {} positions ({} per rank) into "
                    "2N = {} chunks, and {} % {} = {}; pad the sequence or set load_balance = "
                    "false",
                    describe(), q[2] * n, q[2], 2 * n, q[2] * n, 2 * n, (q[2] * n) % (2 * n));
}

comm::Communicator& RingAttentionBase::communicator() {
    if (m_comm) return *m_comm;
    if (comp_node().device().kind != Device::Kind::CPU)
        BRAID_THROW(GraphError, "{}: no CUDA kernel; run ring attention on CPU comp nodes",
                    describe());
    auto membership =
        comm::join_group(m_param.group_client, m_param.backend, m_param.key, m_param.nr_devices,
                         false, m_param.rank, comp_node().id(), comp_node());
    if (membership.communicator->buffer_kind() != Device::Kind::CPU)
        BRAID_THROW(CommError, "{}: backend \"{}\" works on device memory; use a CPU backend",
                    describe(), m_param.backend);
    m_comm = membership.communicator;
    return *m_comm;
}

RingAttentionBase::Lane& RingAttentionBase::lane() {
    if (!m_lane) m_lane = std::make_unique<Lane>();
    return *m_lane;
}

// ---- forward

RingAttention::RingAttention(VarNode* q, VarNode* k, VarNode* v, RingAttentionParam param,
                             const OperatorConfig& config)
    : RingAttentionBase(std::move(param), config) {
    add_input(q);
    add_input(k);
    add_input(v);
    add_output("out");
    add_output("lse");
}

SymbolVarArray RingAttention::make(SymbolVar q, SymbolVar k, SymbolVar v, RingAttentionParam param,
                                   const OperatorConfig& config) {
    OperatorConfig cfg = config;
    if (cfg.name.empty()) cfg.name = param.key;
    auto* opr = q.graph().insert_opr(
        std::make_unique<RingAttention>(q.node(), k.node(), v.node(), std::move(param), cfg));
    return {opr->output(0), opr->output(1)};
}

void RingAttention::init_output_dtypes() {
    for (size_t i = 0; i < 3; ++i)
        if (input(i)->dtype() != dtype::Float32())
            BRAID_THROW(DTypeError, "{}: q, k and v must be float32, input {} \"{}\" is {}",
                        describe(), i, input(i)->name(), input(i)->dtype().name());
    output(0)->set_dtype(dtype::Float32());
    output(1)->set_dtype(dtype::Float32());
}

bool RingAttention::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1) || !ctx.shape(2)) return false;
    const auto &q = *ctx.shape(0), &k = *ctx.shape(1), &v = *ctx.shape(2);
    check_qkv(q, k, v);
    out[0] = TensorShape{q[0], q[1], q[2], v[3]};
    out[1] = TensorShape{q[0], q[1], q[2]};
    return true;
}

void RingAttention::execute(ExecCtx& ctx) {
    Tensor q = ctx.input(0).contiguous(), k = ctx.input(1).contiguous(),
           v = ctx.input(2).contiguous();
    Tensor &out = ctx.output(0), &lse = ctx.output(1);
    Dims dims = dims_of(m_param, q.shape(), v.shape());
    comm::Communicator& c = communicator();
    uint32_t n = dims.n, r = dims.rank;
    bool ring = dims.ring;
    size_t kv = dims.kv_floats();

    float* o = out.ptr<float>();
    float* l = lse.ptr<float>();
    std::fill(o, o + dims.heads * dims.rows * dims.dv, 0.f);
    std::fill(l, l + dims.heads * dims.rows, NINF);
    m_block_out.resize(dims.heads * dims.rows * dims.dv);
    m_block_lse.resize(dims.heads * dims.rows);
    load_blocks(m_blocks, dims, k, v, c);
    for (uint32_t step = 0; step < n; ++step) {
        uint32_t src = (r + n - step) % n;
        float* cur = ring ? m_blocks.data() + (step % 2) * kv : m_blocks.data() + src * kv;
        PendingTransfer transfer;
        if (ring && step + 1 < n) {
            float* next = m_blocks.data() + ((step + 1) % 2) * kv;
            transfer.done = lane().submit([&c, cur, next, kv] { ring_exchange(c, cur, next, kv); });
        }
        BlockPlan plan = plan_step(m_param, step, dims.rows);
        if (!plan.skip) {
            auto [g, st] = block_geometry(dims, plan);
            st.out = g.sq * dims.dv; // the block's own out and lse are contiguous
            st.lse = g.sq;
            kern::attention_forward(g, dims.heads, st, q.ptr<float>() + plan.q_begin * dims.d,
                                    cur + plan.k_begin * dims.d,
                                    cur + dims.k_floats() + plan.k_begin * dims.dv,
                                    m_block_out.data(), m_block_lse.data());
            for (size_t h = 0; h < dims.heads; ++h)
                kern::attention_merge(g.sq, dims.dv, o + (h * dims.rows + plan.q_begin) * dims.dv,
                                      l + h * dims.rows + plan.q_begin,
                                      m_block_out.data() + h * g.sq * dims.dv,
                                      m_block_lse.data() + h * g.sq);
        }
        transfer.wait();
    }
}

// ---- backward

RingAttentionGrad::RingAttentionGrad(const VarNodeArray& inputs, RingAttentionParam param,
                                     const OperatorConfig& config)
    : RingAttentionBase(std::move(param), config) {
    if (inputs.size() != 6 && inputs.size() != 7)
        BRAID_THROW(GraphError,
                    "RingAttentionGrad \"{}\": expected inputs q, k, v, out, lse, dout [, dlse], "
                    "got {}",
                    m_param.key, inputs.size());
    for (auto* in : inputs) add_input(in);
    add_output("dq");
    add_output("dk");
    add_output("dv");
}

SymbolVarArray RingAttentionGrad::make(const SymbolVarArray& inputs, RingAttentionParam param,
                                       const OperatorConfig& config) {
    VarNodeArray nodes;
    for (auto& in : inputs) nodes.push_back(in.node());
    OperatorConfig cfg = config;
    if (cfg.name.empty()) cfg.name = param.key;
    auto* opr = inputs.at(0).graph().insert_opr(
        std::make_unique<RingAttentionGrad>(nodes, std::move(param), cfg));
    return {opr->output(0), opr->output(1), opr->output(2)};
}

void RingAttentionGrad::init_output_dtypes() {
    for (size_t i = 0; i < inputs().size(); ++i)
        if (input(i)->dtype() != dtype::Float32())
            BRAID_THROW(DTypeError, "{}: every input must be float32, input {} \"{}\" is {}",
                        describe(), i, input(i)->name(), input(i)->dtype().name());
    for (size_t i = 0; i < 3; ++i) output(i)->set_dtype(dtype::Float32());
}

bool RingAttentionGrad::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    for (size_t i = 0; i < inputs().size(); ++i)
        if (!ctx.shape(i)) return false;
    check_qkv(*ctx.shape(0), *ctx.shape(1), *ctx.shape(2));
    for (size_t i = 0; i < 3; ++i) out[i] = *ctx.shape(i);
    return true;
}

void RingAttentionGrad::execute(ExecCtx& ctx) {
    Tensor q = ctx.input(0).contiguous(), k = ctx.input(1).contiguous(),
           v = ctx.input(2).contiguous(), out = ctx.input(3).contiguous(),
           lse = ctx.input(4).contiguous(), dout = ctx.input(5).contiguous();
    Tensor dlse = inputs().size() > 6 ? ctx.input(6).contiguous() : Tensor();
    Tensor &dq = ctx.output(0), &dk = ctx.output(1), &dv = ctx.output(2);
    Dims dims = dims_of(m_param, q.shape(), v.shape());
    comm::Communicator& c = communicator();
    uint32_t n = dims.n, r = dims.rank;
    bool ring = dims.ring;
    size_t kv = dims.kv_floats();

    m_delta.resize(dims.heads * dims.rows);
    kern::attention_delta(dims.heads, dims.rows, dims.dv, out.ptr<float>(), dout.ptr<float>(),
                          dlse.empty() ? nullptr : dlse.ptr<float>(), m_delta.data());
    float* dqp = dq.ptr<float>();
    std::fill(dqp, dqp + dims.heads * dims.rows * dims.d, 0.f);
    // RING: blocks cur/next, grads [this step's, the one travelling on, the one arriving].
    // ALL_GATHER: every block, and every block's gradient (reduce-scattered at the end).
    m_grads.assign((ring ? 3 : n) * kv, 0.f);
    float *grad_step = m_grads.data(), *grad_out = grad_step + kv, *grad_in = grad_out + kv;
    load_blocks(m_blocks, dims, k, v, c);
    PendingTransfer grads_moving; // the gradient ring's transfer of the previous step
    for (uint32_t step = 0; step < n; ++step) {
        uint32_t src = (r + n - step) % n;
        float* cur = ring ? m_blocks.data() + (step % 2) * kv : m_blocks.data() + src * kv;
        float* grad = ring ? grad_step : m_grads.data() + src * kv;
        PendingTransfer blocks_moving;
        if (ring && step + 1 < n) {
            float* next = m_blocks.data() + ((step + 1) % 2) * kv;
            blocks_moving.done =
                lane().submit([&c, cur, next, kv] { ring_exchange(c, cur, next, kv); });
        }
        if (ring) std::fill(grad_step, grad_step + kv, 0.f);
        BlockPlan plan = plan_step(m_param, step, dims.rows);
        if (!plan.skip) {
            auto [g, st] = block_geometry(dims, plan);
            size_t qb = plan.q_begin, kb = plan.k_begin;
            kern::attention_backward(g, dims.heads, st, q.ptr<float>() + qb * dims.d,
                                     cur + kb * dims.d, cur + dims.k_floats() + kb * dims.dv,
                                     lse.ptr<float>() + qb, dout.ptr<float>() + qb * dims.dv,
                                     m_delta.data() + qb, dqp + qb * dims.d, grad + kb * dims.d,
                                     grad + dims.k_floats() + kb * dims.dv);
        }
        if (!ring) continue;
        blocks_moving.wait();
        if (n == 1) break;
        // The block's gradient so far (from the ranks it visited) plus this rank's share
        // moves on with it; the next block's arrives from the previous rank.
        grads_moving.wait();
        for (size_t i = 0; i < kv; ++i) grad_out[i] = grad_step[i] + (step ? grad_in[i] : 0.f);
        grads_moving.done =
            lane().submit([&c, grad_out, grad_in, kv] { ring_exchange(c, grad_out, grad_in, kv); });
    }
    grads_moving.wait();
    const float* own = grad_step; // N = 1: this rank's block only
    if (ring && n > 1) {
        own = grad_in; // after N hops, the gradient of this rank's own block
    } else if (!ring) {
        own = m_grads.data() + r * kv;
        if (n > 1)
            c.reduce_scatter(m_grads.data(), m_grads.data() + r * kv, kv, dtype::Float32(),
                             comm::ReduceOp::SUM);
    }
    std::memcpy(dk.ptr<float>(), own, dims.k_floats() * sizeof(float));
    std::memcpy(dv.ptr<float>(), own + dims.k_floats(),
                dims.heads * dims.rows * dims.dv * sizeof(float));
}

// ---- the user-facing helper and the gradient rule

SymbolVarArray RingAttention::backward(SymbolVar gout, SymbolVar glse) {
    auto key = std::make_pair(gout.node(), glse.node());
    auto it = m_backward.find(key);
    if (it != m_backward.end()) return it->second;
    RingAttentionParam p = m_param;
    p.key += m_backward.empty() ? std::string(":grad") : fmt::format(":grad{}", m_backward.size());
    SymbolVar out = output(0), lse = output(1);
    SymbolVarArray inputs{input(0), input(1), input(2),
                          out,      lse,      gout.valid() ? gout : zeros_of(out)};
    if (glse.valid()) inputs.push_back(glse);
    return m_backward[key] = RingAttentionGrad::make(inputs, p, OperatorConfig::on(comp_node()));
}

SymbolVarArray ring_attention(SymbolVar q, SymbolVar k, SymbolVar v, const RingGroup& group,
                              const RingAttentionOptions& options) {
    RingAttentionParam p;
    p.key = group.key;
    p.nr_devices = group.size;
    p.rank = int32_t(group.rank);
    p.backend = group.backend;
    p.group_client = group.client;
    p.causal = options.causal;
    p.load_balance = options.load_balance;
    p.rotation = options.rotation;
    p.scale = options.scale;
    return RingAttention::make(q, k, v, std::move(p), OperatorConfig::on(q.comp_node()));
}

namespace {

VarNode* ring_attention_grad(OperatorNode& node, size_t wrt, const VarNodeArray& out_grads) {
    SymbolVar gout = out_grads[0], glse = out_grads[1];
    if (!gout.valid() && !glse.valid()) return nullptr;
    auto grads = static_cast<RingAttention&>(node).backward(gout, glse);
    return grads[wrt == GRAD_SIDE_EFFECT_ONLY ? 0 : wrt].node();
}

} // namespace

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

//! The params as recorded, with the binding's rank, world size, group client and backend.
static RingAttentionParam load_ring_param(const OprLoadContext& ctx) {
    auto p = read_param<RingAttentionParam>(ctx.params);
    const CollectiveBinding& bind = ctx.collective;
    // The layout of a rank's share of the sequence (and the graph around it) was built for
    // the recorded number of ranks: another world size would attend to the wrong positions.
    if (bind.world_size > 0 && uint32_t(bind.world_size) != p.nr_devices)
        BRAID_THROW(SerializationError,
                    "{}: ring attention \"{}\" was built for {} ranks (each holding 1/{} of the "
                    "sequence), but the model is loaded for {}; rebuild it for that many",
                    ctx.params.context(), p.key, p.nr_devices, p.nr_devices, bind.world_size);
    if (bind.rank >= 0) p.rank = bind.rank;
    if (!bind.backend.empty()) p.backend = bind.backend;
    p.group_client = binding_client(bind, ctx.params.context());
    return p;
}

static SymbolVarArray load_ring_attention(const OprLoadContext& ctx) {
    ctx.expect_inputs(3, 3);
    return RingAttention::make(ctx.input(0), ctx.input(1), ctx.input(2), load_ring_param(ctx),
                               ctx.config);
}

static SymbolVarArray load_ring_attention_grad(const OprLoadContext& ctx) {
    ctx.expect_inputs(6, 7);
    return RingAttentionGrad::make(ctx.inputs, load_ring_param(ctx), ctx.config);
}

void register_ring_attention_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("RingAttention", "ring_attention", dump_param<RingAttention>, load_ring_attention,
            /*example=*/nullptr, /*version=*/1, /*rank_dependent=*/true);
    reg.add("RingAttentionGrad", "ring_attention", dump_param<RingAttentionGrad>,
            load_ring_attention_grad,
            /*example=*/nullptr, /*version=*/1, /*rank_dependent=*/true);
    // Always run: every rank takes part in the backward ring, whatever its own inputs need.
    register_grad_rule("RingAttention", ring_attention_grad, /*always_run=*/true);
    register_non_differentiable("RingAttentionGrad",
                                "second derivatives of ring attention are not implemented");
}

} // namespace braid::opr
