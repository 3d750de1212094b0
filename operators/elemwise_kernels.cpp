#include "operators/elemwise_kernels.h"

#include "base/error.h"
#include "operators/kernel_utils.h"
#include "operators/vec_math.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace braid::opr {

namespace {

// ---- scalar functions: one struct per mode, so every loop below specialises and vectorises.
// Integer arithmetic wraps (through the unsigned type) instead of overflowing.
template <typename T> using U = std::make_unsigned_t<T>;

// Float modes: a float32 form (vectorisable approximations from vec_math.h) and a float64 form
// (libm in double, so float64 keeps its precision).
#define BRAID_FLOAT_UNARY(NAME, EXPR, DEXPR)                                                       \
    struct NAME {                                                                                  \
        static float apply(float x) { return EXPR; }                                               \
        static double apply(double x) { return DEXPR; }                                            \
    };
BRAID_FLOAT_UNARY(ExpOp, vmath::exp(x), std::exp(x))
BRAID_FLOAT_UNARY(Expm1Op, std::expm1(x), std::expm1(x))
BRAID_FLOAT_UNARY(LogOp, vmath::log(x), std::log(x))
BRAID_FLOAT_UNARY(Log1pOp, std::log1p(x), std::log1p(x))
BRAID_FLOAT_UNARY(SqrtOp, std::sqrt(x), std::sqrt(x))
BRAID_FLOAT_UNARY(RsqrtOp, 1.f / std::sqrt(x), 1.0 / std::sqrt(x))
BRAID_FLOAT_UNARY(SinOp, std::sin(x), std::sin(x))
BRAID_FLOAT_UNARY(CosOp, std::cos(x), std::cos(x))
BRAID_FLOAT_UNARY(TanhOp, vmath::tanh(x), std::tanh(x))
BRAID_FLOAT_UNARY(SigmoidOp, vmath::sigmoid(x), 1.0 / (1.0 + std::exp(-x)))
BRAID_FLOAT_UNARY(GeluOp, vmath::gelu(x), 0.5 * x * std::erfc(-x * 0.70710678118654752440))
BRAID_FLOAT_UNARY(GeluTanhOp, vmath::gelu_tanh(x),
                  0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x))))
BRAID_FLOAT_UNARY(SiluOp, x* vmath::sigmoid(x), x / (1.0 + std::exp(-x)))
BRAID_FLOAT_UNARY(ErfOp, vmath::erf(x), std::erf(x))
BRAID_FLOAT_UNARY(FloorOp, std::floor(x), std::floor(x))
BRAID_FLOAT_UNARY(CeilOp, std::ceil(x), std::ceil(x))
BRAID_FLOAT_UNARY(RoundOp, std::nearbyint(x), std::nearbyint(x))
#undef BRAID_FLOAT_UNARY

struct NegOp {
    template <typename T> static T apply(T x) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(0) - U<T>(x));
        else
            return -x;
    }
};
struct AbsOp {
    template <typename T> static T apply(T x) {
        if constexpr (std::is_unsigned_v<T>)
            return x;
        else if constexpr (std::is_integral_v<T>)
            return x < 0 ? NegOp::apply(x) : x;
        else
            return std::fabs(x);
    }
};
struct SignOp {
    template <typename T> static T apply(T x) {
        if constexpr (std::is_unsigned_v<T>)
            return x > T(0) ? T(1) : x;
        else
            return x > T(0) ? T(1) : x < T(0) ? T(-1) : x;
    }
};
//! max(x, 0) with NaN and -0 passed through, as ONNX's Relu (and ONNX Runtime) give them.
struct ReluOp {
    template <typename T> static T apply(T x) { return x < T(0) ? T(0) : x; }
};
struct SquareOp {
    template <typename T> static T apply(T x) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(x) * U<T>(x));
        else
            return x * x;
    }
};
struct LogicalNotOp {
    static bool apply(uint8_t x) { return !x; }
};

