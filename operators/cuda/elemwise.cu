// Elementwise CUDA kernels: every ElemMode with the CPU kernel's dtype table
// (operators/elemwise_kernels.cpp): float modes on float32, float16 and bfloat16 (computed in
// float32, rounded once on store), integer modes on int32 and int64 (wrapping arithmetic),
// logical modes on bool, WHERE on any element size; numpy broadcasting.
//
// Two kernels per mode and type: a flat one for the common case where each input is either
// the output's size or a single element (16-byte vector loads when aligned and the output
// element has the input's size), and a strided one that maps each output index to input
// offsets through broadcast strides.
#include "base/cuda_check.h"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/elemwise_kernels.h"

#include <type_traits>

namespace braid::cuda {

namespace {

using M = ElemKernelMode;

template <typename T> using U = std::make_unsigned_t<T>;

//! Bool storage (0 or 1 in a byte) as an input type.
struct Bool {
    using S = uint8_t;
    using C = uint8_t;
    __device__ static C load(S v) { return v; }
};
//! The output of the modes whose result is bool (comparisons, logical modes).
struct BoolOut {
    using S = uint8_t;
    __device__ static S store(bool v) { return v ? 1 : 0; }
};

// ---- scalar functions, the expressions of the CPU kernels (operators/elemwise_kernels.cpp).
// Every functor takes three operands and the error flag; unary and binary ones ignore the
// operands they do not use.

__device__ __forceinline__ float sigmoid_f(float x) {
    // 1 / (1 + e^-x), as e^x / (1 + e^x) for negative x so tiny results keep their precision.
    float e = expf(x < 0.f ? x : -x);
    float s = 1.f / (1.f + e);
    return x < 0.f ? e * s : s;
}

#define BRAID_FLOAT_UNARY(NAME, EXPR)                                                              \
    struct NAME {                                                                                  \
        __device__ static float apply(float x, float, float, int*) { return EXPR; }                \
    };
BRAID_FLOAT_UNARY(ExpOp, expf(x))
BRAID_FLOAT_UNARY(Expm1Op, expm1f(x))
BRAID_FLOAT_UNARY(LogOp, logf(x))
BRAID_FLOAT_UNARY(Log1pOp, log1pf(x))
BRAID_FLOAT_UNARY(SqrtOp, sqrtf(x))
BRAID_FLOAT_UNARY(RsqrtOp, 1.f / sqrtf(x))
BRAID_FLOAT_UNARY(SinOp, sinf(x))
BRAID_FLOAT_UNARY(CosOp, cosf(x))
BRAID_FLOAT_UNARY(TanhOp, tanhf(x))
BRAID_FLOAT_UNARY(SigmoidOp, sigmoid_f(x))
BRAID_FLOAT_UNARY(GeluOp, 0.5f * x * (1.f + erff(x * 0.70710678118654752f)))
BRAID_FLOAT_UNARY(GeluTanhOp,
                  0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x))))
BRAID_FLOAT_UNARY(SiluOp, x* sigmoid_f(x))
BRAID_FLOAT_UNARY(ErfOp, erff(x))
BRAID_FLOAT_UNARY(FloorOp, floorf(x))
BRAID_FLOAT_UNARY(CeilOp, ceilf(x))
BRAID_FLOAT_UNARY(RoundOp, rintf(x)) // round half to even, like nearbyint
#undef BRAID_FLOAT_UNARY

struct NegOp {
    template <typename T> __device__ static T apply(T x, T, T, int*) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(0) - U<T>(x));
        else
            return -x;
    }
};
struct AbsOp {
    template <typename T> __device__ static T apply(T x, T, T, int* e) {
        if constexpr (std::is_integral_v<T>)
            return x < 0 ? NegOp::apply(x, x, x, e) : x;
        else
            return fabsf(x);
    }
};
struct SignOp {
    template <typename T> __device__ static T apply(T x, T, T, int*) {
        return x > T(0) ? T(1) : x < T(0) ? T(-1) : x; // NaN and -0 stay as they are
    }
};
struct ReluOp {
    template <typename T> __device__ static T apply(T x, T, T, int*) { return x < T(0) ? T(0) : x; }
};
struct SquareOp {
    template <typename T> __device__ static T apply(T x, T, T, int*) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(x) * U<T>(x));
        else
            return x * x;
    }
};
struct LogicalNotOp {
    __device__ static bool apply(uint8_t x, uint8_t, uint8_t, int*) { return !x; }
};

