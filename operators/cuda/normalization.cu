// Normalization CUDA kernels: softmax / log-softmax and layer / RMS norm, in float32 for every
// float dtype, with the CPU kernel's formulas (operators/normalization.cpp): softmax subtracts
// the row maximum before exponentiating; norms take the mean first, then the mean squared
// deviation from it (two passes, accurate when |mean| >> std).
//
// Rows along the innermost axis: one warp per row up to 1024 elements, else one block per row.
// Each pass re-reads the row (it stays in L1/L2); a reduction between the passes makes every
// thread finish reading before any writes, so y may be x. Softmax along another axis: one
// thread per (outer, inner) column walking the axis, neighbouring threads on neighbouring
// addresses.
#include "base/cuda_check.h"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/normalization_kernels.h"
#include "operators/cuda/reduce_util.cuh"

namespace braid::cuda {

namespace {

constexpr int64_t WARP_ROW_MAX = 1024; //!< longest row a single warp handles
constexpr int WARP_ROWS_THREADS = 256; //!< 8 rows per block in warp mode

//! Which rows a thread works on and how: a warp per row, or the whole block per row.
struct RowGroup {
    int64_t first, step; //!< first row, row step
    int tid, width;      //!< the thread's index in its group and the group's size
};

template <bool BLOCK> __device__ __forceinline__ RowGroup row_group() {
    RowGroup g;
    if constexpr (BLOCK) {
        g.first = blockIdx.x;
        g.step = gridDim.x;
        g.tid = int(threadIdx.x);
        g.width = int(blockDim.x);
    } else {
        int warps = int(blockDim.x) / 32;
        g.first = int64_t(blockIdx.x) * warps + int(threadIdx.x) / 32;
        g.step = int64_t(gridDim.x) * warps;
        g.tid = int(threadIdx.x) % 32;
        g.width = 32;
    }
    return g;
}

template <bool BLOCK, typename Op>
__device__ __forceinline__ float group_reduce(float v, float* smem) {
    if constexpr (BLOCK)
        return block_reduce<Op>(v, smem);
    else
        return warp_reduce<Op>(v);
}

template <typename Tr, bool BLOCK>
__global__ void softmax_rows_kernel(const typename Tr::S* x, typename Tr::S* y, int64_t rows,
                                    int64_t n, bool log) {
    __shared__ float smem[32];
    RowGroup g = row_group<BLOCK>();
    // Every thread of a block runs the same number of iterations in block mode (the row loop
    // is uniform), so the block reductions are reached by all.
    for (int64_t r = g.first; r < rows; r += g.step) {
        const typename Tr::S* xr = x + r * n;
        typename Tr::S* yr = y + r * n;
        float m = -INFINITY;
        for (int64_t k = g.tid; k < n; k += g.width) {
            float v = Tr::load(xr[k]);
            m = v > m ? v : m;
        }
        m = group_reduce<BLOCK, MaxF>(m, smem);
        float s = 0.f;
        for (int64_t k = g.tid; k < n; k += g.width) s += expf(Tr::load(xr[k]) - m);
        s = group_reduce<BLOCK, SumF>(s, smem);
        if (log) {
            // (x - m) is exact near the maximum; adding m to log(sum) first would round.
            float ls = logf(s);
            for (int64_t k = g.tid; k < n; k += g.width)
                yr[k] = Tr::store((Tr::load(xr[k]) - m) - ls);
        } else {
            float inv = 1.f / s;
            for (int64_t k = g.tid; k < n; k += g.width)
                yr[k] = Tr::store(expf(Tr::load(xr[k]) - m) * inv);
        }
    }
}

template <typename Tr>
__global__ void softmax_cols_kernel(const typename Tr::S* x, typename Tr::S* y, int64_t outer,
                                    int64_t n, int64_t inner, bool log) {
    int64_t total = outer * inner;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t o = e / inner, i = e % inner;
        const typename Tr::S* xc = x + o * n * inner + i;
        typename Tr::S* yc = y + o * n * inner + i;
        float m = -INFINITY;
        for (int64_t k = 0; k < n; ++k) {
            float v = Tr::load(xc[k * inner]);
            m = v > m ? v : m;
        }
        float s = 0.f;
        for (int64_t k = 0; k < n; ++k) s += expf(Tr::load(xc[k * inner]) - m);
        if (log) {
            float ls = logf(s);
            for (int64_t k = 0; k < n; ++k)
                yc[k * inner] = Tr::store((Tr::load(xc[k * inner]) - m) - ls);
        } else {
            float inv = 1.f / s;
            for (int64_t k = 0; k < n; ++k)
                yc[k * inner] = Tr::store(expf(Tr::load(xc[k * inner]) - m) * inv);
        }
    }
}

template <typename Tr, bool BLOCK>
__global__ void norm_rows_kernel(const typename Tr::S* x, const typename Tr::S* w,
                                 const typename Tr::S* b, typename Tr::S* y, int64_t rows,
                                 int64_t n, float eps, bool layer) {
    __shared__ float smem[32];
    RowGroup g = row_group<BLOCK>();
    for (int64_t r = g.first; r < rows; r += g.step) {
        const typename Tr::S* xr = x + r * n;
        typename Tr::S* yr = y + r * n;
        float shift = 0.f;
        if (layer) {
            float s = 0.f;
            for (int64_t k = g.tid; k < n; k += g.width) s += Tr::load(xr[k]);
            shift = group_reduce<BLOCK, SumF>(s, smem) / float(n);
        }
        float q = 0.f;
        for (int64_t k = g.tid; k < n; k += g.width) {
            float d = Tr::load(xr[k]) - shift;
            q += d * d;
        }
        q = group_reduce<BLOCK, SumF>(q, smem);
        // One value per row: computed in double like the CPU kernel.
        float rstd = float(1.0 / sqrt(double(q) / double(n) + double(eps)));
        for (int64_t k = g.tid; k < n; k += g.width) {
            float v = (Tr::load(xr[k]) - shift) * rstd;
            if (w) v *= Tr::load(w[k]);
            if (b) v += Tr::load(b[k]);
            yr[k] = Tr::store(v);
        }
    }
}

//! Launch geometry of a row kernel: warp mode for short rows, else a block per row.
struct RowLaunch {
    bool block;
    unsigned blocks;
    int threads;
};

RowLaunch row_launch(int64_t rows, int64_t n) {
    RowLaunch l;
    l.block = n > WARP_ROW_MAX;
    if (l.block) {
        l.threads = n >= 16384 ? 512 : 256;
        l.blocks = unsigned(rows < 65535 ? rows : 65535);
    } else {
        l.threads = WARP_ROWS_THREADS;
        l.blocks = grid_blocks(rows, WARP_ROWS_THREADS / 32, 65535);
    }
    return l;
}

template <typename Tr>
void softmax_typed(const void* xv, void* yv, int64_t outer, int64_t n, int64_t inner, bool log,
                   cudaStream_t stream) {
    auto* x = static_cast<const typename Tr::S*>(xv);
    auto* y = static_cast<typename Tr::S*>(yv);
    if (inner == 1) {
        RowLaunch l = row_launch(outer, n);
        if (l.block)
            softmax_rows_kernel<Tr, true><<<l.blocks, l.threads, 0, stream>>>(x, y, outer, n, log);
        else
            softmax_rows_kernel<Tr, false><<<l.blocks, l.threads, 0, stream>>>(x, y, outer, n, log);
    } else {
        softmax_cols_kernel<Tr><<<grid_blocks(outer * inner, 256, 65535), 256, 0, stream>>>(
            x, y, outer, n, inner, log);
    }
    BRAID_CUDA_CHECK(cudaGetLastError());
}

template <typename Tr>
void norm_typed(bool layer, const void* xv, const void* wv, const void* bv, void* yv, int64_t rows,
                int64_t n, float eps, cudaStream_t stream) {
    using S = typename Tr::S;
    auto* x = static_cast<const S*>(xv);
    auto* w = static_cast<const S*>(wv);
    auto* b = static_cast<const S*>(bv);
    auto* y = static_cast<S*>(yv);
    RowLaunch l = row_launch(rows, n);
    if (l.block)
        norm_rows_kernel<Tr, true>
            <<<l.blocks, l.threads, 0, stream>>>(x, w, b, y, rows, n, eps, layer);
    else
        norm_rows_kernel<Tr, false>
            <<<l.blocks, l.threads, 0, stream>>>(x, w, b, y, rows, n, eps, layer);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace

bool launch_softmax(int dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                    bool log, cudaStream_t stream) {
    if (outer * n * inner == 0) return true;
    switch (DtypeCode(dtype)) {
    case DtypeCode::F32:
        return softmax_typed<F32>(x, y, outer, n, inner, log, stream), true;
    case DtypeCode::F16:
        return softmax_typed<F16>(x, y, outer, n, inner, log, stream), true;
    case DtypeCode::BF16:
        return softmax_typed<BF16>(x, y, outer, n, inner, log, stream), true;
    default:
        return false;
    }
}

bool launch_norm(int dtype, bool layer, const void* x, const void* w, const void* b, void* y,
                 int64_t rows, int64_t n, float eps, cudaStream_t stream) {
    if (rows * n == 0) return true;
    switch (DtypeCode(dtype)) {
    case DtypeCode::F32:
        return norm_typed<F32>(layer, x, w, b, y, rows, n, eps, stream), true;
    case DtypeCode::F16:
        return norm_typed<F16>(layer, x, w, b, y, rows, n, eps, stream), true;
    case DtypeCode::BF16:
        return norm_typed<BF16>(layer, x, w, b, y, rows, n, eps, stream), true;
    default:
        return false;
    }
}

} // namespace braid::cuda
