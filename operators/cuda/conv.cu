// The im2col and col2im CUDA kernels of Conv2d and its gradients (used when cuDNN is not
// available): im2col with one thread per column element, zero outside the padded input; col2im
// with one thread per image element gathering the column elements that read it.
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

template <typename Tr>
__global__ void col2im_kernel(const float* cols, typename Tr::S* dx, Im2colGeometry g,
                              int64_t total) {
    int64_t p_count = g.oh * g.ow;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t ix = e % g.w, iy = (e / g.w) % g.h, c = e / (g.w * g.h);
        float sum = 0.f;
        for (int r = 0; r < g.kh; ++r) {
            // Output rows oy with oy*sh = iy + ph - r*dh.
            int64_t ty = iy + g.ph - int64_t(r) * g.dh;
            if (ty < 0 || ty % g.sh != 0) continue;
            int64_t oy = ty / g.sh;
            if (oy >= g.oh) continue;
            for (int s = 0; s < g.kw; ++s) {
                int64_t tx = ix + g.pw - int64_t(s) * g.dw;
                if (tx < 0 || tx % g.sw != 0) continue;
                int64_t ox = tx / g.sw;
                if (ox >= g.ow) continue;
                int64_t row = (c * g.kh + r) * g.kw + s;
                sum += cols[row * p_count + oy * g.ow + ox];
            }
        }
        dx[e] = Tr::store(sum);
    }
}

template <typename Tr>
void col2im_typed(const float* cols, void* dx, const Im2colGeometry& g, int64_t total,
                  cudaStream_t stream) {
    col2im_kernel<Tr><<<grid_blocks(total, 256, 65535), 256, 0, stream>>>(
        cols, static_cast<typename Tr::S*>(dx), g, total);
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

bool launch_col2im(const float* cols, void* dx, const Im2colGeometry& g, int dtype,
                   cudaStream_t stream) {
    int64_t total = g.c * g.h * g.w;
    if (total == 0) return true;
    switch (DtypeCode(dtype)) {
    case DtypeCode::F32:
        return col2im_typed<F32>(cols, dx, g, total, stream), true;
    case DtypeCode::F16:
        return col2im_typed<F16>(cols, dx, g, total, stream), true;
    case DtypeCode::BF16:
        return col2im_typed<BF16>(cols, dx, g, total, stream), true;
    default:
        return false;
    }
}

} // namespace braid::cuda
