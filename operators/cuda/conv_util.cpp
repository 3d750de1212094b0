// Shared pieces of the CUDA convolution kernels (see operators/cuda/conv_util.h).
#include "operators/cuda/conv_util.h"
#include "base/error.h"

namespace braid::opr::cuda {

ConvDims conv_dims(const Conv2dParam& p, const TensorShape& xs, const TensorShape& ws,
                   const TensorShape& ys) {
    size_t groups = size_t(p.groups);
    return {xs[0], xs[1], xs[2], xs[3],  ws[0], ws[2],
            ws[3], ys[2], ys[3], groups, ws[1], ws[0] / groups};
}

bool is_pointwise(const Conv2dParam& p, const ConvDims& d) {
    return d.kh == 1 && d.kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 &&
           p.pad_w == 0;
}

braid::cuda::Im2colGeometry im2col_geometry(const Conv2dParam& p, const ConvDims& d) {
    return {int64_t(d.c), int64_t(d.h), int64_t(d.w), int64_t(d.oh), int64_t(d.ow),
            int(d.kh),    int(d.kw),    p.stride_h,   p.stride_w,    p.pad_h,
            p.pad_w,      p.dilation_h, p.dilation_w};
}

void check_gemm_dims(const OperatorNode& opr, const ConvDims& d) {
    size_t k = d.cg * d.kh * d.kw, pixels = d.oh * d.ow;
    if (pixels > INT_LIMIT || d.og > INT_LIMIT || k > INT_LIMIT || d.groups > INT_LIMIT)
        BRAID_THROW(ShapeError, "{}: GEMM dims {}x{}x{} exceed cuBLAS's 32-bit sizes",
                    opr.describe(), d.og, pixels, k);
}

cudaDataType cuda_data_type(const OperatorNode& opr, DType dt) {
    if (dt == dtype::Float32()) return CUDA_R_32F;
    if (dt == dtype::Float16()) return CUDA_R_16F;
    if (dt == dtype::BFloat16()) return CUDA_R_16BF;
    BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(), dt.name());
}

#if BRAID_WITH_CUDNN

bool fits_cudnn(const ConvDims& d) {
    for (size_t v : {d.n, d.c, d.h, d.w, d.o, d.oh, d.ow})
        if (v > INT_LIMIT) return false;
    return d.n * d.c * d.h * d.w <= INT_LIMIT && d.n * d.o * d.oh * d.ow <= INT_LIMIT;
}

CudnnConvDescriptors::~CudnnConvDescriptors() {
    if (!api) return; // errors at teardown are ignored (the runtime may be unloading)
    if (x) (void)api->destroy_tensor_desc(x);
    if (y) (void)api->destroy_tensor_desc(y);
    if (w) (void)api->destroy_filter_desc(w);
    if (conv) (void)api->destroy_conv_desc(conv);
}

namespace {
cudnnDataType_t cudnn_data_type(DType dt) {
    if (dt == dtype::Float16()) return CUDNN_DATA_HALF;
    if (dt == dtype::BFloat16()) return CUDNN_DATA_BFLOAT16;
    return CUDNN_DATA_FLOAT;
}
} // namespace

void CudnnConvDescriptors::set(const CudnnApi& cudnn, const Conv2dParam& p, const ConvDims& d,
                               DType dt) {
    api = &cudnn;
    if (!x) BRAID_CUDNN_CHECK(api->create_tensor_desc(&x));
    if (!y) BRAID_CUDNN_CHECK(api->create_tensor_desc(&y));
    if (!w) BRAID_CUDNN_CHECK(api->create_filter_desc(&w));
    if (!conv) BRAID_CUDNN_CHECK(api->create_conv_desc(&conv));
    cudnnDataType_t type = cudnn_data_type(dt);
    BRAID_CUDNN_CHECK(
        api->set_tensor_4d(x, CUDNN_TENSOR_NCHW, type, int(d.n), int(d.c), int(d.h), int(d.w)));
    BRAID_CUDNN_CHECK(
        api->set_tensor_4d(y, CUDNN_TENSOR_NCHW, type, int(d.n), int(d.o), int(d.oh), int(d.ow)));
    BRAID_CUDNN_CHECK(
        api->set_filter_4d(w, type, CUDNN_TENSOR_NCHW, int(d.o), int(d.cg), int(d.kh), int(d.kw)));
    // Cross-correlation accumulated in float32 for every dtype.
    BRAID_CUDNN_CHECK(api->set_conv_2d(conv, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
                                       p.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    BRAID_CUDNN_CHECK(api->set_conv_groups(conv, p.groups));
    // float32: FMA kernels only (CUDNN_DEFAULT_MATH would allow TF32 tensor cores on A100 and
    // later, which round the inputs to 10 mantissa bits).
    cudnnMathType_t math = dt == dtype::Float32() ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    BRAID_CUDNN_CHECK(api->set_conv_math(conv, math));
}

#endif // BRAID_WITH_CUDNN

} // namespace braid::opr::cuda
