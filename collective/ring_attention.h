// Context-parallel ring attention: N ranks each hold 1/N of a long sequence's queries, keys
// and values, and attend their queries to every rank's key/value block as the blocks rotate
// around the ring; the partial results merge through their log-sum-exp.
//
// Layout. With load balancing (the default; the zigzag or head-tail layout) the sequence is
// cut into 2N chunks and rank r holds chunks r and 2N−1−r, in that order, so every rank has
// the same share of a causal mask's work. S = 8, N = 2: rank 0 holds positions 0,1,6,7 and
// rank 1 holds 2,3,4,5. Without it, rank r holds chunk r of N. parallel/context_parallel.h
// lays a tensor out either way and restores it.
//
// Steps. At step i rank r attends to the block of rank src = (r − i) mod N:
//   - not causal: every step, all local queries against the whole block;
//   - causal, balanced: step 0 is the local block with the causal mask; steps with src < r
//     attend all local queries to the first half of the block (its earlier chunk) unmasked;
//     steps with src > r attend the second half of the queries (the later local chunk) to the
//     whole block unmasked, changing only the second half of out and lse;
//   - causal, unbalanced: step 0 causal, steps with src < r whole and unmasked, others skipped.
// Each step's (out_b, lse_b) merges into (out, lse) in float32, in the overflow-safe form
//   out ← out − sigmoid(lse_b − lse) · (out − out_b),   lse ← lse − log(sigmoid(lse − lse_b)).
//
// Rotation. RING passes each block to rank r + 1 at every step, on a communication thread
// while the current block is computed (two block buffers per rank). ALL_GATHER gathers every
// block once up front (N block buffers), then reads block src at step i.
//
// Backward (RingAttentionGrad). Each block is recomputed with the final out and lse (the
// probabilities are exact, no second merge): dq accumulates locally in float32; with RING the
// dk and dv of a block travel with it around a second ring, each rank adding its share, and
// are back at their owner after N hops; with ALL_GATHER they are reduce-scattered at the end.
//
// Memory per rank: the outputs (1/N of single-rank attention's), two blocks (RING) or N
// blocks (ALL_GATHER) of k and v, one block's out and lse; nothing of size S × S.
//
// Shapes: q, k [B, H, S/N, D], v [B, H, S/N, Dv] float32 on every rank → out [B, H, S/N, Dv],
// lse [B, H, S/N]. The ranks meet through the group manager under `key` (the backward under
// key + ":grad") on any CPU backend; every transfer ends at the backend's deadline. No CUDA
// kernel yet: on a CUDA comp node execution fails with a clear error.
#pragma once

#include "comm/group_client.h"
#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

#include <map>
#include <memory>
#include <optional>

namespace braid::comm {
class Communicator;
}

namespace braid::opr {

//! How key/value blocks reach every rank.
enum class RingRotation : uint8_t { ALL_GATHER, RING };
//! "ALL_GATHER", "RING".
const char* ring_rotation_name(RingRotation rotation);

struct RingAttentionParam {
    std::string key;               //!< shared by the N ranks
    uint32_t nr_devices = 1;       //!< N
    int32_t rank = -1;             //!< this rank (required)
    std::string backend = "local"; //!< "local", "mpi", "gloo", ...
    bool causal = false;
    bool load_balance = true; //!< zigzag layout (see the file comment)
    RingRotation rotation = RingRotation::RING;
    std::optional<float> scale = std::nullopt;       //!< unset: 1 / sqrt(D)
    std::shared_ptr<comm::GroupClient> group_client; //!< set at run time, never stored
    static constexpr auto fields() {
        using P = RingAttentionParam;
        return std::tuple{param_field("key", &P::key),
                          param_field("nr_devices", &P::nr_devices),
                          param_field("rank", &P::rank),
                          param_field("backend", &P::backend),
                          param_field("causal", &P::causal),
                          param_field("load_balance", &P::load_balance),
                          param_field("rotation", &P::rotation, ring_rotation_name),
                          param_field("scale", &P::scale)};
    }
};

//! Common part of the forward and backward operators: the group and its communication thread.
class RingAttentionBase : public ParamOperator<RingAttentionBase, RingAttentionParam> {
public:
    ~RingAttentionBase() override;
    //! Never merged: each one is its own exchange around the ring.
    bool allow_dedup() const override { return false; }
    std::string peer_group() const override { return m_param.key; }
    ValueInference value_inference() const override { return ValueInference::NONE; }

    class Lane; //!< the communication thread (ring_attention.cpp)

protected:
    RingAttentionBase(RingAttentionParam param, const OperatorConfig& config);
    //! Checks q, k, v (float32, 4-D, agreeing; a sequence the layout can split).
    void check_qkv(const TensorShape& q, const TensorShape& k, const TensorShape& v) const;
    //! Joins the group on first use.
    comm::Communicator& communicator();
    Lane& lane();

    std::shared_ptr<comm::Communicator> m_comm;
    std::unique_ptr<Lane> m_lane;
};

//! Outputs {out, lse} of this rank's queries against the whole sequence.
class RingAttention final : public RingAttentionBase {
public:
    RingAttention(VarNode* q, VarNode* k, VarNode* v, RingAttentionParam param,
                  const OperatorConfig& config);
    static SymbolVarArray make(SymbolVar q, SymbolVar k, SymbolVar v, RingAttentionParam param,
                               const OperatorConfig& config = {});

    const char* type_name() const override { return "RingAttention"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
    //! {dq, dk, dv} from the gradients of out and lse (either may be invalid): one
    //! RingAttentionGrad per pair, shared by the gradient rule's calls for q, k and v.
    SymbolVarArray backward(SymbolVar gout, SymbolVar glse);

private:
    std::vector<float> m_blocks, m_block_out, m_block_lse;
    std::map<std::pair<VarNode*, VarNode*>, SymbolVarArray> m_backward;
};

//! Inputs q, k, v, out, lse, dout [, dlse]; outputs {dq, dk, dv}.
class RingAttentionGrad final : public RingAttentionBase {
public:
    RingAttentionGrad(const VarNodeArray& inputs, RingAttentionParam param,
                      const OperatorConfig& config);
    static SymbolVarArray make(const SymbolVarArray& inputs, RingAttentionParam param,
                               const OperatorConfig& config = {});

    const char* type_name() const override { return "RingAttentionGrad"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;

private:
    std::vector<float> m_blocks, m_grads, m_delta;
};

//! The options of ring_attention().
struct RingAttentionOptions {
    bool causal = false;
    RingRotation rotation = RingRotation::RING;
    bool load_balance = true;
    std::optional<float> scale = std::nullopt;
};

//! A group of ranks that ring_attention() runs over.
struct RingGroup {
    std::string key; //!< unique per call site; equal on every rank
    uint32_t size = 1;
    uint32_t rank = 0;
    std::shared_ptr<comm::GroupClient> client = nullptr;
    std::string backend = "local";
};

//! {out, lse} of this rank's shard of q against every rank's k and v (see the file comment).
SymbolVarArray ring_attention(SymbolVar q, SymbolVar k, SymbolVar v, const RingGroup& group,
                              const RingAttentionOptions& options = {});

} // namespace braid::opr
