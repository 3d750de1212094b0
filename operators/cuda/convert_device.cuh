// Device-side element conversions through double with the CPU rules of memory/dtype.h
// (float16/bfloat16 rounding to nearest even, integer truncation toward zero with saturation,
// NaN to 0, bool as value != 0). Included by .cu files only.
#pragma once

#include "operators/cuda/device_types.cuh"

#include <cstdint>

namespace braid::cuda {

__device__ inline double load_as_double(DtypeCode dt, const void* base, int64_t i) {
    switch (dt) {
    case DtypeCode::F32:
        return static_cast<const float*>(base)[i];
    case DtypeCode::F16:
        return half_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DtypeCode::BF16:
        return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DtypeCode::I8:
        return static_cast<const int8_t*>(base)[i];
    case DtypeCode::U8:
        return static_cast<const uint8_t*>(base)[i];
    case DtypeCode::I32:
        return static_cast<const int32_t*>(base)[i];
    case DtypeCode::I64:
        return double(static_cast<const int64_t*>(base)[i]);
    case DtypeCode::BOOL:
        return static_cast<const uint8_t*>(base)[i] ? 1.0 : 0.0;
    }
    return 0;
}

template <typename T> __device__ inline T saturate_int(double v, double lo, double hi) {
    if (v != v) return 0;
    v = trunc(v);
    if (v <= lo) return T(lo);
    if (v >= hi) return T(hi);
    return T(v);
}

//! `v` rounded (to nearest even) to `bits` significant bits, for |v| in the normal range of
//! float (memory/dtype.cpp's round_to_bits). Rounding a double straight to float16/bfloat16
//! through float would round twice: an int32 such as 2^24 + 2^16 + 1 first becomes the tie
//! 2^24 + 2^16, then rounds down.
__device__ inline double round_to_bits(double v, int bits) {
    if (!isfinite(v) || fabs(v) < 1.17549435e-38) return v;
    uint64_t u = uint64_t(__double_as_longlong(v));
    int drop = 53 - bits;
    uint64_t lsb = (u >> drop) & 1;
    u += (uint64_t(1) << (drop - 1)) - 1 + lsb;
    u &= ~((uint64_t(1) << drop) - 1);
    return __longlong_as_double((long long)u);
}

__device__ inline void store_from_double(DtypeCode dt, void* base, int64_t i, double v) {
    switch (dt) {
    case DtypeCode::F32:
        static_cast<float*>(base)[i] = float(v);
        break;
    case DtypeCode::F16:
        // Below 2^-14 float16 is subnormal with fewer bits; every value that gets there (a
        // float, a small integer) is exact in float, so one rounding through float is right.
        static_cast<uint16_t*>(base)[i] =
            float_to_half_bits(float(fabs(v) < 6.103515625e-05 ? v : round_to_bits(v, 11)));
        break;
    case DtypeCode::BF16:
        static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(float(round_to_bits(v, 8)));
        break;
    case DtypeCode::I8:
        static_cast<int8_t*>(base)[i] = saturate_int<int8_t>(v, -128.0, 127.0);
        break;
    case DtypeCode::U8:
        static_cast<uint8_t*>(base)[i] = saturate_int<uint8_t>(v, 0.0, 255.0);
        break;
    case DtypeCode::I32:
        static_cast<int32_t*>(base)[i] = saturate_int<int32_t>(v, -2147483648.0, 2147483647.0);
        break;
    case DtypeCode::I64:
        // 2^63 is the first double past INT64_MAX; the CPU saturates at the limits too.
        if (v != v)
            static_cast<int64_t*>(base)[i] = 0;
        else if (v >= 9223372036854775807.0)
            static_cast<int64_t*>(base)[i] = INT64_MAX;
        else if (v <= -9223372036854775808.0)
            static_cast<int64_t*>(base)[i] = INT64_MIN;
        else
            static_cast<int64_t*>(base)[i] = int64_t(trunc(v));
        break;
    case DtypeCode::BOOL:
        static_cast<uint8_t*>(base)[i] = v != 0;
        break;
    }
}

//! Stores int64 `v` into the float dtype `dt` with one rounding (memory/dtype.cpp's
//! convert_elements): an int64 beyond 2^53 is inexact in double, so the integer itself is
//! rounded to the target's significant bits first.
__device__ inline void store_int64_as_float(DtypeCode dt, void* base, int64_t i, int64_t v) {
    int bits = dt == DtypeCode::F32 ? 24 : dt == DtypeCode::F16 ? 11 : 8;
    uint64_t mag = v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v);
    int len = 64 - __clzll((long long)(mag | 1));
    if (len <= bits) {
        store_from_double(dt, base, i, double(v));
        return;
    }
    int drop = len - bits;
    uint64_t lsb = (mag >> drop) & 1;
    uint64_t rest = mag & ((uint64_t(1) << drop) - 1), half = uint64_t(1) << (drop - 1);
    mag >>= drop;
    if (rest > half || (rest == half && lsb)) ++mag;
    store_from_double(dt, base, i, ldexp(v < 0 ? -double(mag) : double(mag), drop));
}

} // namespace braid::cuda
