// Pooling CUDA kernels, with the CPU kernels' arithmetic (operators/pooling.cpp,
// operators/pooling_backward.cpp) in float32 for every float dtype:
//  - forward: one thread per output element walking its window in row-major order;
//  - backward, max: one thread per output element finds the element the window picks, then one
//    thread per input element adds the gradients of the windows that picked it;
//  - backward, average: one thread per input element adds the shares of the windows covering it.
// The backward kernels gather in the order the CPU kernels scatter (windows in row-major order),
// so the sums match it and no atomics are needed.
#include "base/cuda_check.h"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/pooling_kernels.h"

namespace braid::cuda {

namespace {

constexpr int THREADS = 256;

//! The inside part [h0, h1) x [w0, w1) of output (i, j)'s window; never empty (padding is
//! smaller than the window).
struct Window {
    int64_t h0, h1, w0, w1;
    __device__ int64_t count() const { return (h1 - h0) * (w1 - w0); }
};

__device__ __forceinline__ Window window_of(const PoolGeometry& g, int64_t i, int64_t j) {
    int64_t hs = i * g.sh - g.ph, ws = j * g.sw - g.pw;
    return {hs > 0 ? hs : 0, hs + g.kh < g.h ? hs + g.kh : g.h, ws > 0 ? ws : 0,
            ws + g.kw < g.w ? ws + g.kw : g.w};
}

//! The outputs whose windows cover input row (or column) `a`: [first, last], possibly empty.
struct OutputRange {
    int64_t first, last;
};

__device__ __forceinline__ OutputRange covering(int64_t a, int pad, int kernel, int stride,
                                                int64_t out) {
    // Window i covers a when i*stride - pad <= a < i*stride - pad + kernel.
    int64_t lo = a + pad - kernel + 1, hi = a + pad;
    OutputRange r;
    r.first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
    r.last = hi / stride < out - 1 ? hi / stride : out - 1;
    return r;
}

template <typename Tr>
__global__ void max_pool_kernel(const typename Tr::S* x, typename Tr::S* y, PoolGeometry g,
                                int64_t total) {
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t j = e % g.ow, i = (e / g.ow) % g.oh, plane = e / (g.ow * g.oh);
        const typename Tr::S* xp = x + plane * g.h * g.w;
        Window win = window_of(g, i, j);
        float m = -INFINITY;
        for (int64_t a = win.h0; a < win.h1; ++a)
            for (int64_t b = win.w0; b < win.w1; ++b) {
                float v = Tr::load(xp[a * g.w + b]);
                // NaN wins and stays: later elements never compare greater than it.
                if (v > m || v != v) m = v;
                if (m != m) break;
            }
        y[e] = Tr::store(m);
    }
}

template <typename Tr>
__global__ void avg_pool_kernel(const typename Tr::S* x, typename Tr::S* y, PoolGeometry g,
                                int64_t total, bool include_pad) {
    float full = 1.f / float(g.kh * g.kw);
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t j = e % g.ow, i = (e / g.ow) % g.oh, plane = e / (g.ow * g.oh);
        const typename Tr::S* xp = x + plane * g.h * g.w;
        Window win = window_of(g, i, j);
        float sum = 0.f;
        for (int64_t a = win.h0; a < win.h1; ++a)
            for (int64_t b = win.w0; b < win.w1; ++b) sum += Tr::load(xp[a * g.w + b]);
        y[e] = Tr::store(include_pad ? sum * full : sum / float(win.count()));
    }
}

//! picks[e] = the plane-local index of the element output e's window picks: the first largest
//! in row-major order, or the first NaN (the CPU backward's scan, step for step).
template <typename Tr>
__global__ void max_pick_kernel(const typename Tr::S* x, int64_t* picks, PoolGeometry g,
                                int64_t total) {
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t j = e % g.ow, i = (e / g.ow) % g.oh, plane = e / (g.ow * g.oh);
        const typename Tr::S* xp = x + plane * g.h * g.w;
        Window win = window_of(g, i, j);
        int64_t best = win.h0 * g.w + win.w0;
        float m = Tr::load(xp[best]);
        for (int64_t a = win.h0; a < win.h1 && m == m; ++a)
            for (int64_t b = win.w0; b < win.w1; ++b) {
                float v = Tr::load(xp[a * g.w + b]);
                if (v > m || v != v) {
                    m = v;
                    best = a * g.w + b;
                    if (v != v) break;
                }
            }
        picks[e] = best;
    }
}

template <typename Tr>
__global__ void max_pool_backward_kernel(const int64_t* picks, const typename Tr::S* dy,
                                         typename Tr::S* dx, PoolGeometry g, int64_t total) {
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t b = e % g.w, a = (e / g.w) % g.h, plane = e / (g.w * g.h);
        int64_t pos = a * g.w + b, out_base = plane * g.oh * g.ow;
        OutputRange ri = covering(a, g.ph, g.kh, g.sh, g.oh);
        OutputRange rj = covering(b, g.pw, g.kw, g.sw, g.ow);
        float sum = 0.f;
        for (int64_t i = ri.first; i <= ri.last; ++i)
            for (int64_t j = rj.first; j <= rj.last; ++j) {
                int64_t o = out_base + i * g.ow + j;
                if (picks[o] == pos) sum += Tr::load(dy[o]);
            }
        dx[e] = Tr::store(sum);
    }
}

