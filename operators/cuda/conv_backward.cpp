// CUDA kernels of Conv2dBackwardData and Conv2dBackwardFilter, the two halves of Conv2d's
// gradient (operators/conv_backward.h).
//
// With cuDNN (BRAID_WITH_CUDNN and the library loads at run time): cudnnConvolutionBackwardData
// and cudnnConvolutionBackwardFilter on the descriptors of the forward convolution, accumulated
// in float32; the algorithm follows the rule of operators/cuda/conv_util.h (float32: FMA math
// only, no TF32; deterministic algorithms preferred) and is kept in the operator's kernel state
// for the last shapes seen.
//
// Otherwise, or when cuDNN has no algorithm for the shapes, one batch item at a time, in float32
// with one rounding into float16 / bfloat16:
//  - data: cols_g [cg·kh·kw, oh·ow] = w_g^T · dy_g for every group g (one strided batched GEMM
//    into float32 columns), then col2im gathers each dx element from the columns that read it;
//  - filter: dw_g [og, cg·kh·kw] += dy_g · cols_g^T, cols_g the im2col columns of x (x itself
//    for pointwise kernels), accumulated over the batch in float32 (in dw itself for float32,
//    else in a buffer converted into dw at the end).
#include "operators/conv_backward.h"
#include "base/cuda_check.h"
#include "base/cuda_cublas.h"
#include "base/error.h"
#include "operators/cuda/conv_kernels.h"
#include "operators/cuda/conv_util.h"
#include "operators/cuda/convert_kernels.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/cudnn_library.h"

