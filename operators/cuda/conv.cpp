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
#include "base/cuda_cudnn.h"
#include "base/error.h"
#include "base/log.h"
#include "operators/cuda/conv_kernels.h"
#include "operators/cuda/cuda_kernels.h"

#include <limits>

namespace braid::opr::cuda {

namespace {

struct ConvDims {
    size_t n, c, h, w;     //!< input
    size_t o, kh, kw;      //!< weight (o filters of cg x kh x kw)
    size_t oh, ow;         //!< output spatial size
    size_t groups, cg, og; //!< groups, input and output channels per group
};

ConvDims conv_dims(const Conv2d::Param& p, const Tensor& x, const Tensor& w, const Tensor& y) {
    const auto &xs = x.shape(), &ws = w.shape(), &ys = y.shape();
    size_t groups = size_t(p.groups);
    return {xs[0], xs[1], xs[2], xs[3],  ws[0], ws[2],
            ws[3], ys[2], ys[3], groups, ws[1], ws[0] / groups};
}

constexpr size_t INT_LIMIT = size_t(std::numeric_limits<int>::max());

cudaDataType cuda_data_type(const OperatorNode& opr, DType dt) {
    if (dt == dtype::Float32()) return CUDA_R_32F;
    if (dt == dtype::Float16()) return CUDA_R_16F;
    if (dt == dtype::BFloat16()) return CUDA_R_16BF;
    BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(), dt.name());
}

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
    if (pixels > INT_LIMIT || d.og > INT_LIMIT || k > INT_LIMIT || d.groups > INT_LIMIT)
        BRAID_THROW(ShapeError, "{}: GEMM dims {}x{}x{} exceed cuBLAS's 32-bit sizes",
                    opr.describe(), d.og, pixels, k);
    bool direct = d.kh == 1 && d.kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 &&
                  p.pad_w == 0;
    Tensor cols;
    if (!direct) cols = Tensor(TensorShape{d.c * d.kh * d.kw * pixels}, dt, cn.allocator());
    braid::cuda::Im2colGeometry g{int64_t(d.c),  int64_t(d.h), int64_t(d.w), int64_t(d.oh),
                                  int64_t(d.ow), int(d.kh),    int(d.kw),    p.stride_h,
                                  p.stride_w,    p.pad_h,      p.pad_w,      p.dilation_h,
                                  p.dilation_w};
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

//! Descriptors and algorithm of the last shapes seen.
struct CudnnConvState final : KernelState {
    const CudnnApi* api = nullptr;
    cudnnTensorDescriptor_t x_desc = nullptr, y_desc = nullptr;
    cudnnFilterDescriptor_t w_desc = nullptr;
    cudnnConvolutionDescriptor_t conv_desc = nullptr;
    TensorShape xs, ws;
    DType dtype;
    bool planned = false;   //!< the fields below describe xs, ws and dtype
    bool use_cudnn = false; //!< false: cuDNN has no algorithm for them (im2col instead)
    cudnnConvolutionFwdAlgo_t algo{};
    size_t workspace = 0;

