#include "operators/elemwise_kernels.h"

#include "base/error.h"
#include "operators/vec_math.h"

#include <cmath>
#include <type_traits>

namespace braid::opr {

namespace {

// ---- scalar functions: one struct per mode, so every loop below specialises and vectorises.
// Integer arithmetic wraps (through the unsigned type) instead of overflowing.
template <typename T> using U = std::make_unsigned_t<T>;

#define BRAID_FLOAT_UNARY(NAME, EXPR)                                                              \
    struct NAME {                                                                                  \
        static float apply(float x) { return EXPR; }                                               \
    };
BRAID_FLOAT_UNARY(ExpOp, vmath::exp(x))
BRAID_FLOAT_UNARY(Expm1Op, std::expm1(x))
BRAID_FLOAT_UNARY(LogOp, vmath::log(x))
BRAID_FLOAT_UNARY(Log1pOp, std::log1p(x))
BRAID_FLOAT_UNARY(SqrtOp, std::sqrt(x))
BRAID_FLOAT_UNARY(RsqrtOp, 1.f / std::sqrt(x))
BRAID_FLOAT_UNARY(SinOp, std::sin(x))
BRAID_FLOAT_UNARY(CosOp, std::cos(x))
BRAID_FLOAT_UNARY(TanhOp, vmath::tanh(x))
BRAID_FLOAT_UNARY(SigmoidOp, vmath::sigmoid(x))
BRAID_FLOAT_UNARY(GeluOp, vmath::gelu(x))
BRAID_FLOAT_UNARY(GeluTanhOp, vmath::gelu_tanh(x))
BRAID_FLOAT_UNARY(SiluOp, x* vmath::sigmoid(x))
BRAID_FLOAT_UNARY(ErfOp, vmath::erf(x))
BRAID_FLOAT_UNARY(FloorOp, std::floor(x))
BRAID_FLOAT_UNARY(CeilOp, std::ceil(x))
BRAID_FLOAT_UNARY(RoundOp, std::nearbyint(x))
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
        if constexpr (std::is_integral_v<T>)
            return x < 0 ? NegOp::apply(x) : x;
        else
            return std::fabs(x);
    }
};
struct SignOp {
    template <typename T> static T apply(T x) { return x > T(0) ? T(1) : x < T(0) ? T(-1) : x; }
};
struct ReluOp {
    template <typename T> static T apply(T x) { return x > T(0) ? x : T(0); }
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
};
// NaN propagates: a NaN on either side wins.
struct MaxOp {
    template <typename T> static T apply(T a, T b) { return a > b || a != a ? a : b; }
};
struct MinOp {
    template <typename T> static T apply(T a, T b) { return a < b || a != a ? a : b; }
};

[[noreturn]] void throw_div_zero() {
    throw DTypeError("integer division by zero");
}

