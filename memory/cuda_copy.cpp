#include "memory/cuda_copy.h"

#include "base/cuda_check.h"
#include "base/error.h"
#include "memory/cuda_allocator.h"
#include "memory/cuda_copy_kernel.h"

#include <optional>

namespace braid {

namespace {

bool on_host(const Tensor& t) {
    return t.device().kind == Device::Kind::CPU;
}

void copy_bytes(void* dst, const void* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    // With unified addressing the runtime infers the direction (and peer copies) itself.
    if (stream)
        BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
    else
        BRAID_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
}

//! A contiguous device tensor of `like`'s shape and dtype on `dev`.
Tensor device_temp(const Tensor& like, Device dev, const std::shared_ptr<Allocator>& scratch) {
    if (!scratch || scratch->device() != dev)
        BRAID_THROW(ValueError,
                    "strided copy between {} and {} needs a temporary on {}, and no allocator "
                    "for it was given",
                    like.device().to_string(), dev.to_string(), dev.to_string());
    return Tensor(like.shape(), like.dtype(), scratch);
}

} // namespace

cuda::StridedCopyDesc strided_walk(const TensorLayout& dl, const TensorLayout& sl, int elem_size) {
    size_t shape[TensorShape::MAX_NDIM];
    ptrdiff_t ds[TensorShape::MAX_NDIM], ss[TensorShape::MAX_NDIM];
    size_t nd = collapse_copy_dims(dl, sl, shape, ds, ss);
    cuda::StridedCopyDesc desc;
    desc.elem_size = elem_size;
    desc.ndim = int(nd);
    for (size_t k = 0; k < nd; ++k) {
        desc.shape[k] = int64_t(shape[k]);
        desc.dst_stride[k] = ds[k];
        desc.src_stride[k] = ss[k];
    }
    return desc;
}

void cuda_copy_strided(const Tensor& dst, const Tensor& src, cudaStream_t stream) {
    BRAID_ASSERT(dst.shape() == src.shape() && dst.dtype() == src.dtype(),
                 "strided copy of mismatched tensors");
    auto desc = strided_walk(dst.layout(), src.layout(), int(dst.dtype().size()));
    cuda::launch_strided_copy(desc, dst.raw_ptr(), src.raw_ptr(), stream);
}

void cuda_copy_tensor(Tensor& dst, const Tensor& src, cudaStream_t stream,
                      const std::shared_ptr<Allocator>& scratch) {
    if (src.shape() != dst.shape() || src.dtype() != dst.dtype())
        BRAID_THROW(ShapeError, "copy from {} {} on {} into {} {} on {}: shape or dtype differ",
                    src.shape().to_string(), src.dtype().name(), src.device().to_string(),
                    dst.shape().to_string(), dst.dtype().name(), dst.device().to_string());
    if (dst.nr_bytes() == 0) return;
    if (on_host(src) && on_host(dst)) {
        dst.copy_from(src);
        return;
    }
    bool src_c = src.layout().is_contiguous(), dst_c = dst.layout().is_contiguous();
    if (src_c && dst_c) {
        copy_bytes(dst.raw_ptr(), src.raw_ptr(), dst.nr_bytes(), stream);
        return;
    }
    if (!on_host(src) && src.device() == dst.device()) {
        // Without a stream the kernel runs on the current device's default stream.
        std::optional<CudaDeviceGuard> guard;
        if (!stream) guard.emplace(src.device().index);
        cuda_copy_strided(dst, src, stream);
        if (!stream) BRAID_CUDA_CHECK(cudaStreamSynchronize(nullptr));
        return;
    }
    // Strides across a host/device or device/device boundary: go through a contiguous
    // temporary on the side that has the strides.
    if (!src_c) {
        Tensor tmp = on_host(src) ? src.contiguous() : device_temp(src, src.device(), scratch);
        if (!on_host(src)) {
            std::optional<CudaDeviceGuard> guard;
            if (!stream) guard.emplace(src.device().index);
            cuda_copy_strided(tmp, src, stream);
            if (!stream) BRAID_CUDA_CHECK(cudaStreamSynchronize(nullptr));
        }
        cuda_copy_tensor(dst, tmp, stream, scratch);
        return;
    }
    if (on_host(dst)) {
        Tensor tmp(dst.shape(), dst.dtype());
        copy_bytes(tmp.raw_ptr(), src.raw_ptr(), tmp.nr_bytes(), stream);
        if (stream) BRAID_CUDA_CHECK(cudaStreamSynchronize(stream));
        dst.copy_from(tmp);
        return;
    }
    Tensor tmp = device_temp(dst, dst.device(), scratch);
    copy_bytes(tmp.raw_ptr(), src.raw_ptr(), tmp.nr_bytes(), stream);
    std::optional<CudaDeviceGuard> guard;
    if (!stream) guard.emplace(dst.device().index);
    cuda_copy_strided(dst, tmp, stream);
    if (!stream) BRAID_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

} // namespace braid
