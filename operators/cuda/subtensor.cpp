// CUDA kernels of Subtensor (a view, as on the CPU), SetSubtensor and IncrSubtensor (a copy of
// x, then a strided copy or a strided add of the broadcast value into the slice).
#include "operators/subtensor.h"
#include "base/error.h"
#include "memory/cuda_copy.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/subtensor_kernels.h"

namespace braid::opr::cuda {

namespace {

//! The walk over two layouts of one shape: size-1 dims dropped, neighbours merged where both
//! layouts stay linear across them.
braid::cuda::StridedAddDesc strided_desc(const TensorLayout& dl, const TensorLayout& sl) {
    braid::cuda::StridedAddDesc desc;
    for (size_t d = 0; d < dl.ndim(); ++d) {
        if (dl[d] == 1) continue;
        int k = desc.ndim;
        if (k > 0 && desc.dst_stride[k - 1] == dl.stride[d] * ptrdiff_t(dl[d]) &&
            desc.src_stride[k - 1] == sl.stride[d] * ptrdiff_t(dl[d])) {
            desc.shape[k - 1] *= int64_t(dl[d]);
            desc.dst_stride[k - 1] = dl.stride[d];
            desc.src_stride[k - 1] = sl.stride[d];
            continue;
        }
        desc.shape[k] = int64_t(dl[d]);
        desc.dst_stride[k] = dl.stride[d];
        desc.src_stride[k] = sl.stride[d];
        ++desc.ndim;
    }
    return desc;
}

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
    if (!braid::cuda::launch_strided_add(dtype_code(out.dtype()),
                                         strided_desc(slice.layout(), v.layout()), slice.raw_ptr(),
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