struct AddOp {
    template <typename T> static T apply(T a, T b) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(a) + U<T>(b));
        else
            return a + b;
    }
};
struct SubOp {
    template <typename T> static T apply(T a, T b) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(a) - U<T>(b));
        else
            return a - b;
    }
};
struct MulOp {
    template <typename T> static T apply(T a, T b) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(a) * U<T>(b));
        else
            return a * b;
    }
};
struct DivOp {
    static float apply(float a, float b) { return a / b; }
    static double apply(double a, double b) { return a / b; }
};
// NaN propagates: a NaN on either side wins.
// `|` rather than `||`: both comparisons evaluated, so the loops vectorize (a blend).
struct MaxOp {
    template <typename T> static T apply(T a, T b) { return (a > b) | (a != a) ? a : b; }
};
struct MinOp {
    template <typename T> static T apply(T a, T b) { return (a < b) | (a != a) ? a : b; }
};

[[noreturn]] void throw_div_zero() {
    throw ValueError("integer division by zero");
}

struct FloorDivOp {
    static float apply(float a, float b) { return std::floor(a / b); }
    static double apply(double a, double b) { return std::floor(a / b); }
    template <typename T> static T apply(T a, T b) {
        if (b == 0) throw_div_zero();
        if constexpr (std::is_unsigned_v<T>) {
            return a / b;
        } else {
            if (b == -1) return NegOp::apply(a); // the lowest value / -1 overflows the division
            T q = a / b;
            return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
        }
    }
};
struct ModOp {
    static float apply(float a, float b) {
        float r = std::fmod(a, b);
        return r != 0.f && ((r < 0.f) != (b < 0.f)) ? r + b : r;
    }
    static double apply(double a, double b) {
        double r = std::fmod(a, b);
        return r != 0.0 && ((r < 0.0) != (b < 0.0)) ? r + b : r;
    }
    template <typename T> static T apply(T a, T b) {
        if (b == 0) throw_div_zero();
        if constexpr (std::is_unsigned_v<T>) {
            return a % b;
        } else {
            if (b == -1) return 0;
            T r = a % b;
            return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
        }
    }
};
struct PowOp {
    static float apply(float a, float b) { return std::pow(a, b); }
    static double apply(double a, double b) { return std::pow(a, b); }
    template <typename T> static T apply(T a, T b) {
        if constexpr (std::is_signed_v<T>)
            if (b < 0) throw ValueError("an integer base cannot take a negative integer exponent");
        U<T> r = 1, base = U<T>(a);
        for (T e = b; e; e >>= 1) {
            if (e & 1) r *= base;
            base *= base;
        }
        return T(r);
    }
};

struct LtOp {
    template <typename T> static bool apply(T a, T b) { return a < b; }
};
struct LeqOp {
    template <typename T> static bool apply(T a, T b) { return a <= b; }
};
struct EqOp {
    template <typename T> static bool apply(T a, T b) { return a == b; }
};
struct NeqOp {
    template <typename T> static bool apply(T a, T b) { return a != b; }
};
struct AndOp {
    static bool apply(uint8_t a, uint8_t b) { return a && b; }
};
struct OrOp {
    static bool apply(uint8_t a, uint8_t b) { return a || b; }
};
struct XorOp {
    static bool apply(uint8_t a, uint8_t b) { return bool(a) != bool(b); }
};

struct ClipOp {
    template <typename T> static T apply(T x, T lo, T hi) {
        T t = x < lo ? lo : x;
        return t > hi ? hi : t;
    }
};
struct CondLeqMovOp {
    template <typename T> static T apply(T a, T b, T c) { return a <= b ? c : T(0); }
};
struct Fma3Op {
    template <typename T> static T apply(T a, T b, T c) {
        return AddOp::apply(MulOp::apply(a, b), c);
    }
};

// ---- loops: contiguous inputs and broadcast scalars get their own loop so they vectorise.
// The one-operation loops are multi-versioned (AVX2 machines run them 8 wide); one operation
// per element leaves the compiler nothing to contract into an FMA, so every version gives the
// same bits.
template <typename T, typename Op>
BRAID_SIMD_CLONES void unary_kernel(const void* const* in, const uint8_t* step, void* out,
                                    size_t n) {
    using R = decltype(Op::apply(T()));
    const T* x = static_cast<const T*>(in[0]);
    R* y = static_cast<R*>(out);
    if (step[0]) {
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(x[i]);
    } else {
        R v = Op::apply(x[0]);
        for (size_t i = 0; i < n; ++i) y[i] = v;
    }
}

