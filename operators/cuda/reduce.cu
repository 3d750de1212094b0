// Reduction CUDA kernels: one pass reduces the middle axis of an (outer, n, inner) view.
//
// inner == 1 (the reduced axis is innermost): one block per output entry and split, a
// block-wide tree reduction. inner > 1: one thread per (outer, split, inner) entry walking the
// axis, so neighbouring threads read neighbouring addresses. Long axes are split across blocks
// and reduced again by a second pass over the partial results.
//
// ArgReduce: with inner == 1, one warp per row, each lane scanning its elements in order and the
// lanes' (value, index) winners combined by index order; else one thread per (outer, inner)
// column scanning the axis in order, as the CPU kernel.
#include "base/cuda_check.h"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/reduce_kernels.h"

#include <cfloat>
#include <climits>
#include <type_traits>

namespace braid::cuda {

namespace {

//! Integer sums and products wrap (through uint64), like the CPU kernel.
template <typename Acc> __device__ __forceinline__ Acc wrap_add(Acc a, Acc b) {
    if constexpr (std::is_integral_v<Acc>)
        return Acc(uint64_t(a) + uint64_t(b));
    else
        return a + b;
}

template <typename Acc, int COMBINE> struct Combine;
template <typename Acc> struct Combine<Acc, int(ReduceCombine::SUM)> {
    __device__ static Acc init() { return Acc(0); }
    __device__ static Acc apply(Acc a, Acc b) { return wrap_add(a, b); }
};
template <typename Acc>
struct Combine<Acc, int(ReduceCombine::SUM_SQR)> : Combine<Acc, int(ReduceCombine::SUM)> {};
template <typename Acc> struct Combine<Acc, int(ReduceCombine::PROD)> {
    __device__ static Acc init() { return Acc(1); }
    __device__ static Acc apply(Acc a, Acc b) {
        if constexpr (std::is_integral_v<Acc>)
            return Acc(uint64_t(a) * uint64_t(b));
        else
            return a * b;
    }
};
// MAX and MIN propagate NaN like the CPU kernel: b wins when it is NaN.
template <typename Acc> struct Combine<Acc, int(ReduceCombine::MAX)> {
    __device__ static Acc init() {
        if constexpr (sizeof(Acc) == 8)
            return Acc(LLONG_MIN);
        else
            return Acc(-INFINITY);
    }
    __device__ static Acc apply(Acc a, Acc b) { return (b > a || b != b) ? b : a; }
};
template <typename Acc> struct Combine<Acc, int(ReduceCombine::MIN)> {
    __device__ static Acc init() {
        if constexpr (sizeof(Acc) == 8)
            return Acc(LLONG_MAX);
        else
            return Acc(INFINITY);
    }
    __device__ static Acc apply(Acc a, Acc b) { return (b < a || b != b) ? b : a; }
};

//! Double accumulators (of PROD over float inputs) as an input type.
struct F64 {
    using S = double;
    using C = double;
    static constexpr bool IS_FLOAT = true;
    __device__ static C load(S v) { return v; }
};

template <typename Tr, int COMBINE> struct AccOf {
    using type = std::conditional_t<
        !Tr::IS_FLOAT, int64_t,
        std::conditional_t<COMBINE == int(ReduceCombine::PROD) || std::is_same_v<Tr, F64>, double,
                           float>>;
};

//! An input element as an accumulator: squared for SUM_SQR (integers wrap, like the CPU).
template <typename Tr, int COMBINE>
__device__ __forceinline__ typename AccOf<Tr, COMBINE>::type load_acc(typename Tr::S v) {
    using Acc = typename AccOf<Tr, COMBINE>::type;
    Acc a = Acc(Tr::load(v));
    if constexpr (COMBINE == int(ReduceCombine::SUM_SQR)) {
        if constexpr (std::is_integral_v<Acc>)
            return Acc(uint64_t(a) * uint64_t(a));
        else
            return a * a;
    } else {
        return a;
    }
}

constexpr int ROW_THREADS = 256;

template <typename Tr, int COMBINE>
__global__ void reduce_rows(const typename Tr::S* in, typename AccOf<Tr, COMBINE>::type* out,
                            int64_t n, int64_t splits, int64_t chunk) {
    using Acc = typename AccOf<Tr, COMBINE>::type;
    using Cb = Combine<Acc, COMBINE>;
    int64_t entry = blockIdx.x; // (o, s)
    int64_t o = entry / splits, s = entry % splits;
    int64_t begin = s * chunk, end = begin + chunk < n ? begin + chunk : n;
    const typename Tr::S* row = in + o * n;
    Acc acc = Cb::init();
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x)
        acc = Cb::apply(acc, load_acc<Tr, COMBINE>(row[k]));
    for (int off = 16; off > 0; off /= 2) acc = Cb::apply(acc, __shfl_down_sync(~0u, acc, off));
    __shared__ Acc warp_acc[ROW_THREADS / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_acc[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < int(blockDim.x / 32) ? warp_acc[lane] : Cb::init();
        for (int off = 16; off > 0; off /= 2) acc = Cb::apply(acc, __shfl_down_sync(~0u, acc, off));
        if (lane == 0) out[entry] = acc;
    }
}

template <typename Tr, int COMBINE>
__global__ void reduce_cols(const typename Tr::S* in, typename AccOf<Tr, COMBINE>::type* out,
                            int64_t outer, int64_t n, int64_t inner, int64_t splits,
                            int64_t chunk) {
    using Acc = typename AccOf<Tr, COMBINE>::type;
    using Cb = Combine<Acc, COMBINE>;
    int64_t total = outer * splits * inner;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t i = e % inner, rest = e / inner;
        int64_t s = rest % splits, o = rest / splits;
        int64_t begin = s * chunk, end = begin + chunk < n ? begin + chunk : n;
        const typename Tr::S* col = in + o * n * inner + i;
        Acc acc = Cb::init();
        for (int64_t k = begin; k < end; ++k)
            acc = Cb::apply(acc, load_acc<Tr, COMBINE>(col[k * inner]));
        out[e] = acc;
    }
}

template <typename Tr, int COMBINE> void launch_pass(const ReducePass& p, cudaStream_t stream) {
    using Acc = typename AccOf<Tr, COMBINE>::type;
    auto* in = static_cast<const typename Tr::S*>(p.in);
    auto* out = static_cast<Acc*>(p.out);
    int64_t chunk = p.splits > 0 ? (p.n + p.splits - 1) / p.splits : p.n;
    if (p.inner == 1) {
        reduce_rows<Tr, COMBINE><<<unsigned(p.outer * p.splits), ROW_THREADS, 0, stream>>>(
            in, out, p.n, p.splits, chunk);
    } else {
        int64_t total = p.outer * p.splits * p.inner;
        reduce_cols<Tr, COMBINE><<<grid_blocks(total, 256, 65535), 256, 0, stream>>>(
            in, out, p.outer, p.n, p.inner, p.splits, chunk);
    }
    BRAID_CUDA_CHECK(cudaGetLastError());
}

template <typename Tr> bool launch_combine(const ReducePass& p, cudaStream_t stream) {
    if constexpr (std::is_same_v<Tr, F64>) {
        // Double accumulators come from PROD only.
        if (p.combine != ReduceCombine::PROD) return false;
        return launch_pass<Tr, int(ReduceCombine::PROD)>(p, stream), true;
    } else {
        switch (p.combine) {
        case ReduceCombine::SUM:
            return launch_pass<Tr, int(ReduceCombine::SUM)>(p, stream), true;
        case ReduceCombine::MAX:
            return launch_pass<Tr, int(ReduceCombine::MAX)>(p, stream), true;
        case ReduceCombine::MIN:
            return launch_pass<Tr, int(ReduceCombine::MIN)>(p, stream), true;
        case ReduceCombine::PROD:
            return launch_pass<Tr, int(ReduceCombine::PROD)>(p, stream), true;
        case ReduceCombine::SUM_SQR:
            return launch_pass<Tr, int(ReduceCombine::SUM_SQR)>(p, stream), true;
        }
        return false;
    }
}

template <typename Acc, typename Tr>
__global__ void finalize_kernel(const Acc* acc, typename Tr::S* out, int64_t n, bool mean,
                                int64_t count) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        Acc v = acc[i];
        if constexpr (std::is_integral_v<Acc>) { // integers: truncating mean, wrapping store
            if (mean) v = count ? v / count : 0;
            using S = typename Tr::S;
            out[i] = S(uint64_t(v)); // modulo 2^32 for int32, like the CPU's T(w)
        } else {
            if (mean) v = v / Acc(count); // 0 / 0 is NaN, as on the CPU
            out[i] = Tr::store(float(v));
        }
    }
}

