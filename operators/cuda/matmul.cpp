// CUDA kernel of MatMul through cuBLAS: cublasSgemm for float32, cublasGemmEx with float32
// accumulation for float16 and bfloat16. One cuBLAS handle per comp node, bound to its stream.
#include "operators/matmul.h"
#include "base/cuda_check.h"
#include "base/cuda_cublas.h"
#include "base/error.h"
#include "operators/cuda/cuda_kernels.h"

#include <limits>

namespace braid::opr::cuda {

namespace {

void matmul_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& param = static_cast<MatMul&>(opr).param();
    auto& cuda = cuda_context(opr.comp_node());
    const Tensor &a = ctx.input(0), &b = ctx.input(1);
    Tensor& y = ctx.output(0);
    size_t m = y.shape()[0], n = y.shape()[1];
    size_t k = param.transpose_a ? a.shape()[0] : a.shape()[1];
    if (m == 0 || n == 0) return;
    if (k == 0) {
        BRAID_CUDA_CHECK(cudaMemsetAsync(y.raw_ptr(), 0, y.nr_bytes(), cuda.stream()));
        return;
    }
    constexpr size_t INT_LIMIT = size_t(std::numeric_limits<int>::max());
    if (m > INT_LIMIT || n > INT_LIMIT || k > INT_LIMIT)
        BRAID_THROW(ShapeError, "{}: dims {}x{}x{} exceed cuBLAS's 32-bit sizes", opr.describe(), m,
                    n, k);
    // Row-major y = op(a) op(b) is column-major y^T = op(b)^T op(a)^T: swap the operands.
    cublasOperation_t op_a = param.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = param.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = int(a.shape()[1]), ldb = int(b.shape()[1]), ldy = int(n);
    const float alpha = 1.f, beta = 0.f;
    const auto& api = load_cublas();
    cublasHandle_t handle = cuda.cublas();
    if (y.dtype() == dtype::Float32()) {
        BRAID_CUBLAS_CHECK(api.sgemm(handle, op_b, op_a, int(n), int(m), int(k), &alpha,
                                     b.ptr<float>(), ldb, a.ptr<float>(), lda, &beta,
                                     y.ptr<float>(), ldy));
        return;
    }
    cudaDataType_t type;
    if (y.dtype() == dtype::Float16())
        type = CUDA_R_16F;
    else if (y.dtype() == dtype::BFloat16())
        type = CUDA_R_16BF;
    else
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                    y.dtype().name());
    BRAID_CUBLAS_CHECK(api.gemm_ex(handle, op_b, op_a, int(n), int(m), int(k), &alpha, b.raw_ptr(),
                                   type, ldb, a.raw_ptr(), type, lda, &beta, y.raw_ptr(), type, ldy,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

} // namespace

void register_matmul_kernels() {
    register_kernel("MatMul", Device::Kind::CUDA, &matmul_cuda);
}

} // namespace braid::opr::cuda