//! The float unary loop for modes that compute more than they load (exp, tanh, erf, ...):
//! multi-versioned, so AVX2 machines run it 8 floats wide.
template <typename Op>
BRAID_SIMD_CLONES void costly_unary_kernel(const void* const* in, const uint8_t* step, void* out,
                                           size_t n) {
    const float* x = static_cast<const float*>(in[0]);
    float* y = static_cast<float*>(out);
    if (step[0]) {
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(x[i]);
    } else {
        float v = Op::apply(x[0]);
        for (size_t i = 0; i < n; ++i) y[i] = v;
    }
}

#ifdef BRAID_VMATH_AVX2
//! The AVX2 form of costly_unary_kernel for the modes with an 8-wide vmath function F, chosen
//! at run time. (Non-temporal stores, which help layer_norm and softmax, made it slower.)
template <__m256 (*F)(__m256)>
__attribute__((target("avx2,fma"))) void
avx2_unary_kernel(const void* const* in, const uint8_t* step, void* out, size_t n) {
    const float* x = static_cast<const float*>(in[0]);
    float* y = static_cast<float*>(out);
    if (!step[0]) {
        float v = _mm256_cvtss_f32(F(_mm256_set1_ps(x[0])));
        for (size_t i = 0; i < n; ++i) y[i] = v;
        return;
    }
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        // 4 KiB ahead: the loads of a compute-bound loop then rarely wait on memory.
        if (i + 1024 < n) _mm_prefetch(reinterpret_cast<const char*>(x + i + 1024), _MM_HINT_T0);
        _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i)));
        _mm256_storeu_ps(y + i + 8, F(_mm256_loadu_ps(x + i + 8)));
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i)));
    if (i < n) {
        // The tail through the same vector code (staged, so nothing reads past x or writes past
        // y): a result must not depend on where its element falls in the run.
        alignas(32) float buf[8] = {};
        std::copy(x + i, x + n, buf);
        _mm256_store_ps(buf, F(_mm256_load_ps(buf)));
        std::copy(buf, buf + (n - i), y + i);
    }
}

// Plain functions, so their addresses can be template arguments.
__attribute__((target("avx2,fma"))) __m256 gelu8(__m256 x) {
    return vmath::gelu8(x);
}
__attribute__((target("avx2,fma"))) __m256 gelu_tanh8(__m256 x) {
    return vmath::gelu_tanh8(x);
}
__attribute__((target("avx2,fma"))) __m256 erf8(__m256 x) {
    return vmath::erf8(x);
}
__attribute__((target("avx2,fma"))) __m256 tanh8(__m256 x) {
    return vmath::tanh8(x);
}
__attribute__((target("avx2,fma"))) __m256 exp8(__m256 x) {
    return vmath::exp8(x);
}

//! The AVX2 kernel of `mode` where there is one and this CPU runs it, else nullptr.
ElemKernel avx2_float_kernel(ElemMode m) {
    if (!vmath::avx2_fma_supported()) return nullptr;
    switch (m) {
    case ElemMode::GELU:
        return avx2_unary_kernel<gelu8>;
    case ElemMode::GELU_TANH:
        return avx2_unary_kernel<gelu_tanh8>;
    case ElemMode::ERF:
        return avx2_unary_kernel<erf8>;
    case ElemMode::TANH:
        return avx2_unary_kernel<tanh8>;
    case ElemMode::EXP:
        return avx2_unary_kernel<exp8>;
    default:
        return nullptr;
    }
}
#endif

template <typename T, typename Op>
BRAID_SIMD_CLONES void binary_kernel(const void* const* in, const uint8_t* step, void* out,
                                     size_t n) {
    using R = decltype(Op::apply(T(), T()));
    const T* a = static_cast<const T*>(in[0]);
    const T* b = static_cast<const T*>(in[1]);
    R* y = static_cast<R*>(out);
    switch (step[0] * 2 + step[1]) {
    case 3:
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(a[i], b[i]);
        break;
    case 2: {
        T bv = b[0];
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(a[i], bv);
        break;
    }
    case 1: {
        T av = a[0];
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(av, b[i]);
        break;
    }
    default: {
        R v = Op::apply(a[0], b[0]);
        for (size_t i = 0; i < n; ++i) y[i] = v;
    }
    }
}