template <typename Tr>
__global__ void avg_pool_backward_kernel(const typename Tr::S* dy, typename Tr::S* dx,
                                         PoolGeometry g, int64_t total, bool include_pad) {
    float full = 1.f / float(g.kh * g.kw);
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t b = e % g.w, a = (e / g.w) % g.h, plane = e / (g.w * g.h);
        int64_t out_base = plane * g.oh * g.ow;
        OutputRange ri = covering(a, g.ph, g.kh, g.sh, g.oh);
        OutputRange rj = covering(b, g.pw, g.kw, g.sw, g.ow);
        float sum = 0.f;
        for (int64_t i = ri.first; i <= ri.last; ++i)
            for (int64_t j = rj.first; j <= rj.last; ++j) {
                // __fmul_rn: rounded before the sum, as on the CPU (no contraction into an FMA).
                sum += __fmul_rn(Tr::load(dy[out_base + i * g.ow + j]),
                                 include_pad ? full : 1.f / float(window_of(g, i, j).count()));
            }
        dx[e] = Tr::store(sum);
    }
}

template <typename Tr>
void pooling_typed(bool is_max, bool include_pad, const void* xv, void* yv, const PoolGeometry& g,
                   cudaStream_t stream) {
    auto* x = static_cast<const typename Tr::S*>(xv);
    auto* y = static_cast<typename Tr::S*>(yv);
    int64_t total = g.planes * g.oh * g.ow;
    unsigned blocks = grid_blocks(total, THREADS, 65535);
    if (is_max)
        max_pool_kernel<Tr><<<blocks, THREADS, 0, stream>>>(x, y, g, total);
    else
        avg_pool_kernel<Tr><<<blocks, THREADS, 0, stream>>>(x, y, g, total, include_pad);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

template <typename Tr>
void pooling_backward_typed(bool is_max, bool include_pad, const void* xv, const void* dyv,
                            void* dxv, int64_t* picks, const PoolGeometry& g, cudaStream_t stream) {
    auto* x = static_cast<const typename Tr::S*>(xv);
    auto* dy = static_cast<const typename Tr::S*>(dyv);
    auto* dx = static_cast<typename Tr::S*>(dxv);
    int64_t outputs = g.planes * g.oh * g.ow, inputs = g.planes * g.h * g.w;
    unsigned in_blocks = grid_blocks(inputs, THREADS, 65535);
    if (is_max) {
        max_pick_kernel<Tr>
            <<<grid_blocks(outputs, THREADS, 65535), THREADS, 0, stream>>>(x, picks, g, outputs);
        BRAID_CUDA_CHECK(cudaGetLastError());
        max_pool_backward_kernel<Tr><<<in_blocks, THREADS, 0, stream>>>(picks, dy, dx, g, inputs);
    } else {
        avg_pool_backward_kernel<Tr>
            <<<in_blocks, THREADS, 0, stream>>>(dy, dx, g, inputs, include_pad);
    }
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace

bool launch_pooling(int dtype, bool is_max, bool count_include_pad, const void* x, void* y,
                    const PoolGeometry& g, cudaStream_t stream) {
    if (g.planes * g.oh * g.ow == 0) return true;
    switch (DtypeCode(dtype)) {
    case DtypeCode::F32:
        return pooling_typed<F32>(is_max, count_include_pad, x, y, g, stream), true;
    case DtypeCode::F16:
        return pooling_typed<F16>(is_max, count_include_pad, x, y, g, stream), true;
    case DtypeCode::BF16:
        return pooling_typed<BF16>(is_max, count_include_pad, x, y, g, stream), true;
    default:
        return false;
    }
}

bool launch_pooling_backward(int dtype, bool is_max, bool count_include_pad, const void* x,
                             const void* dy, void* dx, int64_t* picks, const PoolGeometry& g,
                             cudaStream_t stream) {
    if (g.planes * g.h * g.w == 0) return true;
    switch (DtypeCode(dtype)) {
    case DtypeCode::F32:
        return pooling_backward_typed<F32>(is_max, count_include_pad, x, dy, dx, picks, g, stream),
               true;
    case DtypeCode::F16:
        return pooling_backward_typed<F16>(is_max, count_include_pad, x, dy, dx, picks, g, stream),
               true;
    case DtypeCode::BF16:
        return pooling_backward_typed<BF16>(is_max, count_include_pad, x, dy, dx, picks, g, stream),
               true;
    default:
        return false;
    }
}

} // namespace braid::cuda
