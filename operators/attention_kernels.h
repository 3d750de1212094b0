// The CPU kernels of attention in float32, shared by Attention (one rank) and RingAttention
// (key blocks rotating over ranks): a forward pass that writes out and lse, and a backward pass
// that recomputes the probabilities from the final lse (as flash attention does) and
// accumulates dq, dk and dv.
//
// Both work on `heads` independent (batch, head) slices. Within a slice, rows are contiguous
// (q and k rows hold D floats, v, out and dout rows Dv floats); slices are `HeadStrides` floats
// apart, so a kernel can run on a range of rows of a larger tensor (the second half of a
// rank's queries) or on a block packed in a transfer buffer.
//
// Masking: with `causal`, the last query aligns with the last key: query i of the block sees
// key j iff j <= i + Sk − Sq. A query that sees no key gives out = 0 and lse = −inf.
#pragma once

#include <cstddef>

namespace braid::opr::kern {

struct AttentionGeometry {
    size_t sq = 0, sk = 0, d = 0, dv = 0; //!< queries, keys, head dim of q/k, head dim of v
    float scale = 1.f;                    //!< multiplies q·k
    bool causal = false;
};

//! Floats between consecutive (batch, head) slices of each operand.
struct HeadStrides {
    size_t q = 0, k = 0, v = 0, out = 0, lse = 0;
    //! The strides of contiguous [heads, S, ·] tensors.
    static HeadStrides contiguous(const AttentionGeometry& g) {
        return {g.sq * g.d, g.sk * g.d, g.sk * g.dv, g.sq * g.dv, g.sq};
    }
};

//! out[h] = softmax(scale · q[h] k[h]ᵀ) v[h] and lse[h] = its log-sum-exp, for every head h,
//! in parallel on the kernel pool (online softmax over blocks of keys).
void attention_forward(const AttentionGeometry& g, size_t heads, const HeadStrides& st,
                       const float* q, const float* k, const float* v, float* out, float* lse);

/*!
 * Accumulates the gradients of one block into dq, dk and dv (same strides as q, k and v):
 *     p  = exp(scale · q kᵀ − lse)     (lse: the final log-sum-exp over every key block)
 *     dv += pᵀ dout,   ds = p ⊙ (dout vᵀ − delta),   dq += scale · ds k,   dk += scale · dsᵀ q
 * where delta[i] = Σ dout[i] ⊙ out[i] − dlse[i] (attention_delta()). dout has out's strides,
 * delta lse's. Heads run in parallel on the kernel pool.
 */
void attention_backward(const AttentionGeometry& g, size_t heads, const HeadStrides& st,
                        const float* q, const float* k, const float* v, const float* lse,
                        const float* dout, const float* delta, float* dq, float* dk, float* dv);

//! delta[h, i] = Σ_c dout[h, i, c] · out[h, i, c] − (dlse ? dlse[h, i] : 0) over contiguous
//! [heads, rows, dv] tensors.
void attention_delta(size_t heads, size_t rows, size_t dv, const float* out, const float* dout,
                     const float* dlse, float* delta);

/*!
 * Merges a block's (out_b, lse_b) into the running (out, lse) of `rows` query rows, in the
 * overflow-safe form
 *     out ← out − sigmoid(lse_b − lse) · (out − out_b),   lse ← lse − log(sigmoid(lse − lse_b)).
 * A side with lse = −inf (no visible key yet) has no weight.
 */
void attention_merge(size_t rows, size_t dv, float* out, float* lse, const float* out_b,
                     const float* lse_b);

} // namespace braid::opr::kern
