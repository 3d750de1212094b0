// Device-side element types for braid's CUDA kernels: storage type, compute type and the
// conversions between them, matching the CPU rules of memory/dtype.h (float16 and bfloat16
// compute in float32 and round to nearest even on store). Included by .cu files only; it
// includes no braid host headers so that nvcc stays fast.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! Element type codes, in the order of braid::DTypeEnum (the glue checks this).
enum class DtypeCode : int { F32, F16, BF16, I8, U8, I32, I64, BOOL };

__device__ __forceinline__ float half_bits_to_float(uint16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ uint16_t float_to_half_bits(float f) {
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) {
    return __uint_as_float(uint32_t(b) << 16);
}
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
    uint16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

//! Storage traits: S is what memory holds, C what kernels compute in.
struct F32 {
    using S = float;
    using C = float;
    static constexpr bool IS_FLOAT = true;
    __device__ static C load(S v) { return v; }
    __device__ static S store(C v) { return v; }
};
struct F16 {
    using S = uint16_t;
    using C = float;
    static constexpr bool IS_FLOAT = true;
    __device__ static C load(S v) { return half_bits_to_float(v); }
    __device__ static S store(C v) { return float_to_half_bits(v); }
};
struct BF16 {
    using S = uint16_t;
    using C = float;
    static constexpr bool IS_FLOAT = true;
    __device__ static C load(S v) { return bf16_bits_to_float(v); }
    __device__ static S store(C v) { return float_to_bf16_bits(v); }
};
struct I32 {
    using S = int32_t;
    using C = int32_t;
    static constexpr bool IS_FLOAT = false;
    __device__ static C load(S v) { return v; }
    __device__ static S store(C v) { return v; }
};
struct I64 {
    using S = int64_t;
    using C = int64_t;
    static constexpr bool IS_FLOAT = false;
    __device__ static C load(S v) { return v; }
    __device__ static S store(C v) { return v; }
};

//! Blocks for a grid-stride loop over `n` items: enough to fill the device, at most `cap`.
inline unsigned grid_blocks(int64_t n, int threads, int64_t cap) {
    int64_t b = (n + threads - 1) / threads;
    if (b > cap) b = cap;
    return unsigned(b < 1 ? 1 : b);
}

} // namespace braid::cuda