struct AddOp {
    template <typename T> __device__ static T apply(T a, T b, T, int*) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(a) + U<T>(b));
        else
            return a + b;
    }
};
struct SubOp {
    template <typename T> __device__ static T apply(T a, T b, T, int*) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(a) - U<T>(b));
        else
            return a - b;
    }
};
struct MulOp {
    template <typename T> __device__ static T apply(T a, T b, T, int*) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(a) * U<T>(b));
        else
            return a * b;
    }
};
struct TrueDivOp {
    __device__ static float apply(float a, float b, float, int*) { return a / b; }
};
// NaN propagates: a NaN on either side wins.
struct MaxOp {
    template <typename T> __device__ static T apply(T a, T b, T, int*) {
        return a > b || a != a ? a : b;
    }
};
struct MinOp {
    template <typename T> __device__ static T apply(T a, T b, T, int*) {
        return a < b || a != a ? a : b;
    }
};
struct FloorDivOp {
    template <typename T> __device__ static T apply(T a, T b, T, int* err) {
        if constexpr (std::is_integral_v<T>) {
            if (b == 0) {
                *err = ELEM_ERR_DIV_ZERO; // reported by the host after the kernel
                return 0;
            }
            if (b == -1) return NegOp::apply(a, a, a, err); // the lowest value / -1 overflows
            T q = a / b;
            return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
        } else {
            return floorf(a / b);
        }
    }
};
struct ModOp {
    template <typename T> __device__ static T apply(T a, T b, T, int* err) {
        if constexpr (std::is_integral_v<T>) {
            if (b == 0) {
                *err = ELEM_ERR_DIV_ZERO;
                return 0;
            }
            if (b == -1) return 0;
            T r = a % b;
            return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
        } else {
            float r = fmodf(a, b);
            return r != 0.f && ((r < 0.f) != (b < 0.f)) ? r + b : r;
        }
    }
};
struct PowOp {
    template <typename T> __device__ static T apply(T a, T b, T, int* err) {
        if constexpr (std::is_integral_v<T>) {
            if (b < 0) {
                *err = ELEM_ERR_NEGATIVE_EXP;
                return 0;
            }
            U<T> r = 1, base = U<T>(a);
            for (T e = b; e; e >>= 1) {
                if (e & 1) r *= base;
                base *= base;
            }
            return T(r);
        } else {
            return powf(a, b);
        }
    }
};

struct LtOp {
    template <typename T> __device__ static bool apply(T a, T b, T, int*) { return a < b; }
};
struct LeqOp {
    template <typename T> __device__ static bool apply(T a, T b, T, int*) { return a <= b; }
};
struct EqOp {
    template <typename T> __device__ static bool apply(T a, T b, T, int*) { return a == b; }
};
struct NeqOp {
    template <typename T> __device__ static bool apply(T a, T b, T, int*) { return a != b; }
};
struct AndOp {
    __device__ static bool apply(uint8_t a, uint8_t b, uint8_t, int*) { return a && b; }
};
struct OrOp {
    __device__ static bool apply(uint8_t a, uint8_t b, uint8_t, int*) { return a || b; }
};
struct XorOp {
    __device__ static bool apply(uint8_t a, uint8_t b, uint8_t, int*) { return bool(a) != bool(b); }
};

struct ClipOp {
    template <typename T> __device__ static T apply(T x, T lo, T hi, int*) {
        T t = x < lo ? lo : x;
        return t > hi ? hi : t;
    }
};
struct CondLeqMovOp {
    template <typename T> __device__ static T apply(T a, T b, T c, int*) {
        return a <= b ? c : T(0);
    }
};
struct Fma3Op {
    template <typename T> __device__ static T apply(T a, T b, T c, int*) {
        if constexpr (std::is_integral_v<T>)
            return T(U<T>(a) * U<T>(b) + U<T>(c));
        else
            return __fadd_rn(__fmul_rn(a, b), c); // two roundings, as on the CPU (no fused FMA)
    }
};

// ---- kernels
template <typename S, int V> struct alignas(16) Pack { S v[V]; };

template <typename S> struct Inputs {
    const S* p[3];
    bool scalar[3];
};

