// Elementwise CUDA kernels: every ElemMode on float32, float16 and bfloat16 (computed in
// float32) and on int32 and int64, with numpy broadcasting.
//
// Two kernels per mode and type: a flat one for the common case where each input is either
// the output's size or a single element (16-byte vector loads when aligned), and a strided
// one that maps each output index to input offsets through broadcast strides.
#include "base/cuda_check.h"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/elemwise_kernels.h"

namespace braid::cuda {

namespace {

enum Mode : int {
    NEG,
    ABS,
    RELU,
    EXP,
    LOG,
    TANH,
    SIGMOID,
    ADD,
    SUB,
    MUL,
    TRUE_DIV,
    FLOOR_DIV,
    MAX,
    MIN
};

// ---- scalar functions, same expressions as the CPU kernels (operators/elemwise.cpp) ----
#define BRAID_UNARY(NAME, EXPR)                                                                    \
    struct NAME {                                                                                  \
        template <typename T> __device__ static T apply(T x, T, int*) { return EXPR; }             \
    };
BRAID_UNARY(NegOp, -x)
BRAID_UNARY(AbsOp, x < T(0) ? -x : x)
BRAID_UNARY(ReluOp, x > T(0) ? x : T(0))
BRAID_UNARY(ExpOp, expf(x))
BRAID_UNARY(LogOp, logf(x))
BRAID_UNARY(TanhOp, tanhf(x))
BRAID_UNARY(SigmoidOp, T(1) / (T(1) + expf(-x)))
#undef BRAID_UNARY

#define BRAID_BINARY(NAME, EXPR)                                                                   \
    struct NAME {                                                                                  \
        template <typename T> __device__ static T apply(T a, T b, int*) { return EXPR; }           \
    };
BRAID_BINARY(AddOp, a + b)
BRAID_BINARY(SubOp, a - b)
BRAID_BINARY(MulOp, a* b)
BRAID_BINARY(DivOp, a / b)
BRAID_BINARY(MaxOp, a > b ? a : b)
BRAID_BINARY(MinOp, a < b ? a : b)
#undef BRAID_BINARY

struct FloorDivOp {
    template <typename T> __device__ static T apply(T a, T b, int* err) {
        if (b == 0) {
            *err = 1; // reported by the host after the kernel (integer division by zero)
            return 0;
        }
        T q = a / b;
        return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
    }
};

template <typename S, int V> struct alignas(16) Pack { S v[V]; };

template <typename Tr, typename Op, int ARITY>
__global__ void flat_kernel(const typename Tr::S* a, const typename Tr::S* b, typename Tr::S* y,
                            int64_t n, bool a_scalar, bool b_scalar, bool vec_ok, int* err) {
    using S = typename Tr::S;
    using C = typename Tr::C;
    constexpr int V = 16 / sizeof(S);
    int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    int64_t step = int64_t(gridDim.x) * blockDim.x;
    C a0 = a_scalar ? Tr::load(a[0]) : C(0);
    C b0 = (ARITY == 2 && b_scalar) ? Tr::load(b[0]) : C(0);
    int64_t done = 0;
    if (vec_ok) {
        int64_t nv = n / V;
        for (int64_t i = tid; i < nv; i += step) {
            Pack<S, V> pa, pb, py;
            if (!a_scalar) pa = reinterpret_cast<const Pack<S, V>*>(a)[i];
            if (ARITY == 2 && !b_scalar) pb = reinterpret_cast<const Pack<S, V>*>(b)[i];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                C av = a_scalar ? a0 : Tr::load(pa.v[k]);
                C bv = ARITY == 2 ? (b_scalar ? b0 : Tr::load(pb.v[k])) : C(0);
                py.v[k] = Tr::store(Op::apply(av, bv, err));
            }
            reinterpret_cast<Pack<S, V>*>(y)[i] = py;
        }
        done = nv * V;
    }
    for (int64_t i = done + tid; i < n; i += step) {
        C av = a_scalar ? a0 : Tr::load(a[i]);
        C bv = ARITY == 2 ? (b_scalar ? b0 : Tr::load(b[i])) : C(0);
        y[i] = Tr::store(Op::apply(av, bv, err));
    }
}

struct StridedIndex {
    int ndim;
    int64_t shape[ElemwiseLaunch::MAX_NDIM];
    int64_t stride[2][ElemwiseLaunch::MAX_NDIM];
};

template <typename Tr, typename Op, int ARITY>
__global__ void strided_kernel(const typename Tr::S* a, const typename Tr::S* b, typename Tr::S* y,
                               int64_t n, StridedIndex idx, int* err) {
    using C = typename Tr::C;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        int64_t rest = i, oa = 0, ob = 0;
        for (int d = idx.ndim - 1; d >= 0; --d) {
            int64_t k = rest % idx.shape[d];
            rest /= idx.shape[d];
            oa += k * idx.stride[0][d];
            if (ARITY == 2) ob += k * idx.stride[1][d];
        }
        C av = Tr::load(a[oa]);
        C bv = ARITY == 2 ? Tr::load(b[ob]) : C(0);
        y[i] = Tr::store(Op::apply(av, bv, err));
    }
}

