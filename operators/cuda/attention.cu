// The attention CUDA kernel: one warp per query row, keys visited 32 at a time with an online
// (running maximum) softmax, everything in float32.
//
// Per tile of 32 keys each lane computes one score (the dot product of the row's query, kept in
// shared memory, with its key); the warp takes the tile's maximum, rescales the running sum and
// the output accumulator (shared memory, Dv floats) when the maximum grows, and adds the tile's
// weighted values, lanes striding over the value columns (coalesced reads of v). A straightforward
// kernel: correct for every shape, not tuned (no tensor cores, no tiling of the queries).
#include "base/cuda_check.h"
#include "operators/cuda/attention_kernels.h"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/reduce_util.cuh"

namespace braid::cuda {

namespace {

//! Floats of shared memory one warp needs: the query row, the output accumulator and the
//! tile's 32 weights.
__host__ __device__ inline size_t warp_smem_floats(int d, int dv) {
    return size_t(d) + size_t(dv) + 32;
}

template <typename Tr>
__global__ void attention_kernel(const typename Tr::S* q, const typename Tr::S* k,
                                 const typename Tr::S* v, typename Tr::S* out, float* lse,
                                 int64_t rows, int64_t sq, int64_t sk, int d, int dv, float scale,
                                 bool causal) {
    using S = typename Tr::S;
    extern __shared__ float smem[];
    int warps = int(blockDim.x) / 32, warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    float* qs = smem + size_t(warp) * warp_smem_floats(d, dv);
    float* acc = qs + d;
    float* ps = acc + dv;
    for (int64_t row = int64_t(blockIdx.x) * warps + warp; row < rows;
         row += int64_t(gridDim.x) * warps) {
        int64_t bh = row / sq, i = row % sq;
        const S* kb = k + bh * sk * d;
        const S* vb = v + bh * sk * dv;
        for (int c = lane; c < d; c += 32) qs[c] = Tr::load(q[row * d + c]);
        for (int c = lane; c < dv; c += 32) acc[c] = 0.f;
        __syncwarp();
        // Query i sees keys j < i + 1 + (sk - sq) when causal (clamped to [0, sk]).
        int64_t end = sk;
        if (causal) {
            int64_t e = i + 1 + sk - sq;
            end = e < 0 ? 0 : e > sk ? sk : e;
        }
        float m = -INFINITY, l = 0.f;
        for (int64_t j0 = 0; j0 < end; j0 += 32) {
            int64_t j = j0 + lane;
            float s = -INFINITY;
            if (j < end) {
                const S* kr = kb + j * d;
                float dot = 0.f;
                for (int c = 0; c < d; ++c) dot += qs[c] * Tr::load(kr[c]);
                s = d > 0 ? dot * scale : 0.f; // D = 0: a GEMM of depth 0 gives 0 (scale is inf)
            }
            float m_new = warp_reduce<MaxF>(s);
            m_new = m_new > m ? m_new : m;
            // Guards keep -inf - -inf (NaN) out when every score so far is -inf.
            float alpha = m == -INFINITY ? 0.f : expf(m - m_new);
            float p = s == -INFINITY ? 0.f : expf(s - m_new);
            l = l * alpha + warp_reduce<SumF>(p);
            ps[lane] = p;
            __syncwarp();
            int tile = end - j0 < 32 ? int(end - j0) : 32;
            for (int c = lane; c < dv; c += 32) {
                float a = acc[c] * alpha;
                const S* vc = vb + j0 * dv + c;
                for (int t = 0; t < tile; ++t) a += ps[t] * Tr::load(vc[int64_t(t) * dv]);
                acc[c] = a;
            }
            m = m_new;
            __syncwarp(); // ps is rewritten by the next tile
        }
        // No visible key: out stays 0 and the log of an empty sum is -inf.
        float inv = l > 0.f ? 1.f / l : 0.f;
        for (int c = lane; c < dv; c += 32) out[row * dv + c] = Tr::store(acc[c] * inv);
        if (lane == 0) lse[row] = l > 0.f ? m + logf(l) : -INFINITY;
        __syncwarp(); // qs and acc are rewritten by the next row
    }
}

template <typename Tr>
AttentionStatus attention_typed(const void* q, const void* k, const void* v, void* out, float* lse,
                                int64_t bh, int64_t sq, int64_t sk, int d, int dv, float scale,
                                bool causal, cudaStream_t stream) {
    using S = typename Tr::S;
    constexpr size_t DEFAULT_SMEM = 48 * 1024;
    size_t per_warp = warp_smem_floats(d, dv) * sizeof(float);
    int warps = 4;
    while (warps > 1 && size_t(warps) * per_warp > DEFAULT_SMEM) warps /= 2;
    size_t smem = size_t(warps) * per_warp;
    auto kernel = attention_kernel<Tr>;
    if (smem > DEFAULT_SMEM) {
        // Large head dims: opt in to the device's larger shared memory per block.
        int device = 0, optin = 0;
        BRAID_CUDA_CHECK(cudaGetDevice(&device));
        BRAID_CUDA_CHECK(
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        if (smem > size_t(optin)) return AttentionStatus::TOO_LARGE;
        BRAID_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    }
    int64_t rows = bh * sq;
    kernel<<<grid_blocks(rows, warps, 65535), warps * 32, smem, stream>>>(
        static_cast<const S*>(q), static_cast<const S*>(k), static_cast<const S*>(v),
        static_cast<S*>(out), lse, rows, sq, sk, d, dv, scale, causal);
    BRAID_CUDA_CHECK(cudaGetLastError());
    return AttentionStatus::OK;
}

} // namespace

AttentionStatus launch_attention(int dtype, const void* q, const void* k, const void* v, void* out,
                                 float* lse, int64_t bh, int64_t sq, int64_t sk, int d, int dv,
                                 float scale, bool causal, cudaStream_t stream) {
    switch (DtypeCode(dtype)) {
    case DtypeCode::F32:
    case DtypeCode::F16:
    case DtypeCode::BF16:
        break;
    default:
        return AttentionStatus::BAD_DTYPE;
    }
    if (bh * sq == 0) return AttentionStatus::OK;
    switch (DtypeCode(dtype)) {
    case DtypeCode::F32:
        return attention_typed<F32>(q, k, v, out, lse, bh, sq, sk, d, dv, scale, causal, stream);
    case DtypeCode::F16:
        return attention_typed<F16>(q, k, v, out, lse, bh, sq, sk, d, dv, scale, causal, stream);
    default:
        return attention_typed<BF16>(q, k, v, out, lse, bh, sq, sk, d, dv, scale, causal, stream);
    }
}

} // namespace braid::cuda