struct StridedIndex {
    int ndim;
    int64_t shape[ElemwiseLaunch::MAX_NDIM];
    int64_t stride[3][ElemwiseLaunch::MAX_NDIM];
};

template <typename In, typename Out, typename Op, int ARITY>
__global__ void flat_kernel(Inputs<typename In::S> in, typename Out::S* y, int64_t n, bool vec_ok,
                            int* err) {
    using S = typename In::S;
    using C = typename In::C;
    using OS = typename Out::S;
    int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    int64_t step = int64_t(gridDim.x) * blockDim.x;
    C s0 = in.scalar[0] ? In::load(in.p[0][0]) : C(0);
    C s1 = (ARITY >= 2 && in.scalar[1]) ? In::load(in.p[1][0]) : C(0);
    C s2 = (ARITY >= 3 && in.scalar[2]) ? In::load(in.p[2][0]) : C(0);
    int64_t done = 0;
    if constexpr (sizeof(OS) == sizeof(S)) {
        constexpr int V = 16 / sizeof(S);
        if (vec_ok) {
            int64_t nv = n / V;
            for (int64_t i = tid; i < nv; i += step) {
                Pack<S, V> pa, pb, pc;
                Pack<OS, V> py;
                if (!in.scalar[0]) pa = reinterpret_cast<const Pack<S, V>*>(in.p[0])[i];
                if (ARITY >= 2 && !in.scalar[1])
                    pb = reinterpret_cast<const Pack<S, V>*>(in.p[1])[i];
                if (ARITY >= 3 && !in.scalar[2])
                    pc = reinterpret_cast<const Pack<S, V>*>(in.p[2])[i];
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    C av = in.scalar[0] ? s0 : In::load(pa.v[k]);
                    C bv = ARITY >= 2 ? (in.scalar[1] ? s1 : In::load(pb.v[k])) : C(0);
                    C cv = ARITY >= 3 ? (in.scalar[2] ? s2 : In::load(pc.v[k])) : C(0);
                    py.v[k] = Out::store(Op::apply(av, bv, cv, err));
                }
                reinterpret_cast<Pack<OS, V>*>(y)[i] = py;
            }
            done = nv * V;
        }
    }
    for (int64_t i = done + tid; i < n; i += step) {
        C av = in.scalar[0] ? s0 : In::load(in.p[0][i]);
        C bv = ARITY >= 2 ? (in.scalar[1] ? s1 : In::load(in.p[1][i])) : C(0);
        C cv = ARITY >= 3 ? (in.scalar[2] ? s2 : In::load(in.p[2][i])) : C(0);
        y[i] = Out::store(Op::apply(av, bv, cv, err));
    }
}

//! The offsets of output element `i` in each of the first `arity` inputs.
template <int ARITY>
__device__ __forceinline__ void strided_offsets(const StridedIndex& idx, int64_t i, int64_t* off) {
    int64_t rest = i;
    for (int k = 0; k < ARITY; ++k) off[k] = 0;
    for (int d = idx.ndim - 1; d >= 0; --d) {
        int64_t q = rest % idx.shape[d];
        rest /= idx.shape[d];
#pragma unroll
        for (int k = 0; k < ARITY; ++k) off[k] += q * idx.stride[k][d];
    }
}

template <typename In, typename Out, typename Op, int ARITY>
__global__ void strided_kernel(Inputs<typename In::S> in, typename Out::S* y, int64_t n,
                               StridedIndex idx, int* err) {
    using C = typename In::C;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        int64_t off[3] = {0, 0, 0};
        strided_offsets<ARITY>(idx, i, off);
        C av = In::load(in.p[0][off[0]]);
        C bv = ARITY >= 2 ? In::load(in.p[1][off[1]]) : C(0);
        C cv = ARITY >= 3 ? In::load(in.p[2][off[2]]) : C(0);
        y[i] = Out::store(Op::apply(av, bv, cv, err));
    }
}

//! WHERE moves bits: T is an unsigned integer of the element size.
template <typename T>
__global__ void where_flat_kernel(const uint8_t* cond, const T* a, const T* b, T* y, int64_t n,
                                  bool cs, bool as, bool bs) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        y[i] = cond[cs ? 0 : i] ? a[as ? 0 : i] : b[bs ? 0 : i];
}

