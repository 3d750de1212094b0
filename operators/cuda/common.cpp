// Helpers shared by the CUDA kernel glue.
#include "base/cuda_check.h"
#include "memory/cuda_allocator.h"
#include "memory/dtype.h"
#include "operators/cuda/cuda_kernels.h"

namespace braid::opr {

namespace cuda {

static_assert(int(DTypeEnum::FLOAT32) == 0 && int(DTypeEnum::FLOAT16) == 1 &&
                  int(DTypeEnum::BFLOAT16) == 2 && int(DTypeEnum::INT8) == 3 &&
                  int(DTypeEnum::UINT8) == 4 && int(DTypeEnum::INT32) == 5 &&
                  int(DTypeEnum::INT64) == 6 && int(DTypeEnum::BOOL) == 7 &&
                  int(DTypeEnum::FLOAT64) == 8,
              "operators/cuda/device_types.cuh numbers dtypes like DTypeEnum");
// FLOAT64 (8) and the dtypes after it (int16, uint16, uint32, uint64) have no device code:
// resolve_kernel (graph/kernel_registry.cpp) refuses every CUDA kernel for an operator with such
// a var, so no such buffer reaches a .cu kernel.

const Tensor& PinnedStaging::stage(const Tensor& host) {
    size_t bytes = host.nr_bytes();
    if (buffer.empty() || buffer.storage().size() < bytes)
        buffer = Tensor(Storage::make(std::max<size_t>(bytes, 1), CudaHostAllocator::instance()), 0,
                        TensorLayout(host.shape(), host.dtype()));
    else
        buffer = Tensor(buffer.storage(), 0, TensorLayout(host.shape(), host.dtype()));
    buffer.copy_from(host);
    return buffer;
}

namespace {
bool is_pinned(const void* p) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return attr.type == cudaMemoryTypeHost;
}
} // namespace

void upload(CompNode cn, Tensor& dst, const Tensor& src, PinnedStaging& staging) {
    if (src.nr_bytes() == 0) return;
    if (src.device().kind != Device::Kind::CPU ||
        (src.layout().is_contiguous() && is_pinned(src.raw_ptr()))) {
        cn.copy(dst, src); // device memory, or pinned host memory: asynchronous as it is
        return;
    }
    cn.copy(dst, staging.stage(src));
}

Tensor contiguous_on(CompNode cn, const Tensor& t) {
    if (t.layout().is_contiguous()) return t;
    Tensor c(t.shape(), t.dtype(), cn.allocator());
    cn.copy(c, t);
    return c;
}

} // namespace cuda

} // namespace braid::opr
