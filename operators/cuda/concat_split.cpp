// CUDA kernels of Concat (one strided device copy per input into its block of the output) and
// Split (views of the input, as on the CPU).
#include "operators/concat_split.h"
#include "memory/cuda_copy.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/kernel_utils.h"

namespace braid::opr::cuda {

namespace {

void concat_cuda(OperatorNode& opr, ExecCtx& ctx) {
    auto& concat = static_cast<Concat&>(opr);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    cudaStream_t stream = cuda_context(opr.comp_node()).stream();
    size_t axis = normalize_axis(concat.axis(), y.shape().ndim(), opr.describe());
    size_t es = y.dtype().size();
    size_t start = 0;
    for (size_t k = 0; k < ctx.nr_inputs(); ++k) {
        const Tensor& x = ctx.input(k);
        size_t len = x.shape()[axis];
        if (len) {
            // Input k's block: the output's layout cut to `len` along the axis, from `start`.
            TensorLayout l = y.layout();
            l[axis] = len;
            cuda_copy_strided(y.view(l, start * size_t(l.stride[axis]) * es), x, stream);
        }
        start += len;
    }
}

void split_cuda(OperatorNode& opr, ExecCtx& ctx) {
    opr.execute(ctx); // views of the input: no data moves, the same on every device
}

} // namespace

void register_concat_split_kernels() {
    register_kernel("Concat", Device::Kind::CUDA, &concat_cuda);
    register_kernel("Split", Device::Kind::CUDA, &split_cuda);
}

} // namespace braid::opr::cuda
