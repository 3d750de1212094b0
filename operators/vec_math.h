// Float32 math written for auto-vectorization: exp, log, tanh, sigmoid, erf and GELU as
// branch-free polynomials (Cephes-style range reduction), so that a loop calling them becomes
// SIMD code. libm's expf/logf are opaque calls and keep such loops scalar.
//
// Accuracy against libm over the whole float range: exp, log within 2 ulp; tanh, sigmoid
// within 3 ulp; erf within 5e-7 absolute. Special values follow IEEE: NaN propagates, exp
// overflows to inf and underflows to 0, log(0) = -inf, log(<0) = NaN.
// Internal to operators/: kernels include it, the public API does not.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

// Always inlined: kernels compiled for several targets must get these loops in their own ISA.
#if defined(__GNUC__)
#define VMATH_INLINE inline __attribute__((always_inline))
#else
#define VMATH_INLINE inline
#endif

namespace braid::opr::vmath {

//! 2^k for an integer-valued float k in [-126, 127], built from the exponent bits.
VMATH_INLINE float exp2_int(float k) {
    return std::bit_cast<float>(uint32_t(int32_t(k) + 127) << 23);
}

//! e^x.
VMATH_INLINE float exp(float x) {
    constexpr float hi = 88.72283935546875f, lo = -103.972084f;
    float xc = x < hi ? x : hi;
    xc = xc > lo ? xc : lo;
    // Round x*log2(e) to the nearest integer with the 1.5*2^23 trick (no libm call).
    float k = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;
    // r = x - k*ln2 in two steps, so r keeps full precision.
    float r = xc - k * 0.693359375f + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float e = p * r * r + r + 1.f;
    // Scale by 2^k in two halves: k spans [-150, 128], each half stays a normal power of 2.
    float k1 = float(int32_t(k) / 2);
    float y = e * exp2_int(k1) * exp2_int(k - k1);
    y = x > hi ? std::numeric_limits<float>::infinity() : y;
    y = x < lo ? 0.f : y;
    return x != x ? x : y;
}

//! Natural logarithm.
VMATH_INLINE float log(float x) {
    constexpr float min_normal = 1.17549435e-38f;
    // Subnormals: scale into the normal range first.
    bool sub = x < min_normal;
    float xs = sub ? x * 8388608.f : x; // 2^23
    uint32_t bits = std::bit_cast<uint32_t>(xs);
    float e = float(int32_t((bits >> 23) & 0xff) - 126) - (sub ? 23.f : 0.f);
    float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f000000u); // [0.5, 1)
    bool small = m < 0.707106781186547524f;
    e = small ? e - 1.f : e;
    m = small ? m + m - 1.f : m - 1.f;
    float z = m * m;
    float p = 7.0376836292e-2f;
    p = p * m - 1.1514610310e-1f;
    p = p * m + 1.1676998740e-1f;
    p = p * m - 1.2420140846e-1f;
    p = p * m + 1.4249322787e-1f;
    p = p * m - 1.6668057665e-1f;
    p = p * m + 2.0000714765e-1f;
    p = p * m - 2.4999993993e-1f;
    p = p * m + 3.3333331174e-1f;
    float y = p * m * z;
    y += -2.12194440e-4f * e;
    y += -0.5f * z;
    y = m + y + 0.693359375f * e;
    constexpr float inf = std::numeric_limits<float>::infinity();
    y = x == inf ? inf : y;
    y = x == 0.f ? -inf : y;
    y = x < 0.f ? std::numeric_limits<float>::quiet_NaN() : y;
    return x != x ? x : y;
}

//! Hyperbolic tangent.
VMATH_INLINE float tanh(float x) {
    float ax = x < 0.f ? -x : x;
    // Small |x|: odd polynomial; large |x|: 1 - 2/(e^{2|x|}+1), which saturates to 1.
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = p * z * x + x;
    float big = 1.f - 2.f / (exp(ax + ax) + 1.f);
    big = x < 0.f ? -big : big;
    return ax < 0.625f ? small : big;
}

//! 1 / (1 + e^-x), as e^x / (1 + e^x) for negative x so tiny results keep their precision.
VMATH_INLINE float sigmoid(float x) {
    float e = exp(x < 0.f ? x : -x);
    float s = 1.f / (1.f + e);
    return x < 0.f ? e * s : s;
}

//! The error function: a rational minimax approximation on [-4, 4]; +-1 beyond.
VMATH_INLINE float erf(float x) {
    float xc = x < 4.f ? x : 4.f;
    xc = xc > -4.f ? xc : -4.f;
    float x2 = xc * xc;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 - 2.10102402082508e-06f;
    p = p * x2 - 5.69250639462346e-05f;
    p = p * x2 - 7.34990630326855e-04f;
    p = p * x2 - 2.95459980854025e-03f;
    p = p * x2 - 1.60960333262415e-02f;
    p = p * xc;
    float q = -1.45660718464996e-05f;
    q = q * x2 - 2.13374055278905e-04f;
    q = q * x2 - 1.68282697438203e-03f;
    q = q * x2 - 7.37332916720468e-03f;
    q = q * x2 - 1.42647390514189e-02f;
    float y = p / q;
    return x != x ? x : y;
}

//! GELU, erf form: x/2 * (1 + erf(x/sqrt(2))).
VMATH_INLINE float gelu(float x) {
    return 0.5f * x * (1.f + erf(x * 0.70710678118654752f));
}

//! GELU, tanh form: x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
VMATH_INLINE float gelu_tanh(float x) {
    return 0.5f * x * (1.f + tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

} // namespace braid::opr::vmath
