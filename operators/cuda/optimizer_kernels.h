// Launch interface of the parameter update CUDA kernels (operators/cuda/optimizer.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! p -= lr * (g + wd * p); with `velocity`: v = momentum * v + g + wd * p; p -= lr * v.
void launch_sgd(float* p, const float* g, float* velocity, int64_t n, float lr, float momentum,
                float weight_decay, cudaStream_t stream);

//! Adam with bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (t = this step).
void launch_adam(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                 float beta2, float eps, float weight_decay, float bc1, float bc2,
                 cudaStream_t stream);

} // namespace braid::cuda
