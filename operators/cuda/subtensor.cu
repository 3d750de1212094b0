// The strided accumulation kernel of IncrSubtensor: dst[i] += src[i] through two layouts of
// one shape (the slice of the output and the broadcast value).
#include "base/cuda_check.h"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/subtensor_kernels.h"

#include <type_traits>

namespace braid::cuda {

namespace {

template <typename Tr>
__global__ void strided_add_kernel(StridedCopyDesc desc, typename Tr::S* dst,
                                   const typename Tr::S* src, int64_t n) {
    using C = typename Tr::C;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        int64_t rest = i, doff = 0, soff = 0;
        for (int d = desc.ndim - 1; d >= 0; --d) {
            int64_t k = rest % desc.shape[d];
            rest /= desc.shape[d];
            doff += k * desc.dst_stride[d];
            soff += k * desc.src_stride[d];
        }
        C a = Tr::load(dst[doff]), b = Tr::load(src[soff]);
        if constexpr (std::is_integral_v<C>) {
            using U = std::make_unsigned_t<C>;
            dst[doff] = Tr::store(C(U(a) + U(b))); // wraps like the CPU's two's complement add
        } else {
            dst[doff] = Tr::store(a + b);
        }
    }
}

template <typename Tr>
void launch(const StridedCopyDesc& desc, void* dst, const void* src, int64_t n,
            cudaStream_t stream) {
    strided_add_kernel<Tr><<<grid_blocks(n, 256, 65535), 256, 0, stream>>>(
        desc, static_cast<typename Tr::S*>(dst), static_cast<const typename Tr::S*>(src), n);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace

bool launch_strided_add(int dtype, const StridedCopyDesc& desc, void* dst, const void* src,
                        cudaStream_t stream) {
    int64_t n = 1;
    for (int d = 0; d < desc.ndim; ++d) n *= desc.shape[d];
    switch (DtypeCode(dtype)) {
    case DtypeCode::F32:
        return n == 0 || (launch<F32>(desc, dst, src, n, stream), true);
    case DtypeCode::F16:
        return n == 0 || (launch<F16>(desc, dst, src, n, stream), true);
    case DtypeCode::BF16:
        return n == 0 || (launch<BF16>(desc, dst, src, n, stream), true);
    case DtypeCode::I32:
        return n == 0 || (launch<I32>(desc, dst, src, n, stream), true);
    case DtypeCode::I64:
        return n == 0 || (launch<I64>(desc, dst, src, n, stream), true);
    default:
        return false;
    }
}

} // namespace braid::cuda
