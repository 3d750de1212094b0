// braid's CUDA kernels (CUDA builds only): registration and the helpers the kernel glue files
// share.
//
// Layout: each operator family has a .cu file with the device code and a plain launch
// interface (operators/cuda/*_kernels.h, no braid headers, so nvcc stays fast), and a .cpp
// file with the glue: the KernelFn registered for Device::Kind::CUDA, which reads the
// operator's params, picks the stream with cuda_context(opr.comp_node()) and launches.
// A new CUDA kernel for operator type "Foo" is one register_kernel("Foo",
// Device::Kind::CUDA, foo_cuda) line in that family's cuda::register_<family>_kernels(),
// which the family's register_<family>_operators() (operators/<family>.cpp) calls.
#pragma once

#include "graph/cuda_comp_node.h"
#include "graph/kernel_registry.h"
#include "graph/operator_node.h"

namespace braid::opr {

namespace cuda {

//! The kernel state of `opr`, of type S, created on first use.
template <typename S> S& kernel_state(OperatorNode& opr) {
    auto& slot = opr.kernel_state();
    if (!slot) slot = std::make_unique<S>();
    return static_cast<S&>(*slot);
}

//! A pinned host buffer reused across executions (grown when too small).
struct PinnedStaging {
    Tensor buffer;
    //! A pinned tensor of `t`'s shape and dtype holding a copy of `t` (host memory).
    const Tensor& stage(const Tensor& host);
};

//! Copies host tensor `src` into device tensor `dst` on `cn`'s stream, asynchronously: a
//! pageable source is first copied into `staging` (pinned), a pinned one is copied directly.
void upload(CompNode cn, Tensor& dst, const Tensor& src, PinnedStaging& staging);

//! `t` if contiguous, else a contiguous copy made on `cn`'s stream.
Tensor contiguous_on(CompNode cn, const Tensor& t);

//! The dtype code the .cu files use (checked to follow DTypeEnum).
inline int dtype_code(DType dt) {
    return int(dt.enumv());
}

} // namespace cuda
} // namespace braid::opr
