// CUDA kernels of the graph sources: Input, ImmutableTensor, SharedParam.
//
// Input: a fed host tensor is copied to the device on the comp node's stream (through a
// pinned staging buffer unless it is pinned already); a tensor fed on the comp node's device
// is used as it is. ImmutableTensor: uploaded once, on its first execution, and cached.
// SharedParam: a parameter tensor on the comp node's device is bound as it is (the resident
// case: ParamUpdate then updates it in place); a host parameter is uploaded at every
// execution, so host-side changes between runs are always seen.
#include "operators/io.h"
#include "operators/cuda/cuda_kernels.h"

namespace braid::opr::cuda {

namespace {

struct UploadState final : KernelState {
    Tensor device_value;
    PinnedStaging staging;

    //! device_value with `like`'s shape and dtype on `cn` (re-allocated when they change).
    Tensor& device_buffer(CompNode cn, const Tensor& like) {
        if (device_value.empty() || device_value.shape() != like.shape() ||
            device_value.dtype() != like.dtype())
            device_value = Tensor(like.shape(), like.dtype(), cn.allocator());
        return device_value;
    }
};

void input_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const Tensor& fed = ctx.input(0); // the running executable's fed tensor (InputNode)
    CompNode cn = opr.comp_node();
    if (fed.device() == cn.device()) {
        ctx.output(0) = contiguous_on(cn, fed); // zero copy when contiguous
        return;
    }
    auto& st = kernel_state<UploadState>(opr);
    Tensor& buf = st.device_buffer(cn, fed);
    upload(cn, buf, fed, st.staging);
    ctx.output(0) = buf;
}

void immutable_tensor_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const Tensor& value = static_cast<ImmutableTensor&>(opr).value();
    CompNode cn = opr.comp_node();
    auto& st = kernel_state<UploadState>(opr);
    if (st.device_value.empty()) upload(cn, st.device_buffer(cn, value), value, st.staging);
    ctx.output(0) = st.device_value;
}

void shared_param_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const Tensor& param = *static_cast<SharedParam&>(opr).param();
    CompNode cn = opr.comp_node();
    if (param.device() == cn.device()) {
        ctx.output(0) = param; // resident on this device
        return;
    }
    auto& st = kernel_state<UploadState>(opr);
    Tensor& buf = st.device_buffer(cn, param);
    upload(cn, buf, param, st.staging);
    ctx.output(0) = buf;
}

} // namespace

void register_io_kernels() {
    register_kernel("Input", Device::Kind::CUDA, &input_cuda);
    register_kernel("ImmutableTensor", Device::Kind::CUDA, &immutable_tensor_cuda);
    register_kernel("SharedParam", Device::Kind::CUDA, &shared_param_cuda);
}

} // namespace braid::opr::cuda