template <typename Tr, typename Op, int ARITY>
void launch_op(const ElemwiseLaunch& L, cudaStream_t stream) {
    using S = typename Tr::S;
    auto* a = static_cast<const S*>(L.in[0]);
    auto* b = static_cast<const S*>(L.in[1]);
    auto* y = static_cast<S*>(L.out);
    constexpr int THREADS = 256;
    if (L.flat) {
        auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
        bool vec_ok =
            aligned(y) && (L.scalar[0] || aligned(a)) && (ARITY == 1 || L.scalar[1] || aligned(b));
        int64_t items =
            vec_ok ? (L.n + 16 / int64_t(sizeof(S)) - 1) / (16 / int64_t(sizeof(S))) : L.n;
        flat_kernel<Tr, Op, ARITY>
            <<<grid_blocks(items, THREADS, L.max_blocks), THREADS, 0, stream>>>(
                a, b, y, L.n, L.scalar[0], L.scalar[1], vec_ok, L.error_flag);
    } else {
        StridedIndex idx;
        idx.ndim = L.ndim;
        for (int d = 0; d < L.ndim; ++d) {
            idx.shape[d] = L.shape[d];
            idx.stride[0][d] = L.stride[0][d];
            idx.stride[1][d] = L.stride[1][d];
        }
        strided_kernel<Tr, Op, ARITY>
            <<<grid_blocks(L.n, THREADS, L.max_blocks), THREADS, 0, stream>>>(a, b, y, L.n, idx,
                                                                              L.error_flag);
    }
    BRAID_CUDA_CHECK(cudaGetLastError());
}

template <typename Tr> bool launch_typed(const ElemwiseLaunch& L, cudaStream_t s) {
    switch (L.mode) {
    case NEG:
        return launch_op<Tr, NegOp, 1>(L, s), true;
    case ABS:
        return launch_op<Tr, AbsOp, 1>(L, s), true;
    case RELU:
        return launch_op<Tr, ReluOp, 1>(L, s), true;
    case ADD:
        return launch_op<Tr, AddOp, 2>(L, s), true;
    case SUB:
        return launch_op<Tr, SubOp, 2>(L, s), true;
    case MUL:
        return launch_op<Tr, MulOp, 2>(L, s), true;
    case MAX:
        return launch_op<Tr, MaxOp, 2>(L, s), true;
    case MIN:
        return launch_op<Tr, MinOp, 2>(L, s), true;
    default:
        break;
    }
    if constexpr (Tr::IS_FLOAT) {
        switch (L.mode) {
        case EXP:
            return launch_op<Tr, ExpOp, 1>(L, s), true;
        case LOG:
            return launch_op<Tr, LogOp, 1>(L, s), true;
        case TANH:
            return launch_op<Tr, TanhOp, 1>(L, s), true;
        case SIGMOID:
            return launch_op<Tr, SigmoidOp, 1>(L, s), true;
        case TRUE_DIV:
            return launch_op<Tr, DivOp, 2>(L, s), true;
        default:
            break;
        }
    } else {
        if (L.mode == FLOOR_DIV) return launch_op<Tr, FloorDivOp, 2>(L, s), true;
    }
    return false;
}

} // namespace

bool launch_elemwise(const ElemwiseLaunch& L, cudaStream_t stream) {
    bool ok = false;
    switch (DtypeCode(L.dtype)) {
    case DtypeCode::F32:
        ok = launch_typed<F32>(L, stream);
        break;
    case DtypeCode::F16:
        ok = launch_typed<F16>(L, stream);
        break;
    case DtypeCode::BF16:
        ok = launch_typed<BF16>(L, stream);
        break;
    case DtypeCode::I32:
        ok = launch_typed<I32>(L, stream);
        break;
    case DtypeCode::I64:
        ok = launch_typed<I64>(L, stream);
        break;
    default:
        break;
    }
    return ok;
}

} // namespace braid::cuda