template <typename Acc, typename Tr>
void launch_finalize(const void* acc, void* out, int64_t n, bool mean, int64_t count,
                     cudaStream_t stream) {
    finalize_kernel<Acc, Tr><<<grid_blocks(n, 256, 65535), 256, 0, stream>>>(
        static_cast<const Acc*>(acc), static_cast<typename Tr::S*>(out), n, mean, count);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------- ArgReduce

template <typename C> __device__ __forceinline__ bool is_nan(C v) {
    if constexpr (std::is_floating_point_v<C>)
        return v != v;
    else
        return false;
}

//! The CPU kernel's rule for a scan in index order: v replaces best when it is strictly more
//! extreme, or when it is the first NaN.
template <bool MAX, typename C> __device__ __forceinline__ bool arg_better(C v, C best) {
    if (is_nan(v)) return !is_nan(best);
    return MAX ? v > best : v < best;
}

//! Merges the winner (ov, oi) of one set of positions into the winner (v, i) of another
//! (index < 0: no position yet). The result is the winner of the union under the scan rule: the
//! lowest-index NaN if any, else the lowest index of the extreme value, whatever the order of
//! merging.
template <bool MAX, typename C>
__device__ __forceinline__ void arg_merge(C& v, int64_t& i, C ov, int64_t oi) {
    if (oi < 0) return;
    if (i < 0 || arg_better<MAX>(ov, v) || (!arg_better<MAX>(v, ov) && oi < i)) {
        v = ov;
        i = oi;
    }
}

constexpr int ARG_ROW_THREADS = 256; //!< 8 rows per block, a warp each

template <typename Tr, bool MAX>
__global__ void arg_reduce_rows(const typename Tr::S* x, int32_t* y, int64_t rows, int64_t n) {
    using C = typename Tr::C;
    int warps = int(blockDim.x) / 32, lane = int(threadIdx.x) % 32;
    // The row loop is uniform across a warp, so every lane reaches the shuffles.
    for (int64_t r = int64_t(blockIdx.x) * warps + int(threadIdx.x) / 32; r < rows;
         r += int64_t(gridDim.x) * warps) {
        const typename Tr::S* row = x + r * n;
        C best{};
        int64_t idx = -1;
        for (int64_t k = lane; k < n; k += 32) {
            C v = Tr::load(row[k]);
            if (idx < 0 || arg_better<MAX>(v, best)) {
                best = v;
                idx = k;
            }
        }
        for (int off = 16; off > 0; off /= 2) {
            C ov = __shfl_xor_sync(~0u, best, off);
            int64_t oi = __shfl_xor_sync(~0u, idx, off);
            arg_merge<MAX>(best, idx, ov, oi);
        }
        if (lane == 0) y[r] = int32_t(idx);
    }
}

template <typename Tr, bool MAX>
__global__ void arg_reduce_cols(const typename Tr::S* x, int32_t* y, int64_t outer, int64_t n,
                                int64_t inner) {
    using C = typename Tr::C;
    int64_t total = outer * inner;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t o = e / inner, i = e % inner;
        const typename Tr::S* col = x + o * n * inner + i;
        C best = Tr::load(col[0]);
        int64_t idx = 0;
        for (int64_t k = 1; k < n; ++k) {
            C v = Tr::load(col[k * inner]);
            if (arg_better<MAX>(v, best)) {
                best = v;
                idx = k;
            }
        }
        y[e] = int32_t(idx);
    }
}