template <typename T>
__global__ void where_strided_kernel(const uint8_t* cond, const T* a, const T* b, T* y, int64_t n,
                                     StridedIndex idx) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        int64_t off[3];
        strided_offsets<3>(idx, i, off);
        y[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
    }
}

constexpr int THREADS = 256;

bool aligned16(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

StridedIndex strided_index(const ElemwiseLaunch& L) {
    StridedIndex idx{};
    idx.ndim = L.ndim;
    for (int d = 0; d < L.ndim; ++d) {
        idx.shape[d] = L.shape[d];
        for (int k = 0; k < 3; ++k) idx.stride[k][d] = L.stride[k][d];
    }
    return idx;
}

template <typename In, typename Out, typename Op, int ARITY>
void launch_op(const ElemwiseLaunch& L, cudaStream_t stream) {
    using S = typename In::S;
    using OS = typename Out::S;
    Inputs<S> in;
    for (int k = 0; k < 3; ++k) {
        in.p[k] = static_cast<const S*>(L.in[k]);
        in.scalar[k] = L.scalar[k];
    }
    auto* y = static_cast<OS*>(L.out);
    if (L.flat) {
        bool vec_ok = sizeof(S) == sizeof(OS) && aligned16(y);
        for (int k = 0; k < ARITY; ++k) vec_ok = vec_ok && (L.scalar[k] || aligned16(in.p[k]));
        constexpr int64_t V = 16 / int64_t(sizeof(S));
        int64_t items = vec_ok ? (L.n + V - 1) / V : L.n;
        flat_kernel<In, Out, Op, ARITY>
            <<<grid_blocks(items, THREADS, L.max_blocks), THREADS, 0, stream>>>(in, y, L.n, vec_ok,
                                                                                L.error_flag);
    } else {
        strided_kernel<In, Out, Op, ARITY>
            <<<grid_blocks(L.n, THREADS, L.max_blocks), THREADS, 0, stream>>>(
                in, y, L.n, strided_index(L), L.error_flag);
    }
    BRAID_CUDA_CHECK(cudaGetLastError());
}

template <typename T> void launch_where(const ElemwiseLaunch& L, cudaStream_t stream) {
    auto* cond = static_cast<const uint8_t*>(L.in[0]);
    auto* a = static_cast<const T*>(L.in[1]);
    auto* b = static_cast<const T*>(L.in[2]);
    auto* y = static_cast<T*>(L.out);
    unsigned blocks = grid_blocks(L.n, THREADS, L.max_blocks);
    if (L.flat)
        where_flat_kernel<T><<<blocks, THREADS, 0, stream>>>(cond, a, b, y, L.n, L.scalar[0],
                                                             L.scalar[1], L.scalar[2]);
    else
        where_strided_kernel<T>
            <<<blocks, THREADS, 0, stream>>>(cond, a, b, y, L.n, strided_index(L));
    BRAID_CUDA_CHECK(cudaGetLastError());
}

// Dispatch tables, one line per (mode, kernel), the same tables as the CPU's.
#define BRAID_CASE(MODE, OUT, OP, ARITY)                                                           \
    case M::MODE:                                                                                  \
        return launch_op<Tr, OUT, OP, ARITY>(L, s), true

//! The modes every number type has: integers and floats alike.
template <typename Tr> bool launch_numeric(const ElemwiseLaunch& L, cudaStream_t s) {
    switch (L.mode) {
        BRAID_CASE(NEG, Tr, NegOp, 1);
        BRAID_CASE(ABS, Tr, AbsOp, 1);
        BRAID_CASE(SIGN, Tr, SignOp, 1);
        BRAID_CASE(RELU, Tr, ReluOp, 1);
        BRAID_CASE(SQUARE, Tr, SquareOp, 1);
        BRAID_CASE(ADD, Tr, AddOp, 2);
        BRAID_CASE(SUB, Tr, SubOp, 2);
        BRAID_CASE(MUL, Tr, MulOp, 2);
        BRAID_CASE(FLOOR_DIV, Tr, FloorDivOp, 2);
        BRAID_CASE(MOD, Tr, ModOp, 2);
        BRAID_CASE(POW, Tr, PowOp, 2);
        BRAID_CASE(MAX, Tr, MaxOp, 2);
        BRAID_CASE(MIN, Tr, MinOp, 2);
        BRAID_CASE(LT, BoolOut, LtOp, 2);
        BRAID_CASE(LEQ, BoolOut, LeqOp, 2);
        BRAID_CASE(EQ, BoolOut, EqOp, 2);
        BRAID_CASE(NEQ, BoolOut, NeqOp, 2);
        BRAID_CASE(CLIP, Tr, ClipOp, 3);
        BRAID_CASE(COND_LEQ_MOV, Tr, CondLeqMovOp, 3);
        BRAID_CASE(FMA3, Tr, Fma3Op, 3);
    default:
        return false;
    }
}

//! The float modes: the numeric ones and those only floats have.
template <typename Tr> bool launch_float(const ElemwiseLaunch& L, cudaStream_t s) {
    switch (L.mode) {
        BRAID_CASE(EXP, Tr, ExpOp, 1);
        BRAID_CASE(EXPM1, Tr, Expm1Op, 1);
        BRAID_CASE(LOG, Tr, LogOp, 1);
        BRAID_CASE(LOG1P, Tr, Log1pOp, 1);
        BRAID_CASE(SQRT, Tr, SqrtOp, 1);
        BRAID_CASE(RSQRT, Tr, RsqrtOp, 1);
        BRAID_CASE(SIN, Tr, SinOp, 1);
        BRAID_CASE(COS, Tr, CosOp, 1);
        BRAID_CASE(TANH, Tr, TanhOp, 1);
        BRAID_CASE(SIGMOID, Tr, SigmoidOp, 1);
        BRAID_CASE(GELU, Tr, GeluOp, 1);
        BRAID_CASE(GELU_TANH, Tr, GeluTanhOp, 1);
        BRAID_CASE(SILU, Tr, SiluOp, 1);
        BRAID_CASE(ERF, Tr, ErfOp, 1);
        BRAID_CASE(FLOOR, Tr, FloorOp, 1);
        BRAID_CASE(CEIL, Tr, CeilOp, 1);
        BRAID_CASE(ROUND, Tr, RoundOp, 1);
        BRAID_CASE(TRUE_DIV, Tr, TrueDivOp, 2);
    default:
        return launch_numeric<Tr>(L, s);
    }
}

bool launch_bool(const ElemwiseLaunch& L, cudaStream_t s) {
    using Tr = Bool;
    switch (L.mode) {
        BRAID_CASE(LOGICAL_NOT, BoolOut, LogicalNotOp, 1);
        BRAID_CASE(LOGICAL_AND, BoolOut, AndOp, 2);
        BRAID_CASE(LOGICAL_OR, BoolOut, OrOp, 2);
        BRAID_CASE(LOGICAL_XOR, BoolOut, XorOp, 2);
        BRAID_CASE(EQ, BoolOut, EqOp, 2);
        BRAID_CASE(NEQ, BoolOut, NeqOp, 2);
    default:
        return false;
    }
}
#undef BRAID_CASE

} // namespace

