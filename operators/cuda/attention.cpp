// CUDA kernel of Attention (outputs out and lse).
#include "operators/attention.h"
#include "base/error.h"
#include "operators/cuda/attention_kernels.h"
#include "operators/cuda/cuda_kernels.h"

#include <cmath>

namespace braid::opr::cuda {

namespace {

void attention_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& param = static_cast<Attention&>(opr).param();
    const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
    Tensor& out = ctx.output(0);
    Tensor& lse = ctx.output(1);
    const auto &qs = q.shape(), &ks = k.shape(), &vs = v.shape();
    size_t bh = qs[0] * qs[1], sq = qs[2], sk = ks[2], d = qs[3], dv = vs[3];
    if (bh == 0 || sq == 0) return;
    float scale = param.scale ? *param.scale : 1.f / std::sqrt(float(d));
    // The shape rule bounds sq, sk, d and dv by INT_MAX.
    auto status = braid::cuda::launch_attention(
        dtype_code(q.dtype()), q.raw_ptr(), k.raw_ptr(), v.raw_ptr(), out.raw_ptr(),
        lse.ptr<float>(), int64_t(bh), int64_t(sq), int64_t(sk), int(d), int(dv), scale,
        param.causal, cuda_context(opr.comp_node()).stream());
    if (status == braid::cuda::AttentionStatus::BAD_DTYPE)
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                    q.dtype().name());
    if (status == braid::cuda::AttentionStatus::TOO_LARGE)
        BRAID_THROW(ShapeError,
                    "{}: head dims D = {} and Dv = {} need more shared memory than one block of "
                    "the device has (the CUDA kernel keeps a query row and an output row per "
                    "warp); run it on a CPU comp node",
                    opr.describe(), d, dv);
}

} // namespace

void register_attention_kernels() {
    register_kernel("Attention", Device::Kind::CUDA, &attention_cuda);
}

} // namespace braid::opr::cuda