template <typename T, typename Op>
void ternary_kernel(const void* const* in, const uint8_t* step, void* out, size_t n) {
    const T* a = static_cast<const T*>(in[0]);
    const T* b = static_cast<const T*>(in[1]);
    const T* c = static_cast<const T*>(in[2]);
    T* y = static_cast<T*>(out);
    if (step[0] && step[1] && step[2]) {
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(a[i], b[i], c[i]);
    } else if (step[0] && !step[1] && !step[2]) { // clip(x, lo, hi) with scalar bounds
        T bv = b[0], cv = c[0];
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(a[i], bv, cv);
    } else {
        ptrdiff_t sa = step[0], sb = step[1], sc = step[2];
        for (size_t i = 0; i < n; ++i) {
            ptrdiff_t k = ptrdiff_t(i);
            y[i] = Op::apply(a[k * sa], b[k * sb], c[k * sc]);
        }
    }
}

//! WHERE moves bits: T is an unsigned integer of the element size.
template <typename T>
void where_kernel(const void* const* in, const uint8_t* step, void* out, size_t n) {
    const uint8_t* c = static_cast<const uint8_t*>(in[0]);
    const T* a = static_cast<const T*>(in[1]);
    const T* b = static_cast<const T*>(in[2]);
    T* y = static_cast<T*>(out);
    if (step[0] && step[1] && step[2]) {
        for (size_t i = 0; i < n; ++i) y[i] = c[i] ? a[i] : b[i];
    } else {
        ptrdiff_t sc = step[0], sa = step[1], sb = step[2];
        for (size_t i = 0; i < n; ++i) {
            ptrdiff_t k = ptrdiff_t(i);
            y[i] = c[k * sc] ? a[k * sa] : b[k * sb];
        }
    }
}

// Dispatch tables: one line per (mode, loop); the macro expands to a `case` label.
#define BRAID_CASE(MODE, ...)                                                                      \
    case ElemMode::MODE:                                                                           \
        return __VA_ARGS__

//! The unary loop of a transcendental mode: float32 runs the multi-versioned
//! costly_unary_kernel; float64 runs the plain loop.
template <typename T, typename Op> constexpr ElemKernel transcendental_kernel() {
    if constexpr (std::is_same_v<T, float>)
        return costly_unary_kernel<Op>;
    else
        return unary_kernel<T, Op>;
}

//! The modes every number type has: integers and floats alike.
template <typename T> ElemKernel numeric_kernel(ElemMode m) {
    switch (m) {
        BRAID_CASE(NEG, unary_kernel<T, NegOp>);
        BRAID_CASE(ABS, unary_kernel<T, AbsOp>);
        BRAID_CASE(SIGN, unary_kernel<T, SignOp>);
        BRAID_CASE(RELU, unary_kernel<T, ReluOp>);
        BRAID_CASE(SQUARE, unary_kernel<T, SquareOp>);
        BRAID_CASE(ADD, binary_kernel<T, AddOp>);
        BRAID_CASE(SUB, binary_kernel<T, SubOp>);
        BRAID_CASE(MUL, binary_kernel<T, MulOp>);
        BRAID_CASE(FLOOR_DIV, binary_kernel<T, FloorDivOp>);
        BRAID_CASE(MOD, binary_kernel<T, ModOp>);
        BRAID_CASE(POW, binary_kernel<T, PowOp>);
        BRAID_CASE(MAX, binary_kernel<T, MaxOp>);
        BRAID_CASE(MIN, binary_kernel<T, MinOp>);
        BRAID_CASE(LT, binary_kernel<T, LtOp>);
        BRAID_CASE(LEQ, binary_kernel<T, LeqOp>);
        BRAID_CASE(EQ, binary_kernel<T, EqOp>);
        BRAID_CASE(NEQ, binary_kernel<T, NeqOp>);
        BRAID_CASE(CLIP, ternary_kernel<T, ClipOp>);
        BRAID_CASE(COND_LEQ_MOV, ternary_kernel<T, CondLeqMovOp>);
        BRAID_CASE(FMA3, ternary_kernel<T, Fma3Op>);
    default:
        return nullptr;
    }
}