bool launch_elemwise(const ElemwiseLaunch& L, cudaStream_t stream) {
    if (L.n == 0) return true;
    if (L.mode == M::WHERE) {
        switch (DtypeCode(L.dtype)) {
        case DtypeCode::I8:
        case DtypeCode::U8:
        case DtypeCode::BOOL:
            return launch_where<uint8_t>(L, stream), true;
        case DtypeCode::F16:
        case DtypeCode::BF16:
            return launch_where<uint16_t>(L, stream), true;
        case DtypeCode::F32:
        case DtypeCode::I32:
            return launch_where<uint32_t>(L, stream), true;
        case DtypeCode::I64:
            return launch_where<uint64_t>(L, stream), true;
        }
        return false;
    }
    switch (DtypeCode(L.dtype)) {
    case DtypeCode::F32:
        return launch_float<F32>(L, stream);
    case DtypeCode::F16:
        return launch_float<F16>(L, stream);
    case DtypeCode::BF16:
        return launch_float<BF16>(L, stream);
    case DtypeCode::I32:
        return launch_numeric<I32>(L, stream);
    case DtypeCode::I64:
        return launch_numeric<I64>(L, stream);
    case DtypeCode::BOOL:
        return launch_bool(L, stream);
    default:
        return false;
    }
}

} // namespace braid::cuda
