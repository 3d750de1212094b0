// CUDA kernel of ParamUpdate: SGD (with optional momentum) and Adam, in place on the
// parameter's device storage. The moments live in the operator's kernel state on the device.
// A parameter kept on the host (uploaded by SharedParam at each run) gets the updated value
// copied back after the update, so the host tensor stays the parameter's value.
#include "operators/optimizer.h"
#include "base/cuda_check.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/optimizer_kernels.h"
#include "operators/io.h"

#include <cmath>

namespace braid::opr::cuda {

namespace {

struct MomentState final : KernelState {
    Tensor first, second;
};

void ensure_zeroed(Tensor& t, const Tensor& like, CompNode cn) {
    if (!t.empty() && t.shape() == like.shape()) return;
    t = Tensor(like.shape(), dtype::Float32(), cn.allocator());
    BRAID_CUDA_CHECK(cudaMemsetAsync(t.raw_ptr(), 0, t.nr_bytes(), cuda_context(cn).stream()));
}

void param_update_cuda(OperatorNode& opr, ExecCtx& ctx) {
    auto& update = static_cast<ParamUpdate&>(opr);
    CompNode cn = opr.comp_node();
    cudaStream_t stream = cuda_context(cn).stream();
    const Tensor& p = ctx.input(0); // the parameter's device storage (bound by SharedParam)
    Tensor g = contiguous_on(cn, ctx.input(1));
    int64_t n = int64_t(p.shape().total_nr_elems());
    const auto& c = update.config();
    auto& st = kernel_state<MomentState>(opr);
    uint64_t step = update.count_step();
    if (c.kind == OptimizerConfig::Kind::SGD) {
        float* velocity = nullptr;
        if (c.momentum != 0.f) {
            ensure_zeroed(st.first, p, cn);
            velocity = st.first.ptr<float>();
        }
        braid::cuda::launch_sgd(p.ptr<float>(), g.ptr<float>(), velocity, n, c.lr, c.momentum,
                                c.weight_decay, stream);
    } else {
        ensure_zeroed(st.first, p, cn);
        ensure_zeroed(st.second, p, cn);
        float bc1 = 1.f - std::pow(c.beta1, float(step));
        float bc2 = 1.f - std::pow(c.beta2, float(step));
        braid::cuda::launch_adam(p.ptr<float>(), g.ptr<float>(), st.first.ptr<float>(),
                                 st.second.ptr<float>(), n, c.lr, c.beta1, c.beta2, c.eps,
                                 c.weight_decay, bc1, bc2, stream);
    }
    ctx.output(0) = p;
    auto* param = dynamic_cast<SharedParam*>(opr.input(0)->owner());
    if (param && param->param()->device() != cn.device()) cn.copy(*param->param(), p);
}

} // namespace

void register_optimizer_kernels() {
    register_kernel("ParamUpdate", Device::Kind::CUDA, &param_update_cuda);
}

} // namespace braid::opr::cuda
