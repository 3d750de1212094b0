// Launch interface of the generator CUDA kernels (operators/cuda/fill.cu): Fill and Arange.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! Enqueues y[i] = the `elem_size`-byte pattern `bits` (little-endian, from the low bytes) for
//! i < n; elem_size is 1, 2, 4 or 8.
void launch_fill(void* y, int64_t n, int elem_size, uint64_t bits, cudaStream_t stream);

//! Enqueues y[i] = start + i * step computed in double (no fused multiply-add, like the CPU)
//! and stored in dtype code `dtype` with the CPU's conversion rules.
void launch_arange(void* y, int64_t n, int dtype, double start, double step, cudaStream_t stream);

} // namespace braid::cuda
