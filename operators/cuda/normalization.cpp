// CUDA kernels of Softmax (and log-softmax), LayerNorm and RMSNorm.
#include "operators/normalization.h"
#include "base/error.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/normalization_kernels.h"
#include "operators/kernel_utils.h"

namespace braid::opr::cuda {

namespace {

void softmax_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& param = static_cast<Softmax&>(opr).param();
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    size_t axis = normalize_axis(param.axis, x.shape().ndim(), opr.describe());
    AxisSplit sp = split_shape(x.shape(), axis, axis + 1);
    if (!braid::cuda::launch_softmax(dtype_code(x.dtype()), x.raw_ptr(), y.raw_ptr(),
                                     int64_t(sp.outer), int64_t(sp.n), int64_t(sp.inner), param.log,
                                     cuda_context(opr.comp_node()).stream()))
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                    x.dtype().name());
}

void normalization_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& param = static_cast<Normalization&>(opr).param();
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    size_t next = 1;
    const void* w = param.has_weight ? ctx.input(next++).raw_ptr() : nullptr;
    const void* b = param.has_bias ? ctx.input(next++).raw_ptr() : nullptr;
    size_t nd = x.shape().ndim();
    AxisSplit sp = split_shape(x.shape(), nd - param.normalized_ndim, nd);
    if (!braid::cuda::launch_norm(dtype_code(x.dtype()), param.kind == Normalization::Kind::LAYER,
                                  x.raw_ptr(), w, b, y.raw_ptr(), int64_t(sp.outer), int64_t(sp.n),
                                  param.eps, cuda_context(opr.comp_node()).stream()))
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                    x.dtype().name());
}

} // namespace

void register_normalization_kernels() {
    register_kernel("Softmax", Device::Kind::CUDA, &softmax_cuda);
    register_kernel("LayerNorm", Device::Kind::CUDA, &normalization_cuda);
    register_kernel("RMSNorm", Device::Kind::CUDA, &normalization_cuda);
}

} // namespace braid::opr::cuda
