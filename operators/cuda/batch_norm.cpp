// CUDA kernel of BatchNorm (inference form, operators/batch_norm.h); the device code is
// operators/cuda/batch_norm.cu.
#include "operators/batch_norm.h"
#include "base/error.h"
#include "operators/cuda/batch_norm_kernels.h"
#include "operators/cuda/cuda_kernels.h"

namespace braid::opr::cuda {

namespace {

void batch_norm_cuda(OperatorNode& opr, ExecCtx& ctx) {
    float eps = static_cast<BatchNorm&>(opr).eps();
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const auto& xs = x.shape();
    if (xs.is_empty()) return;
    size_t outer = xs[0], c = xs[1], inner = xs.total_nr_elems() / (outer * c);
    const Tensor &scale = ctx.input(1), &bias = ctx.input(2), &mean = ctx.input(3),
                 &var = ctx.input(4);
    braid::cuda::BatchNormStats stats{scale.raw_ptr(),
                                      bias.raw_ptr(),
                                      mean.raw_ptr(),
                                      var.raw_ptr(),
                                      dtype_code(scale.dtype()),
                                      dtype_code(bias.dtype()),
                                      dtype_code(mean.dtype()),
                                      dtype_code(var.dtype())};
    Tensor fold(TensorShape{2 * c}, dtype::Float32(), opr.comp_node().allocator());
    if (!braid::cuda::launch_batch_norm(dtype_code(x.dtype()), x.raw_ptr(), y.raw_ptr(), stats,
                                        reinterpret_cast<float*>(fold.raw_ptr()), int64_t(outer),
                                        int64_t(c), int64_t(inner), eps,
                                        cuda_context(opr.comp_node()).stream()))
        BRAID_THROW(DTypeError,
                    "{}: no CUDA kernel for input dtype {} with statistics {}, {}, {}, {}",
                    opr.describe(), x.dtype().name(), scale.dtype().name(), bias.dtype().name(),
                    mean.dtype().name(), var.dtype().name());
}

} // namespace

void register_batch_norm_kernels() {
    register_kernel("BatchNorm", Device::Kind::CUDA, &batch_norm_cuda);
}

} // namespace braid::opr::cuda
