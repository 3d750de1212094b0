// The strided copy kernel: broadcasts, making tensors contiguous, strided device copies.
#include "memory/cuda_copy_kernel.h"

#include "base/cuda_check.h"

namespace braid::cuda {

namespace {

template <typename T>
__global__ void strided_copy_kernel(StridedCopyDesc desc, T* dst, const T* src, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        int64_t rest = i, doff = 0, soff = 0;
        for (int d = desc.ndim - 1; d >= 0; --d) {
            int64_t idx = rest % desc.shape[d];
            rest /= desc.shape[d];
            doff += idx * desc.dst_stride[d];
            soff += idx * desc.src_stride[d];
        }
        dst[doff] = src[soff];
    }
}

template <typename T>
void launch(const StridedCopyDesc& desc, void* dst, const void* src, int64_t n,
            cudaStream_t stream) {
    int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    strided_copy_kernel<T><<<unsigned(blocks), threads, 0, stream>>>(desc, static_cast<T*>(dst),
                                                                     static_cast<const T*>(src), n);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace

void launch_strided_copy(const StridedCopyDesc& desc, void* dst, const void* src,
                         cudaStream_t stream) {
    int64_t n = 1;
    for (int d = 0; d < desc.ndim; ++d) n *= desc.shape[d];
    if (n == 0) return;
    switch (desc.elem_size) {
    case 1:
        return launch<uint8_t>(desc, dst, src, n, stream);
    case 2:
        return launch<uint16_t>(desc, dst, src, n, stream);
    case 4:
        return launch<uint32_t>(desc, dst, src, n, stream);
    default:
        return launch<uint64_t>(desc, dst, src, n, stream);
    }
}

} // namespace braid::cuda
