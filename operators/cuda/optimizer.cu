// Parameter update CUDA kernels (ParamUpdate), same arithmetic as the CPU kernel.
#include "base/cuda_check.h"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/optimizer_kernels.h"

namespace braid::cuda {

namespace {

__global__ void sgd_kernel(float* p, const float* g, float* vel, int64_t n, float lr,
                           float momentum, float wd) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        if (vel) {
            vel[i] = momentum * vel[i] + g[i] + wd * p[i];
            p[i] -= lr * vel[i];
        } else {
            p[i] -= lr * (g[i] + wd * p[i]);
        }
    }
}

__global__ void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                            float beta1, float beta2, float eps, float wd, float bc1, float bc2) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        float gi = g[i] + wd * p[i];
        m[i] = beta1 * m[i] + (1.f - beta1) * gi;
        v[i] = beta2 * v[i] + (1.f - beta2) * gi * gi;
        p[i] -= lr * (m[i] / bc1) / (sqrtf(v[i] / bc2) + eps);
    }
}

} // namespace

void launch_sgd(float* p, const float* g, float* velocity, int64_t n, float lr, float momentum,
                float weight_decay, cudaStream_t stream) {
    if (n == 0) return;
    sgd_kernel<<<grid_blocks(n, 256, 65535), 256, 0, stream>>>(p, g, velocity, n, lr, momentum,
                                                               weight_decay);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

void launch_adam(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                 float beta2, float eps, float weight_decay, float bc1, float bc2,
                 cudaStream_t stream) {
    if (n == 0) return;
    adam_kernel<<<grid_blocks(n, 256, 65535), 256, 0, stream>>>(p, g, m, v, n, lr, beta1, beta2,
                                                                eps, weight_decay, bc1, bc2);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace braid::cuda
