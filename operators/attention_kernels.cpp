#include "operators/attention_kernels.h"

#include "base/thread_pool.h"
#include "operators/dense_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace braid::opr::kern {

namespace {

//! Most rows of queries per task, and keys per step of the online softmax. A task's score
//! block (at most QUERY_BLOCK x KEY_BLOCK floats, 256 KiB) stays in L2 between the two GEMMs.
//! 128 x 512 measured best for D = 64 among 32..256 x 256..2048 (OpenBLAS runs these GEMMs
//! at about 80% of its large-GEMM rate).
constexpr size_t QUERY_BLOCK = 128;
constexpr size_t KEY_BLOCK = 512;
//! Fewest rows per task when query blocks are narrowed to give every thread work.
constexpr size_t MIN_QUERY_BLOCK = 32;
//! The backward pass's tiles: two QUERY_TILE x KEY_TILE float blocks (p and dp) per thread.
constexpr size_t QUERY_TILE = 64;
constexpr size_t KEY_TILE = 256;

constexpr float NINF = -std::numeric_limits<float>::infinity();

//! One past the last key query `row` (of the block) sees.
size_t visible_end(const AttentionGeometry& g, size_t row) {
    if (!g.causal) return g.sk;
    ptrdiff_t e = ptrdiff_t(row) + 1 + ptrdiff_t(g.sk) - ptrdiff_t(g.sq);
    return size_t(std::clamp<ptrdiff_t>(e, 0, ptrdiff_t(g.sk)));
}

/*!
 * One block of query rows [q0, q0 + rows) of one (batch, head): writes out rows (Dv each) and
 * lse. Keys are visited KEY_BLOCK at a time; per row the running max m and running sum l of
 * exp(s − m) are kept, and the output accumulator is rescaled whenever m grows.
 */
void forward_rows(const AttentionGeometry& g, const float* q, const float* k, const float* v,
                  size_t q0, size_t rows, float* out, float* lse, float* scores, float* row_max,
                  float* row_sum) {
    size_t key_end = visible_end(g, q0 + rows - 1); // the last row sees the most keys
    std::fill(out, out + rows * g.dv, 0.f);
    std::fill(row_max, row_max + rows, NINF);
    std::fill(row_sum, row_sum + rows, 0.f);
    for (size_t k0 = 0; k0 < key_end; k0 += KEY_BLOCK) {
        size_t kn = std::min(KEY_BLOCK, key_end - k0);
        sgemm(false, true, rows, kn, g.d, g.scale, q, g.d, k + k0 * g.d, g.d, 0.f, scores, kn);
        for (size_t r = 0; r < rows; ++r) {
            float* s = scores + r * kn;
            size_t end = visible_end(g, q0 + r);
            size_t vis = std::min(kn, end - std::min(end, k0));
            if (vis < kn) std::fill(s + vis, s + kn, 0.f); // masked keys weigh nothing
            if (vis == 0) continue;
            float m_old = row_max[r];
            float m_new = std::max(m_old, kern::row_max(s, vis));
            float sum = row_exp_sum(s, vis, m_new);
            if (m_old != NINF && m_new != m_old) {
                float alpha = std::exp(m_old - m_new);
                row_sum[r] *= alpha;
                row_scale(out + r * g.dv, g.dv, alpha);
            }
            row_sum[r] += sum;
            row_max[r] = m_new;
        }
        sgemm(false, false, rows, g.dv, kn, 1.f, scores, kn, v + k0 * g.dv, g.dv, 1.f, out, g.dv);
    }
    for (size_t r = 0; r < rows; ++r) {
        if (row_sum[r] > 0.f) {
            row_scale(out + r * g.dv, g.dv, 1.f / row_sum[r]);
            lse[r] = row_max[r] + std::log(row_sum[r]);
        } else {
            lse[r] = NINF; // no visible key: out stays 0, the log of an empty sum
        }
    }
}

//! The backward pass of one (batch, head): every query tile against every visible key tile.
void backward_head(const AttentionGeometry& g, const float* q, const float* k, const float* v,
                   const float* lse, const float* dout, const float* delta, float* dq, float* dk,
                   float* dv, float* p, float* dp) {
    for (size_t q0 = 0; q0 < g.sq; q0 += QUERY_TILE) {
        size_t rows = std::min(QUERY_TILE, g.sq - q0);
        size_t key_end = visible_end(g, q0 + rows - 1);
        for (size_t k0 = 0; k0 < key_end; k0 += KEY_TILE) {
            size_t kn = std::min(KEY_TILE, key_end - k0);
            sgemm(false, true, rows, kn, g.d, g.scale, q + q0 * g.d, g.d, k + k0 * g.d, g.d, 0.f, p,
                  kn);
            sgemm(false, true, rows, kn, g.dv, 1.f, dout + q0 * g.dv, g.dv, v + k0 * g.dv, g.dv,
                  0.f, dp, kn);
            for (size_t r = 0; r < rows; ++r) {
                float* pr = p + r * kn;
                float* dpr = dp + r * kn;
                float l = lse[q0 + r], dl = delta[q0 + r];
                size_t end = visible_end(g, q0 + r);
                size_t vis = std::min(kn, end - std::min(end, k0));
                if (l == NINF) vis = 0; // a row that sees no key anywhere has p = 0
                for (size_t c = 0; c < vis; ++c) {
                    float pv = std::exp(pr[c] - l);
                    pr[c] = pv;
                    dpr[c] = pv * (dpr[c] - dl);
                }
                std::fill(pr + vis, pr + kn, 0.f);
                std::fill(dpr + vis, dpr + kn, 0.f);
            }
            // dv += pᵀ dout, dq += scale ds k, dk += scale dsᵀ q (dp now holds ds).
            sgemm(true, false, kn, g.dv, rows, 1.f, p, kn, dout + q0 * g.dv, g.dv, 1.f,
                  dv + k0 * g.dv, g.dv);
            sgemm(false, false, rows, g.d, kn, g.scale, dp, kn, k + k0 * g.d, g.d, 1.f,
                  dq + q0 * g.d, g.d);
            sgemm(true, false, kn, g.d, rows, g.scale, dp, kn, q + q0 * g.d, g.d, 1.f,
                  dk + k0 * g.d, g.d);
        }
    }
}

} // namespace

