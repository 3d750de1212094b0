// The im2col CUDA kernel of Conv2d (used when cuDNN is not available): one thread per column
// element, zero outside the padded input.
#include "base/cuda_check.h"
#include "operators/cuda/conv_kernels.h"
#include "operators/cuda/device_types.cuh"

namespace braid::cuda {

namespace {

template <typename T>
__global__ void im2col_kernel(const T* x, T* cols, Im2colGeometry g, int64_t total) {
    int64_t p_count = g.oh * g.ow;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t p = e % p_count, row = e / p_count;
        int64_t s = row % g.kw, r = (row / g.kw) % g.kh, c = row / (int64_t(g.kh) * g.kw);
        int64_t oy = p / g.ow, ox = p % g.ow;
        int64_t iy = oy * g.sh - g.ph + r * g.dh, ix = ox * g.sw - g.pw + s * g.dw;
        bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
        cols[e] = inside ? x[(c * g.h + iy) * g.w + ix] : T(0);
    }
}

template <typename T>
void im2col_typed(const void* x, void* cols, const Im2colGeometry& g, int64_t total,
                  cudaStream_t stream) {
    im2col_kernel<T><<<grid_blocks(total, 256, 65535), 256, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(cols), g, total);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace

void launch_im2col(const void* x, void* cols, const Im2colGeometry& g, int elem_size,
                   cudaStream_t stream) {
    int64_t total = g.c * g.kh * g.kw * g.oh * g.ow;
    if (total == 0) return;
    switch (elem_size) {
    case 1:
        return im2col_typed<uint8_t>(x, cols, g, total, stream);
    case 2:
        return im2col_typed<uint16_t>(x, cols, g, total, stream);
    case 4:
        return im2col_typed<uint32_t>(x, cols, g, total, stream);
    default:
        return im2col_typed<uint64_t>(x, cols, g, total, stream);
    }
}

} // namespace braid::cuda
