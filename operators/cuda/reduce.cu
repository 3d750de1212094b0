// Reduction CUDA kernels: one pass reduces the middle axis of an (outer, n, inner) view.
//
// inner == 1 (the reduced axis is innermost): one block per output entry and split, a
// block-wide tree reduction. inner > 1: one thread per (outer, split, inner) entry walking the
// axis, so neighbouring threads read neighbouring addresses. Long axes are split across blocks
// and reduced again by a second pass over the partial results.
#include "base/cuda_check.h"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/reduce_kernels.h"

#include <cfloat>
#include <climits>

namespace braid::cuda {

namespace {

template <typename Acc, int COMBINE> struct Combine;
template <typename Acc> struct Combine<Acc, int(ReduceCombine::SUM)> {
    __device__ static Acc init() { return Acc(0); }
    __device__ static Acc apply(Acc a, Acc b) { return a + b; }
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

template <typename Tr> struct AccOf { using type = float; };
template <> struct AccOf<I32> { using type = int64_t; };
template <> struct AccOf<I64> { using type = int64_t; };

constexpr int ROW_THREADS = 256;

template <typename Tr, int COMBINE>
__global__ void reduce_rows(const typename Tr::S* in, typename AccOf<Tr>::type* out, int64_t n,
                            int64_t splits, int64_t chunk) {
    using Acc = typename AccOf<Tr>::type;
    using Cb = Combine<Acc, COMBINE>;
    int64_t entry = blockIdx.x; // (o, s)
    int64_t o = entry / splits, s = entry % splits;
    int64_t begin = s * chunk, end = begin + chunk < n ? begin + chunk : n;
    const typename Tr::S* row = in + o * n;
    Acc acc = Cb::init();
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x)
        acc = Cb::apply(acc, Acc(Tr::load(row[k])));
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
__global__ void reduce_cols(const typename Tr::S* in, typename AccOf<Tr>::type* out, int64_t outer,
                            int64_t n, int64_t inner, int64_t splits, int64_t chunk) {
    using Acc = typename AccOf<Tr>::type;
    using Cb = Combine<Acc, COMBINE>;
    int64_t total = outer * splits * inner;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t i = e % inner, rest = e / inner;
        int64_t s = rest % splits, o = rest / splits;
        int64_t begin = s * chunk, end = begin + chunk < n ? begin + chunk : n;
        const typename Tr::S* col = in + o * n * inner + i;
        Acc acc = Cb::init();
        for (int64_t k = begin; k < end; ++k) acc = Cb::apply(acc, Acc(Tr::load(col[k * inner])));
        out[e] = acc;
    }
}

template <typename Tr, int COMBINE> void launch_pass(const ReducePass& p, cudaStream_t stream) {
    using Acc = typename AccOf<Tr>::type;
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

template <typename Tr> void launch_combine(const ReducePass& p, cudaStream_t stream) {
    switch (p.combine) {
    case ReduceCombine::SUM:
        return launch_pass<Tr, int(ReduceCombine::SUM)>(p, stream);
    case ReduceCombine::MAX:
        return launch_pass<Tr, int(ReduceCombine::MAX)>(p, stream);
    case ReduceCombine::MIN:
        return launch_pass<Tr, int(ReduceCombine::MIN)>(p, stream);
    }
}

template <typename Acc, typename Tr>
__global__ void finalize_kernel(const Acc* acc, typename Tr::S* out, int64_t n, bool mean,
                                int64_t count) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        Acc v = acc[i];
        if constexpr (sizeof(Acc) == 8) { // integers: truncating mean, saturating store
            if (mean) v = count ? v / count : 0;
            using S = typename Tr::S;
            if constexpr (sizeof(S) == 4) v = v < INT_MIN ? INT_MIN : v > INT_MAX ? INT_MAX : v;
            out[i] = S(v);
        } else {
            if (mean) v = v / float(count); // 0 / 0 is NaN, as on the CPU
            out[i] = Tr::store(v);
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

} // namespace

bool launch_reduce_pass(const ReducePass& p, cudaStream_t stream) {
    if (p.outer * p.splits * p.inner == 0) return true;
    switch (DtypeCode(p.in_dtype)) {
    case DtypeCode::F32:
        return launch_combine<F32>(p, stream), true;
    case DtypeCode::F16:
        return launch_combine<F16>(p, stream), true;
    case DtypeCode::BF16:
        return launch_combine<BF16>(p, stream), true;
    case DtypeCode::I32:
        return launch_combine<I32>(p, stream), true;
    case DtypeCode::I64:
        return launch_combine<I64>(p, stream), true;
    default:
        return false;
    }
}

bool launch_reduce_finalize(bool float_acc, const void* acc, int out_dtype, void* out, int64_t n,
                            bool mean, int64_t count, cudaStream_t stream) {
    if (n == 0) return true;
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

} // namespace braid::cuda
