// Warp and block reductions shared by the CUDA kernels that reduce rows (normalization,
// attention). Included by .cu files only.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>

namespace braid::cuda {

struct SumF {
    __device__ static float identity() { return 0.f; }
    __device__ static float apply(float a, float b) { return a + b; }
};
//! Maximum that ignores NaN operands unless both are NaN: a thread's running maximum
//! `v > m ? v : m` starting at -inf never holds NaN, so reductions of such partial maxima are
//! order-independent.
struct MaxF {
    __device__ static float identity() { return -INFINITY; }
    __device__ static float apply(float a, float b) { return b > a ? b : a; }
};

//! Reduces `v` over the 32 lanes of the warp; every lane gets the result.
template <typename Op> __device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v = Op::apply(v, __shfl_xor_sync(~0u, v, off));
    return v;
}

/*!
 * Reduces `v` over the whole block (blockDim.x a multiple of 32, at most 1024); every thread
 * gets the result. `smem` holds 32 floats; every thread of the block must call it (it
 * synchronises the block, also before reusing `smem`).
 */
template <typename Op> __device__ __forceinline__ float block_reduce(float v, float* smem) {
    v = warp_reduce<Op>(v);
    int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    __syncthreads(); // an earlier call may still be reading smem
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = lane < int(blockDim.x / 32) ? smem[lane] : Op::identity();
    return warp_reduce<Op>(v);
}

} // namespace braid::cuda