void attention_forward(const AttentionGeometry& g, size_t heads, const HeadStrides& st,
                       const float* q, const float* k, const float* v, float* out, float* lse) {
    if (heads == 0 || g.sq == 0) return;
    // Narrow the query blocks while there are fewer than two tasks per thread.
    size_t qblock = QUERY_BLOCK;
    while (qblock > MIN_QUERY_BLOCK &&
           heads * ((g.sq + qblock - 1) / qblock) < 2 * kernel_threads())
        qblock /= 2;
    size_t qblocks = (g.sq + qblock - 1) / qblock;
    blas_single_thread();
    parallel_for(heads * qblocks, 1, [&](size_t begin, size_t end) {
        // Scratch kept per thread across runs (no page faults from fresh allocations), sized
        // by this geometry's blocks: a short sequence does not hold a whole 256 KiB block.
        thread_local std::vector<float> scratch;
        size_t kblock = std::min(KEY_BLOCK, g.sk);
        size_t need = qblock * kblock + 2 * qblock;
        if (scratch.size() < need) scratch.resize(need);
        float* scores = scratch.data();
        float* row_max = scores + qblock * kblock;
        float* row_sum = row_max + qblock;
        for (size_t t = begin; t < end; ++t) {
            size_t h = t / qblocks, q0 = (t % qblocks) * qblock;
            size_t rows = std::min(qblock, g.sq - q0);
            forward_rows(g, q + h * st.q + q0 * g.d, k + h * st.k, v + h * st.v, q0, rows,
                         out + h * st.out + q0 * g.dv, lse + h * st.lse + q0, scores, row_max,
                         row_sum);
        }
    });
}

void attention_backward(const AttentionGeometry& g, size_t heads, const HeadStrides& st,
                        const float* q, const float* k, const float* v, const float* lse,
                        const float* dout, const float* delta, float* dq, float* dk, float* dv) {
    if (heads == 0 || g.sq == 0 || g.sk == 0) return;
    blas_single_thread();
    parallel_for(heads, 1, [&](size_t begin, size_t end) {
        thread_local std::vector<float> scratch;
        size_t tile = std::min(QUERY_TILE, g.sq) * std::min(KEY_TILE, g.sk);
        if (scratch.size() < 2 * tile) scratch.resize(2 * tile);
        for (size_t h = begin; h < end; ++h)
            backward_head(g, q + h * st.q, k + h * st.k, v + h * st.v, lse + h * st.lse,
                          dout + h * st.out, delta + h * st.lse, dq + h * st.q, dk + h * st.k,
                          dv + h * st.v, scratch.data(), scratch.data() + tile);
    });
}

void attention_delta(size_t heads, size_t rows, size_t dv, const float* out, const float* dout,
                     const float* dlse, float* delta) {
    parallel_for(heads * rows, 256, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) {
            const float* o = out + i * dv;
            const float* d = dout + i * dv;
            float sum = 0.f;
            for (size_t c = 0; c < dv; ++c) sum += o[c] * d[c];
            delta[i] = sum - (dlse ? dlse[i] : 0.f);
        }
    });
}

void attention_merge(size_t rows, size_t dv, float* out, float* lse, const float* out_b,
                     const float* lse_b) {
    auto sigmoid = [](float x) {
        if (x >= 0.f) return 1.f / (1.f + std::exp(-x));
        float e = std::exp(x);
        return e / (1.f + e);
    };
    auto log_sigmoid = [](float x) { // log(sigmoid(x)) without underflow
        return x >= 0.f ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x));
    };
    for (size_t i = 0; i < rows; ++i) {
        float lb = lse_b[i], l = lse[i];
        float* o = out + i * dv;
        const float* ob = out_b + i * dv;
        if (lb == NINF) continue;
        if (l == NINF) {
            std::copy(ob, ob + dv, o);
            lse[i] = lb;
            continue;
        }
        float w = sigmoid(lb - l);
        for (size_t c = 0; c < dv; ++c) o[c] -= w * (o[c] - ob[c]);
        lse[i] = l - log_sigmoid(l - lb);
    }
}

} // namespace braid::opr::kern
