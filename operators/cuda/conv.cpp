// CUDA kernel of Conv2d.
//
// With cuDNN (braid built with cudnn.h, BRAID_WITH_CUDNN, and the library loads at run time):
// cudnnConvolutionForward with float32 accumulation; float32 convolutions are restricted to
// FMA kernels (no TF32), so they keep the CPU kernel's precision. Descriptors and the algorithm
// (cuDNN's heuristic choice, workspace at most 1 GiB) are kept in the operator's kernel state for
// the last shapes seen.
//
// Otherwise, or when cuDNN has no algorithm for the shapes: im2col + cuBLAS, one batch item at a
// time (an im2col kernel into a column buffer, then one strided batched GEMM over the groups,
// float32 accumulation); 1x1 kernels with stride 1 and no padding skip im2col.
#include "operators/conv.h"
#include "base/cuda_check.h"
#include "base/cuda_cublas.h"
#include "base/error.h"
#include "operators/cuda/conv_kernels.h"
#include "operators/cuda/conv_util.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/cudnn_library.h"

namespace braid::opr::cuda {

namespace {

//! im2col + cuBLAS: per batch item, columns of every group, then a GEMM batched over groups.
void conv_im2col(OperatorNode& opr, const ConvDims& d, const Tensor& x, const Tensor& w,
                 Tensor& y) {
    const auto& p = static_cast<Conv2d&>(opr).param();
    CompNode cn = opr.comp_node();
    auto& cuda = cuda_context(cn);
    DType dt = y.dtype();
    cudaDataType type = cuda_data_type(opr, dt);
    size_t es = dt.size();
    size_t k = d.cg * d.kh * d.kw, pixels = d.oh * d.ow;
    check_gemm_dims(opr, d);
    bool direct = is_pointwise(p, d);
    Tensor cols;
    if (!direct) cols = Tensor(TensorShape{d.c * d.kh * d.kw * pixels}, dt, cn.allocator());
    braid::cuda::Im2colGeometry g = im2col_geometry(p, d);
    const auto& api = load_cublas();
    cublasHandle_t handle = cuda.cublas();
    const float alpha = 1.f, beta = 0.f;
    for (size_t item = 0; item < d.n; ++item) {
        const uint8_t* xi = x.raw_ptr() + item * d.c * d.h * d.w * es;
        const uint8_t* b = xi;
        if (!direct) {
            braid::cuda::launch_im2col(xi, cols.raw_ptr(), g, int(es), cuda.stream());
            b = cols.raw_ptr();
        }
        // Row-major y_g [og, P] = w_g [og, K] · cols_g [K, P] is column-major
        // y_g^T = cols_g^T · w_g^T.
        BRAID_CUBLAS_CHECK(api.gemm_strided_batched_ex(
            handle, CUBLAS_OP_N, CUBLAS_OP_N, int(pixels), int(d.og), int(k), &alpha, b, type,
            int(pixels), (long long)(k * pixels), w.raw_ptr(), type, int(k), (long long)(d.og * k),
            &beta, y.raw_ptr() + item * d.o * pixels * es, type, int(pixels),
            (long long)(d.og * pixels), int(d.groups), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
}

#if BRAID_WITH_CUDNN

using CudnnForwardPlan = CudnnConvPlan<cudnnConvolutionFwdAlgo_t>;

//! Sets the descriptors for `d` and picks an algorithm; false when cuDNN offers none.
bool plan_cudnn(CudnnForwardPlan& st, const CudnnApi& api, const Conv2d::Param& p,
                const ConvDims& d, DType dt, cudnnHandle_t handle) {
    st.desc.set(api, p, d, dt);
    const auto& desc = st.desc;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    BRAID_CUDNN_CHECK(api.get_fwd_algos(handle, desc.x, desc.w, desc.conv, desc.y,
                                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
    const auto* pick = pick_cudnn_algo(perf, count, dt);
    if (!pick) return false;
    st.algo = pick->algo;
    BRAID_CUDNN_CHECK(
        api.get_fwd_workspace(handle, desc.x, desc.w, desc.conv, desc.y, st.algo, &st.workspace));
    return true;
}

//! Runs the convolution through cuDNN; false when cuDNN cannot (not loaded, no algorithm, or
//! shapes beyond its 32-bit sizes), and the caller uses im2col.
bool conv_cudnn(OperatorNode& opr, const ConvDims& d, const Tensor& x, const Tensor& w, Tensor& y) {
    const CudnnApi* api = try_load_cudnn();
    if (!api || !fits_cudnn(d)) return false;
    const auto& p = static_cast<Conv2d&>(opr).param();
    CompNode cn = opr.comp_node();
    auto& cuda = cuda_context(cn);
    auto& st = kernel_state<CudnnForwardPlan>(opr);
    cudnnHandle_t handle = cudnn_handle(cuda.device(), cuda.stream());
    if (!ensure_cudnn_plan(st, opr, x.shape(), w.shape(), y.dtype(),
                           [&] { return plan_cudnn(st, *api, p, d, y.dtype(), handle); }))
        return false;
    CudnnWorkspace ws(cn, st.workspace);
    const float alpha = 1.f, beta = 0.f; // float scaling factors for every data type but double
    BRAID_CUDNN_CHECK(api->conv_forward(handle, &alpha, st.desc.x, x.raw_ptr(), st.desc.w,
                                        w.raw_ptr(), st.desc.conv, st.algo, ws.ptr, st.workspace,
                                        &beta, st.desc.y, y.raw_ptr()));
    return true;
}

#endif // BRAID_WITH_CUDNN

void conv2d_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& p = static_cast<Conv2d&>(opr).param();
    const Tensor &x = ctx.input(0), &w = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    ConvDims d = conv_dims(p, x.shape(), w.shape(), y.shape());
    if (d.cg == 0 || d.kh == 0 || d.kw == 0) { // an empty sum: zeros, as the CPU's GEMM gives
        BRAID_CUDA_CHECK(
            cudaMemsetAsync(y.raw_ptr(), 0, y.nr_bytes(), cuda_context(opr.comp_node()).stream()));
        return;
    }
#if BRAID_WITH_CUDNN
    if (conv_cudnn(opr, d, x, w, y)) return;
#endif
    conv_im2col(opr, d, x, w, y);
}

} // namespace

void register_conv_kernels() {
    register_kernel("Conv2d", Device::Kind::CUDA, &conv2d_cuda);
}

} // namespace braid::opr::cuda
