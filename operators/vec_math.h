// Float32 math written for auto-vectorization: exp, log, tanh, sigmoid, erf and GELU as
// branch-free polynomials (Cephes-style range reduction), so that a loop calling them becomes
// SIMD code. libm's expf/logf are opaque calls and keep such loops scalar.
//
// Accuracy against libm over the whole float range: exp, log within 2 ulp; tanh, sigmoid
// within 3 ulp; erf within 5e-7 absolute. Special values follow IEEE: NaN propagates, exp
// overflows to inf and underflows to 0, log(0) = -inf, log(<0) = NaN.
// Internal to operators/: kernels include it, the public API does not.
#pragma once

#include "base/cpu_isa.h"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
//! Defined where the AVX2 forms below exist (x86-64 with GCC or Clang); callers select them at
//! run time with avx2_fma_supported().
#define BRAID_VMATH_AVX2 1
#endif

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

#ifdef BRAID_VMATH_AVX2
// ---- AVX2 + FMA forms: the same formulas as above, 8 floats at a time, explicit intrinsics so
// they do not depend on the auto-vectorizer. Each agrees with its scalar form to within the
// rounding differences of fused multiply-adds; special values are handled identically.

//! True when the AVX2 + FMA code below may run: the CPU has it and BRAID_MAX_CPU_ISA does not
//! cap it away (base/cpu_isa.h).
inline bool avx2_fma_supported() {
    return cpu_isa_at_least(CpuIsa::AVX2);
}

//! Outputs of at least this many bytes are written with non-temporal (streaming) stores by the
//! AVX2 kernels: they would not stay in cache for the next operator anyway, and streaming
//! saves the read of each output line that a normal store makes before writing it.
constexpr size_t STREAM_MIN_BYTES = size_t(16) << 20;

#define VMATH_AVX2 inline __attribute__((always_inline, target("avx2,fma")))

//! e^x for 8 floats; see exp().
VMATH_AVX2 __m256 exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.72283935546875f), lo = _mm256_set1_ps(-103.972084f);
    // max/min return their second operand for a NaN x, so xc stays finite; NaN is put back last.
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 k = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fmadd_ps(k, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 e = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    // 2^k in two halves (k in [-150, 128]); each half is a normal power of two.
    __m256i ki = _mm256_cvtps_epi32(k);
    __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(e, s1), s2);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                         _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    y = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y);
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

//! e^x for 8 floats x <= 0 (softmax's x - max), cheaper than exp8: results below e^-87
//! (1.6e-38, near the smallest normal float) flush to 0, so no step ever makes a subnormal
//! (which would cost a slow microcode assist per lane), and a degree-5 minimax polynomial
//! replaces the degree-7 one: at most 2 ulp from e^x over [-87, 0], checked against double for
//! every float there. NaN stays NaN; -inf gives 0. x > 0 is outside its range.
VMATH_AVX2 __m256 exp8_nonpositive(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.f);
    __m256 keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ); // true for NaN
    x = _mm256_max_ps(lo, x);                        // returns x when x is NaN
    // t = 1.5 * 2^23 + 127 + round(x / ln 2): its low mantissa bits hold the biased exponent
    // of 2^k, which the shift moves into place; k >= -126 here, so 2^k is a normal float.
    const __m256 magic = _mm256_set1_ps(0x1.8000FEp23f);
    __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p0f), magic);
    __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23));
    __m256 k = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-0x1.62E400p-1f), x); // ln 2 in two parts
    r = _mm256_fmadd_ps(k, _mm256_set1_ps(-0x1.7F7D1Cp-20f), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0F9F9Cp-7f), r, _mm256_set1_ps(0x1.573A1Ap-5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.555A80p-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.FFFDC6p-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.FFFFF6p-1f));
    // e^x = 2^k (1 + r p(r)); 1 + r p is in [0.7, 1.42], so the product is a normal float.
    __m256 y = _mm256_mul_ps(_mm256_fmadd_ps(r, p, _mm256_set1_ps(1.f)), scale);
    return _mm256_and_ps(keep, y);
}

//! erf for 8 floats without the NaN fix-up (a NaN x gives erf(-4)); see erf().
VMATH_AVX2 __m256 erf8_finite(__m256 x) {
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-4.f)), _mm256_set1_ps(4.f));
    __m256 x2 = _mm256_mul_ps(xc, xc);
    __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.77068142495902e-08f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02f));
    p = _mm256_mul_ps(p, xc);
    __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-2.13374055278905e-04f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02f));
    return _mm256_div_ps(p, q);
}

//! erf for 8 floats; see erf().
VMATH_AVX2 __m256 erf8(__m256 x) {
    return _mm256_blendv_ps(erf8_finite(x), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

//! tanh for 8 floats; see tanh().
VMATH_AVX2 __m256 tanh8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    const __m256 one = _mm256_set1_ps(1.f);
    __m256 big = _mm256_sub_ps(
        one, _mm256_div_ps(_mm256_set1_ps(2.f), _mm256_add_ps(exp8(_mm256_add_ps(ax, ax)), one)));
    big = _mm256_or_ps(big, _mm256_and_ps(sign, x)); // big >= 0: copy the sign of x
    // NaN compares false and takes the `big` branch, which is NaN too.
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

//! GELU, erf form, for 8 floats; see gelu(). (A NaN x reaches the result through the factor x.)
VMATH_AVX2 __m256 gelu8(__m256 x) {
    __m256 e = erf8_finite(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                         _mm256_add_ps(_mm256_set1_ps(1.f), e));
}

//! GELU, tanh form, for 8 floats; see gelu_tanh(). Computed as x * sigmoid(2u) with
//! u = sqrt(2/pi) (x + 0.044715 x^3), which equals x/2 (1 + tanh u) and avoids both tanh's two
//! branches and the cancellation in 1 + tanh u for negative x: with e = e^{-2|u|} <= 1 (one
//! exp8_nonpositive), sigmoid(2u) = 1 / (1 + e) for u >= 0 and e / (1 + e) for u < 0. Its
//! relative error is what the float rounding of 2u makes of e^{2u} (about |2u| * 2^-22) plus a
//! few ulp, for x < 0 too, where 1 + tanh u in float loses every digit.
VMATH_AVX2 __m256 gelu_tanh8(__m256 x) {
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 z = _mm256_mul_ps(_mm256_set1_ps(2.f * 0.79788456080286536f),
                             _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    const __m256 sign = _mm256_set1_ps(-0.f);
    __m256 e = exp8_nonpositive(_mm256_or_ps(z, sign)); // e^{-|z|}
    __m256 s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e));
    // z < 0: multiply by e. NaN x stays NaN on either side.
    return _mm256_blendv_ps(s, _mm256_mul_ps(s, e), z);
}
#undef VMATH_AVX2
#endif

} // namespace braid::opr::vmath
