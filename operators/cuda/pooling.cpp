// CUDA kernels of Pooling and PoolingBackward (operators/pooling.h,
// operators/pooling_backward.h); the device code is operators/cuda/pooling.cu.
#include "operators/pooling.h"
#include "base/error.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/pooling_kernels.h"
#include "operators/pooling_backward.h"

namespace braid::opr::cuda {

namespace {

//! The geometry of pooling an NCHW `xs` into `ys` with `p`.
braid::cuda::PoolGeometry pool_geometry(const PoolingParam& p, const TensorShape& xs,
                                        const TensorShape& ys) {
    return {int64_t(xs[0] * xs[1]),
            int64_t(xs[2]),
            int64_t(xs[3]),
            int64_t(ys[2]),
            int64_t(ys[3]),
            p.window_h,
            p.window_w,
            p.stride_h,
            p.stride_w,
            p.pad_h,
            p.pad_w};
}

void pooling_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& p = static_cast<Pooling&>(opr).param();
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    if (!braid::cuda::launch_pooling(dtype_code(x.dtype()), p.mode == PoolMode::MAX,
                                     p.count_include_pad, x.raw_ptr(), y.raw_ptr(),
                                     pool_geometry(p, x.shape(), y.shape()),
                                     cuda_context(opr.comp_node()).stream()))
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                    x.dtype().name());
}

void pooling_backward_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& p = static_cast<PoolingBackward&>(opr).param();
    const Tensor &x = ctx.input(0), &dy = ctx.input(1);
    Tensor& dx = ctx.output(0);
    if (dx.shape().is_empty()) return;
    bool is_max = p.mode == PoolMode::MAX;
    Tensor picks; // max: the element each window picked
    if (is_max)
        picks = Tensor(TensorShape{dy.shape().total_nr_elems()}, dtype::Int64(),
                       opr.comp_node().allocator());
    if (!braid::cuda::launch_pooling_backward(
            dtype_code(x.dtype()), is_max, p.count_include_pad, x.raw_ptr(), dy.raw_ptr(),
            dx.raw_ptr(), is_max ? reinterpret_cast<int64_t*>(picks.raw_ptr()) : nullptr,
            pool_geometry(p, x.shape(), dy.shape()), cuda_context(opr.comp_node()).stream()))
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                    x.dtype().name());
}

} // namespace

void register_pooling_kernels() {
    register_kernel("Pooling", Device::Kind::CUDA, &pooling_cuda);
    register_kernel("PoolingBackward", Device::Kind::CUDA, &pooling_backward_cuda);
}

} // namespace braid::opr::cuda
