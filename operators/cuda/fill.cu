// Generator CUDA kernels: Fill (one bit pattern) and Arange (start + i * step).
#include "base/cuda_check.h"
#include "operators/cuda/convert_device.cuh"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/fill_kernels.h"

namespace braid::cuda {

namespace {

template <typename T> __global__ void fill_kernel(T* y, int64_t n, T v) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        y[i] = v;
}

__global__ void arange_kernel(void* y, int64_t n, DtypeCode dt, double start, double step) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        // Separately rounded multiply and add: the CPU computes start + double(i) * step
        // without contraction.
        store_from_double(dt, y, i, __dadd_rn(start, __dmul_rn(double(i), step)));
}

template <typename T> void fill_typed(void* y, int64_t n, uint64_t bits, cudaStream_t stream) {
    fill_kernel<T><<<grid_blocks(n, 256, 65535), 256, 0, stream>>>(static_cast<T*>(y), n, T(bits));
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace

void launch_fill(void* y, int64_t n, int elem_size, uint64_t bits, cudaStream_t stream) {
    if (n == 0) return;
    switch (elem_size) {
    case 1:
        return fill_typed<uint8_t>(y, n, bits, stream);
    case 2:
        return fill_typed<uint16_t>(y, n, bits, stream);
    case 4:
        return fill_typed<uint32_t>(y, n, bits, stream);
    default:
        return fill_typed<uint64_t>(y, n, bits, stream);
    }
}

void launch_arange(void* y, int64_t n, int dtype, double start, double step, cudaStream_t stream) {
    if (n == 0) return;
    arange_kernel<<<grid_blocks(n, 256, 65535), 256, 0, stream>>>(y, n, DtypeCode(dtype), start,
                                                                  step);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace braid::cuda
