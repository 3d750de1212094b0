// CUDA kernels of Subtensor (a view, as on the CPU), SetSubtensor and IncrSubtensor (a copy of
// x, then a strided copy or a strided add of the broadcast value into the slice).
#include "operators/subtensor.h"
#include "base/error.h"
#include "memory/cuda_copy.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/subtensor_kernels.h"

namespace braid::opr::cuda {

namespace {

void subtensor_cuda(OperatorNode& opr, ExecCtx& ctx) {
    opr.execute(ctx); // a view of the input: no data moves, the same on every device
}

void set_subtensor_cuda(OperatorNode& opr, ExecCtx& ctx) {
    auto& op = static_cast<SetSubtensor&>(opr);
    CompNode cn = opr.comp_node();
    cudaStream_t stream = cuda_context(cn).stream();
    const Tensor& x = ctx.input(0);
    const Tensor& value = ctx.input(1);
    Tensor& out = ctx.output(0);
    if (out.shape().is_empty()) return;
    if (out.raw_ptr() != x.raw_ptr()) cn.copy(out, x);
    Tensor slice = subtensor_view(out, op.items(), opr.describe());
    if (slice.shape().is_empty()) return;
    Tensor v = value.view(value.layout().broadcast(slice.shape()));
    if (op.kind() == SetSubtensor::Kind::SET) {
        cuda_copy_strided(slice, v, stream);
        return;
    }
    if (!braid::cuda::launch_strided_add(
            dtype_code(out.dtype()),
            strided_walk(slice.layout(), v.layout(), int(out.dtype().size())), slice.raw_ptr(),
            v.raw_ptr(), stream))
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                    out.dtype().name());
}

} // namespace

void register_subtensor_kernels() {
    register_kernel("Subtensor", Device::Kind::CUDA, &subtensor_cuda);
    register_kernel("SetSubtensor", Device::Kind::CUDA, &set_subtensor_cuda);
    register_kernel("IncrSubtensor", Device::Kind::CUDA, &set_subtensor_cuda);
}

} // namespace braid::opr::cuda
