// BatchNorm CUDA kernels (inference form, operators/batch_norm.h): one thread per channel folds
// the statistics into a multiplier and an offset in double, then one thread per element applies
// them. Products and sums go through __fmul_rn / __fadd_rn / __dmul_rn / __dsub_rn so that nvcc
// does not contract them into FMAs: the CPU kernel rounds each step, and so do these.
#include "base/cuda_check.h"
#include "operators/cuda/batch_norm_kernels.h"
#include "operators/cuda/device_types.cuh"

namespace braid::cuda {

namespace {

constexpr int THREADS = 256;

//! Element i of a statistic of dtype code `dt` (float32, float16 or bfloat16) as a float.
__device__ __forceinline__ float load_stat(const void* p, int dt, int64_t i) {
    switch (DtypeCode(dt)) {
    case DtypeCode::F16:
        return half_bits_to_float(static_cast<const uint16_t*>(p)[i]);
    case DtypeCode::BF16:
        return bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
    default:
        return static_cast<const float*>(p)[i];
    }
}

__global__ void fold_kernel(BatchNormStats s, float* fold, int64_t c, float eps) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < c;
         i += int64_t(gridDim.x) * blockDim.x) {
        double scale = load_stat(s.scale, s.scale_dtype, i);
        double bias = load_stat(s.bias, s.bias_dtype, i);
        double mean = load_stat(s.mean, s.mean_dtype, i);
        double var = load_stat(s.var, s.var_dtype, i);
        double a = scale / sqrt(__dadd_rn(var, double(eps)));
        fold[i] = float(a);
        fold[c + i] = float(__dsub_rn(bias, __dmul_rn(mean, a)));
    }
}

template <typename Tr>
__global__ void apply_kernel(const typename Tr::S* x, typename Tr::S* y, const float* fold,
                             int64_t c, int64_t inner, int64_t total) {
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t ch = (e / inner) % c;
        y[e] = Tr::store(__fadd_rn(__fmul_rn(Tr::load(x[e]), fold[ch]), fold[c + ch]));
    }
}

bool is_float_dtype(int dt) {
    return DtypeCode(dt) == DtypeCode::F32 || DtypeCode(dt) == DtypeCode::F16 ||
           DtypeCode(dt) == DtypeCode::BF16;
}

template <typename Tr>
void apply_typed(const void* x, void* y, const float* fold, int64_t c, int64_t inner, int64_t total,
                 cudaStream_t stream) {
    apply_kernel<Tr><<<grid_blocks(total, THREADS, 65535), THREADS, 0, stream>>>(
        static_cast<const typename Tr::S*>(x), static_cast<typename Tr::S*>(y), fold, c, inner,
        total);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace

bool launch_batch_norm(int dtype, const void* x, void* y, const BatchNormStats& stats, float* fold,
                       int64_t outer, int64_t c, int64_t inner, float eps, cudaStream_t stream) {
    for (int dt : {dtype, stats.scale_dtype, stats.bias_dtype, stats.mean_dtype, stats.var_dtype})
        if (!is_float_dtype(dt)) return false;
    int64_t total = outer * c * inner;
    if (total == 0) return true;
    fold_kernel<<<grid_blocks(c, THREADS, 65535), THREADS, 0, stream>>>(stats, fold, c, eps);
    BRAID_CUDA_CHECK(cudaGetLastError());
    switch (DtypeCode(dtype)) {
    case DtypeCode::F32:
        return apply_typed<F32>(x, y, fold, c, inner, total, stream), true;
    case DtypeCode::F16:
        return apply_typed<F16>(x, y, fold, c, inner, total, stream), true;
    case DtypeCode::BF16:
        return apply_typed<BF16>(x, y, fold, c, inner, total, stream), true;
    default:
        return false; // not reached: checked above
    }
}

} // namespace braid::cuda
