// CUDA kernels of Fill (the value converted once on the host, then one bit pattern written on
// the device) and Arange (computed on the device in double, like the CPU).
#include "operators/fill.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/fill_kernels.h"

namespace braid::opr::cuda {

namespace {

void fill_cuda(OperatorNode& opr, ExecCtx& ctx) {
    Tensor& y = ctx.output(0);
    int64_t n = int64_t(y.shape().total_nr_elems());
    if (n == 0) return;
    uint64_t bits = 0; // little-endian: the element's bytes are the low bytes
    store_from_double(y.dtype(), &bits, 0, static_cast<Fill&>(opr).value());
    braid::cuda::launch_fill(y.raw_ptr(), n, int(y.dtype().size()), bits,
                             cuda_context(opr.comp_node()).stream());
}

void arange_cuda(OperatorNode& opr, ExecCtx& ctx) {
    auto& arange = static_cast<Arange&>(opr);
    Tensor& y = ctx.output(0);
    braid::cuda::launch_arange(y.raw_ptr(), int64_t(y.shape().total_nr_elems()),
                               dtype_code(y.dtype()), arange.start(), arange.step(),
                               cuda_context(opr.comp_node()).stream());
}

} // namespace

void register_fill_kernels() {
    register_kernel("Fill", Device::Kind::CUDA, &fill_cuda);
    register_kernel("Arange", Device::Kind::CUDA, &arange_cuda);
}

} // namespace braid::opr::cuda
