// Tensor copies that involve CUDA devices (CUDA builds only): host to device, device to
// host, device to device (same or another device), any strides.
#pragma once

#include "memory/cuda_copy_kernel.h"
#include "memory/tensor.h"

#include <cuda_runtime_api.h>

namespace braid {

/*!
 * Copies the elements of `src` into `dst` (same shape and dtype; either or both on a CUDA
 * device; any strides).
 *
 * With a `stream`, the copy is enqueued on it (asynchronous; a device-to-pageable-host copy
 * still returns only once done, as cudaMemcpyAsync does); without one (nullptr) it is
 * synchronous. Contiguous copies are one cudaMemcpy; strided ones run the strided copy
 * kernel on the device, making a contiguous temporary from `scratch` when the strides are
 * on the other side of a host/device boundary. `scratch` must allocate on the device that
 * needs the temporary and, with a stream, be that stream's allocator (see cuda_allocator.h).
 */
void cuda_copy_tensor(Tensor& dst, const Tensor& src, cudaStream_t stream,
                      const std::shared_ptr<Allocator>& scratch);

//! The element walk of a strided kernel over two layouts of one shape (dst's and src's): dims
//! of size 1 dropped, neighbours merged where both layouts stay linear across them.
::braid::cuda::StridedCopyDesc strided_walk(const TensorLayout& dst, const TensorLayout& src,
                                            int elem_size);

//! Enqueues a device-to-device strided copy (dst and src on one device) on `stream`.
void cuda_copy_strided(const Tensor& dst, const Tensor& src, cudaStream_t stream);

} // namespace braid