template <typename Tr, bool MAX>
void arg_reduce_typed(const void* xv, int32_t* y, int64_t outer, int64_t n, int64_t inner,
                      cudaStream_t stream) {
    auto* x = static_cast<const typename Tr::S*>(xv);
    if (inner == 1)
        arg_reduce_rows<Tr, MAX>
            <<<grid_blocks(outer, ARG_ROW_THREADS / 32, 65535), ARG_ROW_THREADS, 0, stream>>>(
                x, y, outer, n);
    else
        arg_reduce_cols<Tr, MAX>
            <<<grid_blocks(outer * inner, 256, 65535), 256, 0, stream>>>(x, y, outer, n, inner);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

template <typename Tr>
void arg_reduce_mode(bool is_max, const void* x, int32_t* y, int64_t outer, int64_t n,
                     int64_t inner, cudaStream_t stream) {
    if (is_max)
        arg_reduce_typed<Tr, true>(x, y, outer, n, inner, stream);
    else
        arg_reduce_typed<Tr, false>(x, y, outer, n, inner, stream);
}

} // namespace

bool launch_reduce_pass(const ReducePass& p, cudaStream_t stream) {
    if (p.outer * p.splits * p.inner == 0) return true;
    if (p.in_dtype == REDUCE_ACC_F64) return launch_combine<F64>(p, stream);
    switch (DtypeCode(p.in_dtype)) {
    case DtypeCode::F32:
        return launch_combine<F32>(p, stream);
    case DtypeCode::F16:
        return launch_combine<F16>(p, stream);
    case DtypeCode::BF16:
        return launch_combine<BF16>(p, stream);
    case DtypeCode::I32:
        return launch_combine<I32>(p, stream);
    case DtypeCode::I64:
        return launch_combine<I64>(p, stream);
    default:
        return false;
    }
}

