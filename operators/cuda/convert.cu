// The dtype conversion kernel (TypeCvt). One kernel for every pair of dtypes: the element
// types are runtime switches (uniform across the grid), which keeps compile time low.
#include "base/cuda_check.h"
#include "operators/cuda/convert_kernels.h"
#include "operators/cuda/device_types.cuh"

namespace braid::cuda {

namespace {

__device__ double load_as_double(DtypeCode dt, const void* base, int64_t i) {
    switch (dt) {
    case DtypeCode::F32:
        return static_cast<const float*>(base)[i];
    case DtypeCode::F16:
        return half_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DtypeCode::BF16:
        return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DtypeCode::I8:
        return static_cast<const int8_t*>(base)[i];
    case DtypeCode::U8:
        return static_cast<const uint8_t*>(base)[i];
    case DtypeCode::I32:
        return static_cast<const int32_t*>(base)[i];
    case DtypeCode::I64:
        return double(static_cast<const int64_t*>(base)[i]);
    case DtypeCode::BOOL:
        return static_cast<const uint8_t*>(base)[i] ? 1.0 : 0.0;
    }
    return 0;
}

template <typename T> __device__ T saturate_int(double v, double lo, double hi) {
    if (v != v) return 0;
    v = trunc(v);
    if (v <= lo) return T(lo);
    if (v >= hi) return T(hi);
    return T(v);
}

__device__ void store_from_double(DtypeCode dt, void* base, int64_t i, double v) {
    switch (dt) {
    case DtypeCode::F32:
        static_cast<float*>(base)[i] = float(v);
        break;
    case DtypeCode::F16:
        static_cast<uint16_t*>(base)[i] = float_to_half_bits(float(v));
        break;
    case DtypeCode::BF16:
        static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(float(v));
        break;
    case DtypeCode::I8:
        static_cast<int8_t*>(base)[i] = saturate_int<int8_t>(v, -128.0, 127.0);
        break;
    case DtypeCode::U8:
        static_cast<uint8_t*>(base)[i] = saturate_int<uint8_t>(v, 0.0, 255.0);
        break;
    case DtypeCode::I32:
        static_cast<int32_t*>(base)[i] = saturate_int<int32_t>(v, -2147483648.0, 2147483647.0);
        break;
    case DtypeCode::I64:
        // 2^63 is the first double past INT64_MAX; the CPU saturates at the limits too.
        if (v != v)
            static_cast<int64_t*>(base)[i] = 0;
        else if (v >= 9223372036854775807.0)
            static_cast<int64_t*>(base)[i] = INT64_MAX;
        else if (v <= -9223372036854775808.0)
            static_cast<int64_t*>(base)[i] = INT64_MIN;
        else
            static_cast<int64_t*>(base)[i] = int64_t(trunc(v));
        break;
    case DtypeCode::BOOL:
        static_cast<uint8_t*>(base)[i] = v != 0;
        break;
    }
}

__global__ void convert_kernel(DtypeCode src_dt, const void* src, DtypeCode dst_dt, void* dst,
                               int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        store_from_double(dst_dt, dst, i, load_as_double(src_dt, src, i));
}

} // namespace

void launch_convert(int src_dtype, const void* src, int dst_dtype, void* dst, int64_t n,
                    cudaStream_t stream) {
    if (n == 0) return;
    convert_kernel<<<grid_blocks(n, 256, 65535), 256, 0, stream>>>(DtypeCode(src_dtype), src,
                                                                   DtypeCode(dst_dtype), dst, n);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace braid::cuda