//! Every float mode computed in T: float32, or float64 (no float32 staging, no float32
//! approximations): the numeric modes and those only floats have.
template <typename T> ElemKernel real_kernel(ElemMode m) {
    switch (m) {
        BRAID_CASE(EXP, transcendental_kernel<T, ExpOp>());
        BRAID_CASE(EXPM1, unary_kernel<T, Expm1Op>);
        BRAID_CASE(LOG, transcendental_kernel<T, LogOp>());
        BRAID_CASE(LOG1P, unary_kernel<T, Log1pOp>);
        BRAID_CASE(SQRT, unary_kernel<T, SqrtOp>);
        BRAID_CASE(RSQRT, unary_kernel<T, RsqrtOp>);
        BRAID_CASE(SIN, unary_kernel<T, SinOp>);
        BRAID_CASE(COS, unary_kernel<T, CosOp>);
        BRAID_CASE(TANH, transcendental_kernel<T, TanhOp>());
        BRAID_CASE(SIGMOID, transcendental_kernel<T, SigmoidOp>());
        BRAID_CASE(GELU, transcendental_kernel<T, GeluOp>());
        BRAID_CASE(GELU_TANH, transcendental_kernel<T, GeluTanhOp>());
        BRAID_CASE(SILU, transcendental_kernel<T, SiluOp>());
        BRAID_CASE(ERF, transcendental_kernel<T, ErfOp>());
        BRAID_CASE(FLOOR, unary_kernel<T, FloorOp>);
        BRAID_CASE(CEIL, unary_kernel<T, CeilOp>);
        BRAID_CASE(ROUND, unary_kernel<T, RoundOp>);
        BRAID_CASE(TRUE_DIV, binary_kernel<T, DivOp>);
    default:
        return numeric_kernel<T>(m);
    }
}

ElemKernel float_kernel(ElemMode m) {
#ifdef BRAID_VMATH_AVX2
    if (ElemKernel k = avx2_float_kernel(m)) return k;
#endif
    return real_kernel<float>(m);
}

ElemKernel bool_kernel(ElemMode m) {
    switch (m) {
        BRAID_CASE(LOGICAL_NOT, unary_kernel<uint8_t, LogicalNotOp>);
        BRAID_CASE(LOGICAL_AND, binary_kernel<uint8_t, AndOp>);
        BRAID_CASE(LOGICAL_OR, binary_kernel<uint8_t, OrOp>);
        BRAID_CASE(LOGICAL_XOR, binary_kernel<uint8_t, XorOp>);
        BRAID_CASE(EQ, binary_kernel<uint8_t, EqOp>);
        BRAID_CASE(NEQ, binary_kernel<uint8_t, NeqOp>);
    default:
        return nullptr;
    }
}
#undef BRAID_CASE

} // namespace

ElemKernel find_elem_kernel(ElemMode mode, DTypeEnum compute) {
    if (mode == ElemMode::WHERE) {
        switch (DType(compute).size()) {
        case 1:
            return where_kernel<uint8_t>;
        case 2:
            return where_kernel<uint16_t>;
        case 4:
            return where_kernel<uint32_t>;
        case 8:
            return where_kernel<uint64_t>;
        default:
            return nullptr;
        }
    }
    switch (compute) {
    case DTypeEnum::FLOAT32:
        return float_kernel(mode);
    case DTypeEnum::FLOAT64:
        return real_kernel<double>(mode);
    case DTypeEnum::INT32:
        return numeric_kernel<int32_t>(mode);
    case DTypeEnum::INT64:
        return numeric_kernel<int64_t>(mode);
    case DTypeEnum::UINT64:
        return numeric_kernel<uint64_t>(mode);
    case DTypeEnum::BOOL:
        return bool_kernel(mode);
    default:
        return nullptr;
    }
}

} // namespace braid::opr