bool launch_reduce_finalize(int acc_dtype, const void* acc, int out_dtype, void* out, int64_t n,
                            bool mean, int64_t count, cudaStream_t stream) {
    if (n == 0) return true;
    if (acc_dtype == REDUCE_ACC_F64) {
        switch (DtypeCode(out_dtype)) {
        case DtypeCode::F32:
            return launch_finalize<double, F32>(acc, out, n, mean, count, stream), true;
        case DtypeCode::F16:
            return launch_finalize<double, F16>(acc, out, n, mean, count, stream), true;
        case DtypeCode::BF16:
            return launch_finalize<double, BF16>(acc, out, n, mean, count, stream), true;
        default:
            return false;
        }
    }
    bool float_acc = DtypeCode(acc_dtype) == DtypeCode::F32;
    switch (DtypeCode(out_dtype)) {
    case DtypeCode::F32:
        return float_acc && (launch_finalize<float, F32>(acc, out, n, mean, count, stream), true);
    case DtypeCode::F16:
        return float_acc && (launch_finalize<float, F16>(acc, out, n, mean, count, stream), true);
    case DtypeCode::BF16:
        return float_acc && (launch_finalize<float, BF16>(acc, out, n, mean, count, stream), true);
    case DtypeCode::I32:
        return !float_acc &&
               (launch_finalize<int64_t, I32>(acc, out, n, mean, count, stream), true);
    case DtypeCode::I64:
        return !float_acc &&
               (launch_finalize<int64_t, I64>(acc, out, n, mean, count, stream), true);
    default:
        return false;
    }
}

bool launch_arg_reduce(int dtype, bool is_max, const void* x, int32_t* y, int64_t outer, int64_t n,
                       int64_t inner, cudaStream_t stream) {
    if (outer * inner == 0) return true;
    switch (DtypeCode(dtype)) {
    case DtypeCode::F32:
        return arg_reduce_mode<F32>(is_max, x, y, outer, n, inner, stream), true;
    case DtypeCode::F16:
        return arg_reduce_mode<F16>(is_max, x, y, outer, n, inner, stream), true;
    case DtypeCode::BF16:
        return arg_reduce_mode<BF16>(is_max, x, y, outer, n, inner, stream), true;
    case DtypeCode::I32:
        return arg_reduce_mode<I32>(is_max, x, y, outer, n, inner, stream), true;
    case DtypeCode::I64:
        return arg_reduce_mode<I64>(is_max, x, y, outer, n, inner, stream), true;
    default:
        return false;
    }
}

} // namespace braid::cuda
