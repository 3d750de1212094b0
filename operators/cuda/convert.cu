// The dtype conversion kernel (TypeCvt). One kernel for every pair of dtypes: the element
// types are runtime switches (uniform across the grid), which keeps compile time low.
#include "base/cuda_check.h"
#include "operators/cuda/convert_device.cuh"
#include "operators/cuda/convert_kernels.h"
#include "operators/cuda/device_types.cuh"

namespace braid::cuda {

namespace {

__global__ void convert_kernel(DtypeCode src_dt, const void* src, DtypeCode dst_dt, void* dst,
                               int64_t n) {
    bool int64_to_float =
        src_dt == DtypeCode::I64 &&
        (dst_dt == DtypeCode::F32 || dst_dt == DtypeCode::F16 || dst_dt == DtypeCode::BF16);
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        if (int64_to_float)
            store_int64_as_float(dst_dt, dst, i, static_cast<const int64_t*>(src)[i]);
        else
            store_from_double(dst_dt, dst, i, load_as_double(src_dt, src, i));
    }
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
