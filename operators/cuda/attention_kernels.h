// Launch interface of the attention CUDA kernel (operators/cuda/attention.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! What launch_attention did.
enum class AttentionStatus : int {
    OK,
    BAD_DTYPE, //!< q/k/v/out are not float32, float16 or bfloat16
    TOO_LARGE, //!< head dims too large for one block's shared memory
};

/*!
 * Enqueues scaled dot-product attention for `bh` (batch, head) pairs of contiguous
 * q [bh, sq, d], k [bh, sk, d], v [bh, sk, dv] (dtype code `dtype`, computed in float32):
 * out [bh, sq, dv] (same dtype) and lse [bh, sq] (float32). With `causal`, query i sees keys
 * j <= i + sk - sq; a query that sees no key gets out = 0 and lse = -inf.
 */
AttentionStatus launch_attention(int dtype, const void* q, const void* k, const void* v, void* out,
                                 float* lse, int64_t bh, int64_t sq, int64_t sk, int d, int dv,
                                 float scale, bool causal, cudaStream_t stream);

} // namespace braid::cuda