namespace braid::opr::cuda {

namespace {

void fill_zeros(OperatorNode& opr, Tensor& t) {
    BRAID_CUDA_CHECK(
        cudaMemsetAsync(t.raw_ptr(), 0, t.nr_bytes(), cuda_context(opr.comp_node()).stream()));
}

// ---------------------------------------------------------------- fallback kernels

//! dx through float32 columns and col2im, one batch item at a time.
void backward_data_col2im(OperatorNode& opr, const Conv2dParam& p, const ConvDims& d,
                          const Tensor& w, const Tensor& dy, Tensor& dx) {
    CompNode cn = opr.comp_node();
    auto& cuda = cuda_context(cn);
    DType dt = dx.dtype();
    cudaDataType type = cuda_data_type(opr, dt);
    check_gemm_dims(opr, d);
    size_t es = dt.size(), k = d.cg * d.kh * d.kw, pixels = d.oh * d.ow;
    Tensor cols(TensorShape{d.groups * k * pixels}, dtype::Float32(), cn.allocator());
    braid::cuda::Im2colGeometry g = im2col_geometry(p, d);
    const auto& api = load_cublas();
    cublasHandle_t handle = cuda.cublas();
    const float alpha = 1.f, beta = 0.f;
    for (size_t item = 0; item < d.n; ++item) {
        // Row-major cols_g [K, P] = w_g^T · dy_g, with w_g [og, K] and dy_g [og, P], is
        // column-major cols_g^T [P, K] = dy_g^T · w_g.
        BRAID_CUBLAS_CHECK(api.gemm_strided_batched_ex(
            handle, CUBLAS_OP_N, CUBLAS_OP_T, int(pixels), int(k), int(d.og), &alpha,
            dy.raw_ptr() + item * d.o * pixels * es, type, int(pixels), (long long)(d.og * pixels),
            w.raw_ptr(), type, int(k), (long long)(d.og * k), &beta, cols.raw_ptr(), CUDA_R_32F,
            int(pixels), (long long)(k * pixels), int(d.groups), CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT));
        if (!braid::cuda::launch_col2im(reinterpret_cast<const float*>(cols.raw_ptr()),
                                        dx.raw_ptr() + item * d.c * d.h * d.w * es, g,
                                        dtype_code(dt), cuda.stream()))
            BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(), dt.name());
    }
}

//! dw accumulated over the batch in float32 from im2col columns.
void backward_filter_im2col(OperatorNode& opr, const Conv2dParam& p, const ConvDims& d,
                            const Tensor& x, const Tensor& dy, Tensor& dw) {
    CompNode cn = opr.comp_node();
    auto& cuda = cuda_context(cn);
    DType dt = dw.dtype();
    cudaDataType type = cuda_data_type(opr, dt);
    check_gemm_dims(opr, d);
    size_t es = dt.size(), k = d.cg * d.kh * d.kw, pixels = d.oh * d.ow;
    bool direct = is_pointwise(p, d);
    Tensor cols;
    if (!direct) cols = Tensor(TensorShape{d.c * d.kh * d.kw * pixels}, dt, cn.allocator());
    Tensor acc = dt == dtype::Float32() ? dw : Tensor(dw.shape(), dtype::Float32(), cn.allocator());
    BRAID_CUDA_CHECK(cudaMemsetAsync(acc.raw_ptr(), 0, acc.nr_bytes(), cuda.stream()));
    braid::cuda::Im2colGeometry g = im2col_geometry(p, d);
    const auto& api = load_cublas();
    cublasHandle_t handle = cuda.cublas();
    const float alpha = 1.f, beta = 1.f; // accumulate over the batch
    for (size_t item = 0; item < d.n; ++item) {
        const uint8_t* xi = x.raw_ptr() + item * d.c * d.h * d.w * es;
        const uint8_t* a = xi;
        if (!direct) {
            braid::cuda::launch_im2col(xi, cols.raw_ptr(), g, int(es), cuda.stream());
            a = cols.raw_ptr();
        }
        // Row-major dw_g [og, K] += dy_g [og, P] · cols_g^T, with cols_g [K, P], is
        // column-major dw_g^T [K, og] += cols_g · dy_g^T.
        BRAID_CUBLAS_CHECK(api.gemm_strided_batched_ex(
            handle, CUBLAS_OP_T, CUBLAS_OP_N, int(k), int(d.og), int(pixels), &alpha, a, type,
            int(pixels), (long long)(k * pixels), dy.raw_ptr() + item * d.o * pixels * es, type,
            int(pixels), (long long)(d.og * pixels), &beta, acc.raw_ptr(), CUDA_R_32F, int(k),
            (long long)(d.og * k), int(d.groups), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    if (dt != dtype::Float32())
        braid::cuda::launch_convert(dtype_code(dtype::Float32()), acc.raw_ptr(), dtype_code(dt),
                                    dw.raw_ptr(), int64_t(dw.shape().total_nr_elems()),
                                    cuda.stream());
}

// ---------------------------------------------------------------- cuDNN

#if BRAID_WITH_CUDNN

using CudnnDataPlan = CudnnConvPlan<cudnnConvolutionBwdDataAlgo_t>;
using CudnnFilterPlan = CudnnConvPlan<cudnnConvolutionBwdFilterAlgo_t>;

//! dx through cuDNN; false when cuDNN cannot (not loaded, no algorithm, 32-bit sizes).
bool backward_data_cudnn(OperatorNode& opr, const Conv2dParam& p, const ConvDims& d,
                         const Tensor& w, const Tensor& dy, Tensor& dx) {
    const CudnnApi* api = try_load_cudnn();
    if (!api || !fits_cudnn(d)) return false;
    CompNode cn = opr.comp_node();
    auto& cuda = cuda_context(cn);
    auto& st = kernel_state<CudnnDataPlan>(opr);
    DType dt = dx.dtype();
    cudnnHandle_t handle = cudnn_handle(cuda.device(), cuda.stream());
    bool ok = ensure_cudnn_plan(st, opr, w.shape(), dy.shape(), dt, [&] {
        st.desc.set(*api, p, d, dt);
        const auto& desc = st.desc;
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int count = 0;
        BRAID_CUDNN_CHECK(api->get_bwd_data_algos(handle, desc.w, desc.y, desc.conv, desc.x,
                                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
                                                  perf));
        const auto* pick = pick_cudnn_algo(perf, count, dt);
        if (!pick) return false;
        st.algo = pick->algo;
        BRAID_CUDNN_CHECK(api->get_bwd_data_workspace(handle, desc.w, desc.y, desc.conv, desc.x,
                                                      st.algo, &st.workspace));
        return true;
    });
    if (!ok) return false;
    CudnnWorkspace ws(cn, st.workspace);
    const float alpha = 1.f, beta = 0.f; // float scaling factors for every data type but double
    BRAID_CUDNN_CHECK(api->conv_backward_data(handle, &alpha, st.desc.w, w.raw_ptr(), st.desc.y,
                                              dy.raw_ptr(), st.desc.conv, st.algo, ws.ptr,
                                              st.workspace, &beta, st.desc.x, dx.raw_ptr()));
    return true;
}

//! dw through cuDNN; false when cuDNN cannot (not loaded, no algorithm, 32-bit sizes).
bool backward_filter_cudnn(OperatorNode& opr, const Conv2dParam& p, const ConvDims& d,
                           const Tensor& x, const Tensor& dy, Tensor& dw) {
    const CudnnApi* api = try_load_cudnn();
    if (!api || !fits_cudnn(d)) return false;
    CompNode cn = opr.comp_node();
    auto& cuda = cuda_context(cn);
    auto& st = kernel_state<CudnnFilterPlan>(opr);
    DType dt = dw.dtype();
    cudnnHandle_t handle = cudnn_handle(cuda.device(), cuda.stream());
    bool ok = ensure_cudnn_plan(st, opr, x.shape(), dy.shape(), dt, [&] {
        st.desc.set(*api, p, d, dt);
        const auto& desc = st.desc;
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int count = 0;
        BRAID_CUDNN_CHECK(api->get_bwd_filter_algos(handle, desc.x, desc.y, desc.conv, desc.w,
                                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
                                                    perf));
        const auto* pick = pick_cudnn_algo(perf, count, dt);
        if (!pick) return false;
        st.algo = pick->algo;
        BRAID_CUDNN_CHECK(api->get_bwd_filter_workspace(handle, desc.x, desc.y, desc.conv, desc.w,
                                                        st.algo, &st.workspace));
        return true;
    });
    if (!ok) return false;
    CudnnWorkspace ws(cn, st.workspace);
    const float alpha = 1.f, beta = 0.f;
    BRAID_CUDNN_CHECK(api->conv_backward_filter(handle, &alpha, st.desc.x, x.raw_ptr(), st.desc.y,
                                                dy.raw_ptr(), st.desc.conv, st.algo, ws.ptr,
                                                st.workspace, &beta, st.desc.w, dw.raw_ptr()));
    return true;
}

#endif // BRAID_WITH_CUDNN

// ---------------------------------------------------------------- kernels

void conv2d_backward_data_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& p = static_cast<Conv2dBackwardData&>(opr).param().conv;
    const Tensor &w = ctx.input(0), &dy = ctx.input(1);
    Tensor& dx = ctx.output(0);
    if (dx.shape().is_empty()) return;
    if (dy.shape().is_empty()) return fill_zeros(opr, dx); // no filters: nothing flows back
    ConvDims d = conv_dims(p, dx.shape(), w.shape(), dy.shape());
#if BRAID_WITH_CUDNN
    if (backward_data_cudnn(opr, p, d, w, dy, dx)) return;
#endif
    backward_data_col2im(opr, p, d, w, dy, dx);
}

void conv2d_backward_filter_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& p = static_cast<Conv2dBackwardFilter&>(opr).param().conv;
    const Tensor &x = ctx.input(0), &dy = ctx.input(1);
    Tensor& dw = ctx.output(0);
    if (dw.shape().is_empty()) return;
    if (x.shape().is_empty() || dy.shape().is_empty())
        return fill_zeros(opr, dw); // an empty batch: an empty sum
    ConvDims d = conv_dims(p, x.shape(), dw.shape(), dy.shape());
#if BRAID_WITH_CUDNN
    if (backward_filter_cudnn(opr, p, d, x, dy, dw)) return;
#endif
    backward_filter_im2col(opr, p, d, x, dy, dw);
}

} // namespace

void register_conv_grad_kernels() {
    register_kernel("Conv2dBackwardData", Device::Kind::CUDA, &conv2d_backward_data_cuda);
    register_kernel("Conv2dBackwardFilter", Device::Kind::CUDA, &conv2d_backward_filter_cuda);
}

} // namespace braid::opr::cuda