    ~CudnnConvState() override {
        if (!api) return; // errors at teardown are ignored (the runtime may be unloading)
        if (x_desc) (void)api->destroy_tensor_desc(x_desc);
        if (y_desc) (void)api->destroy_tensor_desc(y_desc);
        if (w_desc) (void)api->destroy_filter_desc(w_desc);
        if (conv_desc) (void)api->destroy_conv_desc(conv_desc);
    }
};

constexpr size_t MAX_CUDNN_WORKSPACE = size_t(1) << 30;

cudnnDataType_t cudnn_data_type(DType dt) {
    if (dt == dtype::Float16()) return CUDNN_DATA_HALF;
    if (dt == dtype::BFloat16()) return CUDNN_DATA_BFLOAT16;
    return CUDNN_DATA_FLOAT;
}

//! Sets the descriptors for `d` and picks an algorithm; false when cuDNN offers none.
bool plan_cudnn(CudnnConvState& st, const Conv2d::Param& p, const ConvDims& d, DType dt,
                cudnnHandle_t handle) {
    const CudnnApi& api = *st.api;
    if (!st.x_desc) BRAID_CUDNN_CHECK(api.create_tensor_desc(&st.x_desc));
    if (!st.y_desc) BRAID_CUDNN_CHECK(api.create_tensor_desc(&st.y_desc));
    if (!st.w_desc) BRAID_CUDNN_CHECK(api.create_filter_desc(&st.w_desc));
    if (!st.conv_desc) BRAID_CUDNN_CHECK(api.create_conv_desc(&st.conv_desc));
    cudnnDataType_t type = cudnn_data_type(dt);
    BRAID_CUDNN_CHECK(api.set_tensor_4d(st.x_desc, CUDNN_TENSOR_NCHW, type, int(d.n), int(d.c),
                                        int(d.h), int(d.w)));
    BRAID_CUDNN_CHECK(api.set_tensor_4d(st.y_desc, CUDNN_TENSOR_NCHW, type, int(d.n), int(d.o),
                                        int(d.oh), int(d.ow)));
    BRAID_CUDNN_CHECK(api.set_filter_4d(st.w_desc, type, CUDNN_TENSOR_NCHW, int(d.o), int(d.cg),
                                        int(d.kh), int(d.kw)));
    // Cross-correlation accumulated in float32 for every dtype.
    BRAID_CUDNN_CHECK(api.set_conv_2d(st.conv_desc, p.pad_h, p.pad_w, p.stride_h, p.stride_w,
                                      p.dilation_h, p.dilation_w, CUDNN_CROSS_CORRELATION,
                                      CUDNN_DATA_FLOAT));
    BRAID_CUDNN_CHECK(api.set_conv_groups(st.conv_desc, p.groups));
    // float32: FMA kernels only (CUDNN_DEFAULT_MATH would allow TF32 tensor cores on A100 and
    // later, which round the inputs to 10 mantissa bits).
    cudnnMathType_t math = dt == dtype::Float32() ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    BRAID_CUDNN_CHECK(api.set_conv_math(st.conv_desc, math));
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    BRAID_CUDNN_CHECK(api.get_fwd_algos(handle, st.x_desc, st.w_desc, st.conv_desc, st.y_desc,
                                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
    for (int i = 0; i < count; ++i) {
        const auto& r = perf[i];
        if (r.status != CUDNN_STATUS_SUCCESS || r.memory > MAX_CUDNN_WORKSPACE) continue;
        if (dt == dtype::Float32() && r.mathType != CUDNN_FMA_MATH &&
            r.mathType != CUDNN_DEFAULT_MATH)
            continue; // a tensor-core (TF32) algorithm
        st.algo = r.algo;
        BRAID_CUDNN_CHECK(api.get_fwd_workspace(handle, st.x_desc, st.w_desc, st.conv_desc,
                                                st.y_desc, st.algo, &st.workspace));
        return true;
    }
    return false;
}

//! Runs the convolution through cuDNN; false when cuDNN cannot (not loaded, no algorithm, or
//! shapes beyond its 32-bit sizes), and the caller uses im2col.
bool conv_cudnn(OperatorNode& opr, const ConvDims& d, const Tensor& x, const Tensor& w, Tensor& y) {
    const CudnnApi* api = try_load_cudnn();
    if (!api) return false;
    for (size_t v : {d.n, d.c, d.h, d.w, d.o, d.oh, d.ow})
        if (v > INT_LIMIT) return false;
    if (x.shape().total_nr_elems() > INT_LIMIT || y.shape().total_nr_elems() > INT_LIMIT)
        return false; // the legacy API's algorithms index with 32 bits
    const auto& p = static_cast<Conv2d&>(opr).param();
    CompNode cn = opr.comp_node();
    auto& cuda = cuda_context(cn);
    auto& st = kernel_state<CudnnConvState>(opr);
    st.api = api;
    cudnnHandle_t handle = cudnn_handle(cuda.device(), cuda.stream());
    if (!st.planned || st.xs != x.shape() || st.ws != w.shape() || st.dtype != y.dtype()) {
        st.planned = false;
        try {
            st.use_cudnn = plan_cudnn(st, p, d, y.dtype(), handle);
        } catch (const LibraryError& e) {
            logger()->warn("{}: cuDNN cannot run this convolution ({}); using im2col and cuBLAS",
                           opr.describe(), e.what());
            st.use_cudnn = false;
        }
        st.xs = x.shape();
        st.ws = w.shape();
        st.dtype = y.dtype();
        st.planned = true;
    }
    if (!st.use_cudnn) return false;
    Tensor workspace;
    if (st.workspace) workspace = Tensor(TensorShape{st.workspace}, dtype::Uint8(), cn.allocator());
    const float alpha = 1.f, beta = 0.f; // float scaling factors for every data type but double
    BRAID_CUDNN_CHECK(api->conv_forward(
        handle, &alpha, st.x_desc, x.raw_ptr(), st.w_desc, w.raw_ptr(), st.conv_desc, st.algo,
        st.workspace ? workspace.raw_ptr() : nullptr, st.workspace, &beta, st.y_desc, y.raw_ptr()));
    return true;
}

#endif // BRAID_WITH_CUDNN

void conv2d_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& p = static_cast<Conv2d&>(opr).param();
    const Tensor &x = ctx.input(0), &w = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    ConvDims d = conv_dims(p, x, w, y);
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
