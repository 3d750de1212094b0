// Vector types for kernels written once over `Vec` and compiled once per instruction set:
// simd::Avx512 (16 floats) and simd::Avx2 (8 floats, with FMA), and the target regions that
// compile a kernel's code for one set (BRAID_TARGET_REGION("avx512f") ... _END). A kernel file
// opens a region per set, names that set's type `Vec` and includes its kernels there; the
// caller picks the set at run time (base/cpu_isa.h). Internal to operators/.
#pragma once

#include <immintrin.h>

#include <cstddef>

// A target region: every function declared in it, templates included, is compiled for `isa`.
#if defined(__clang__)
#define BRAID_TARGET_REGION(isa)                                                                   \
    _Pragma("clang attribute push")                                                                \
        BRAID_PRAGMA(clang attribute(__attribute__((target(isa))), apply_to = function))
#define BRAID_TARGET_REGION_END _Pragma("clang attribute pop")
#else
#define BRAID_TARGET_REGION(isa) _Pragma("GCC push_options") BRAID_PRAGMA(GCC target(isa))
#define BRAID_TARGET_REGION_END _Pragma("GCC pop_options")
#endif
#define BRAID_PRAGMA(x) _Pragma(#x)

namespace braid::opr::simd {

BRAID_TARGET_REGION("avx512f")
//! AVX-512: 16 floats per vector; a mask selects lanes.
struct Avx512 {
    using V = __m512;
    using Mask = __mmask16;
    static constexpr size_t LANES = 16;
    static V zero() { return _mm512_setzero_ps(); }
    static V set1(float x) { return _mm512_set1_ps(x); }
    //! The first `lanes` lanes (all for 16 or more).
    static Mask mask(size_t lanes) { return Mask(lanes >= 16 ? 0xFFFFu : (1u << lanes) - 1); }
    //! The lanes whose bits are set in `bits` (bit i: lane i).
    static Mask mask_bits(unsigned bits) { return Mask(bits & 0xFFFFu); }
    static V load(const float* p) { return _mm512_loadu_ps(p); }
    //! Masked-off lanes read as zero and never touch memory.
    static V load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
    static void store(float* p, V x) { _mm512_storeu_ps(p, x); }
    static void store(float* p, Mask m, V x) { _mm512_mask_storeu_ps(p, m, x); }
    static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static V add(V a, V b) { return _mm512_add_ps(a, b); }
    //! The larger of a and b, b when either is NaN (as maxps).
    // (The zero-masked form: GCC 12 warns of an uninitialized value in the plain one.)
    static V max(V a, V b) { return _mm512_maskz_max_ps(Mask(0xFFFF), a, b); }
    //! The larger of a and v, where a NaN on either side wins (v's when both are NaN).
    static V max_nan(V a, V v) {
        return _mm512_mask_max_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v, a);
    }
    //! Lanes 0, 2, 4, ... of a followed by those of b: a stride-2 read of 2·LANES floats.
    static V evens(V a, V b) {
        const __m512i even =
            _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        return _mm512_permutex2var_ps(a, even, b);
    }
};
BRAID_TARGET_REGION_END

BRAID_TARGET_REGION("avx2,fma")
//! AVX2 + FMA: 8 floats per vector; a mask selects lanes.
struct Avx2 {
    using V = __m256;
    using Mask = __m256i;
    static constexpr size_t LANES = 8;
    static V zero() { return _mm256_setzero_ps(); }
    static V set1(float x) { return _mm256_set1_ps(x); }
    //! The first `lanes` lanes (all for 8 or more).
    static Mask mask(size_t lanes) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(lanes < 8 ? lanes : 8)),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    //! The lanes whose bits are set in `bits` (bit i: lane i).
    static Mask mask_bits(unsigned bits) {
        const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        __m256i set = _mm256_and_si256(_mm256_set1_epi32(int(bits)), lane_bit);
        return _mm256_cmpeq_epi32(set, lane_bit);
    }
    static V load(const float* p) { return _mm256_loadu_ps(p); }
    //! Masked-off lanes read as zero and never touch memory.
    static V load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
    static void store(float* p, V x) { _mm256_storeu_ps(p, x); }
    static void store(float* p, Mask m, V x) { _mm256_maskstore_ps(p, m, x); }
    static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static V add(V a, V b) { return _mm256_add_ps(a, b); }
    //! The larger of a and b, b when either is NaN (as maxps).
    static V max(V a, V b) { return _mm256_max_ps(a, b); }
    //! The larger of a and v, where a NaN on either side wins (v's when both are NaN).
    static V max_nan(V a, V v) {
        return _mm256_blendv_ps(_mm256_max_ps(v, a), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    //! Lanes 0, 2, 4, ... of a followed by those of b: a stride-2 read of 2·LANES floats.
    static V evens(V a, V b) {
        __m256 mixed = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); // a0 a2 b0 b2 a4 a6 b4 b6
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(mixed), 0xD8));
    }
};
BRAID_TARGET_REGION_END

} // namespace braid::opr::simd