struct FloorDivOp {
    static float apply(float a, float b) { return std::floor(a / b); }
    template <typename T> static T apply(T a, T b) {
        if (b == 0) throw_div_zero();
        if (b == -1) return NegOp::apply(a); // the lowest value / -1 overflows the division
        T q = a / b;
        return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
    }
};
struct ModOp {
    static float apply(float a, float b) {
        float r = std::fmod(a, b);
        return r != 0.f && ((r < 0.f) != (b < 0.f)) ? r + b : r;
    }
    template <typename T> static T apply(T a, T b) {
        if (b == 0) throw_div_zero();
        if (b == -1) return 0;
        T r = a % b;
        return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
    }
};
struct PowOp {
    static float apply(float a, float b) { return std::pow(a, b); }
    template <typename T> static T apply(T a, T b) {
        if (b < 0) throw DTypeError("an integer base cannot take a negative integer exponent");
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
template <typename T, typename Op>
void unary_kernel(const void* const* in, const uint8_t* step, void* out, size_t n) {
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

template <typename T, typename Op>
void binary_kernel(const void* const* in, const uint8_t* step, void* out, size_t n) {
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

ElemKernel float_kernel(ElemMode m) {
    using M = ElemMode;
    switch (m) {
#define U1(MODE, OP)                                                                               \
    case M::MODE:                                                                                  \
        return unary_kernel<float, OP>;
#define B2(MODE, OP)                                                                               \
    case M::MODE:                                                                                  \
        return binary_kernel<float, OP>;
#define T3(MODE, OP)                                                                               \
    case M::MODE:                                                                                  \
        return ternary_kernel<float, OP>;
        U1(NEG, NegOp)
        U1(ABS, AbsOp) U1(SIGN, SignOp) U1(RELU, ReluOp) U1(EXP, ExpOp) U1(EXPM1, Expm1Op)
            U1(LOG, LogOp) U1(LOG1P, Log1pOp) U1(SQRT, SqrtOp) U1(RSQRT, RsqrtOp)
                U1(SQUARE, SquareOp) U1(SIN, SinOp) U1(COS, CosOp) U1(TANH, TanhOp)
                    U1(SIGMOID, SigmoidOp) U1(GELU, GeluOp) U1(GELU_TANH, GeluTanhOp)
                        U1(SILU, SiluOp) U1(ERF, ErfOp) U1(FLOOR, FloorOp) U1(CEIL, CeilOp)
                            U1(ROUND, RoundOp) B2(ADD, AddOp) B2(SUB, SubOp) B2(MUL, MulOp)
                                B2(TRUE_DIV, DivOp) B2(FLOOR_DIV, FloorDivOp) B2(MOD, ModOp)
                                    B2(POW, PowOp) B2(MAX, MaxOp) B2(MIN, MinOp) B2(LT, LtOp)
                                        B2(LEQ, LeqOp) B2(EQ, EqOp) B2(NEQ, NeqOp) T3(CLIP, ClipOp)
                                            T3(COND_LEQ_MOV, CondLeqMovOp) T3(FMA3, Fma3Op) default
            : return nullptr;
    }
}

template <typename T> ElemKernel int_kernel(ElemMode m) {
    using M = ElemMode;
    switch (m) {
#undef U1
#undef B2
#undef T3
#define U1(MODE, OP)                                                                               \
    case M::MODE:                                                                                  \
        return unary_kernel<T, OP>;
#define B2(MODE, OP)                                                                               \
    case M::MODE:                                                                                  \
        return binary_kernel<T, OP>;
#define T3(MODE, OP)                                                                               \
    case M::MODE:                                                                                  \
        return ternary_kernel<T, OP>;
        U1(NEG, NegOp)
        U1(ABS, AbsOp) U1(SIGN, SignOp) U1(RELU, ReluOp) U1(SQUARE, SquareOp) B2(ADD, AddOp)
            B2(SUB, SubOp) B2(MUL, MulOp) B2(FLOOR_DIV, FloorDivOp) B2(MOD, ModOp) B2(POW, PowOp)
                B2(MAX, MaxOp) B2(MIN, MinOp) B2(LT, LtOp) B2(LEQ, LeqOp) B2(EQ, EqOp)
                    B2(NEQ, NeqOp) T3(CLIP, ClipOp) T3(COND_LEQ_MOV, CondLeqMovOp)
                        T3(FMA3, Fma3Op) default : return nullptr;
    }
}

ElemKernel bool_kernel(ElemMode m) {
    using M = ElemMode;
    switch (m) {
    case M::LOGICAL_NOT:
        return unary_kernel<uint8_t, LogicalNotOp>;
    case M::LOGICAL_AND:
        return binary_kernel<uint8_t, AndOp>;
    case M::LOGICAL_OR:
        return binary_kernel<uint8_t, OrOp>;
    case M::LOGICAL_XOR:
        return binary_kernel<uint8_t, XorOp>;
    case M::EQ:
        return binary_kernel<uint8_t, EqOp>;
    case M::NEQ:
        return binary_kernel<uint8_t, NeqOp>;
    default:
        return nullptr;
    }
#undef U1
#undef B2
#undef T3
}

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
    case DTypeEnum::INT32:
        return int_kernel<int32_t>(mode);
    case DTypeEnum::INT64:
        return int_kernel<int64_t>(mode);
    case DTypeEnum::BOOL:
        return bool_kernel(mode);
    default:
        return nullptr;
    }
}

} // namespace braid::opr
