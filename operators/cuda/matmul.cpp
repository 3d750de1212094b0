// CUDA kernels of MatMul and BatchedMatMul through cuBLAS: cublasSgemm for float32 and
// cublasGemmEx with float32 accumulation for float16 and bfloat16 (MatMul);
// cublasGemmStridedBatchedEx, float32 accumulation, for every dtype (BatchedMatMul). One cuBLAS
// handle per comp node, bound to its stream.
#include "operators/matmul.h"
#include "base/cuda_check.h"
#include "base/cuda_cublas.h"
#include "base/error.h"
#include "operators/cuda/cuda_kernels.h"

#include <limits>
#include <vector>

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

cudaDataType cuda_data_type(const OperatorNode& opr, DType dt) {
    if (dt == dtype::Float32()) return CUDA_R_32F;
    if (dt == dtype::Float16()) return CUDA_R_16F;
    if (dt == dtype::BFloat16()) return CUDA_R_16BF;
    BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(), dt.name());
}

//! One batch dim of a BatchedMatMul after merging: its size and the matrix strides of a, b and
//! y along it (0 where an input is broadcast).
struct BatchDim {
    size_t size;
    ptrdiff_t a, b, y;
};

void batched_matmul_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& param = static_cast<BatchedMatMul&>(opr).param();
    auto& cuda = cuda_context(opr.comp_node());
    const Tensor &a = ctx.input(0), &b = ctx.input(1);
    Tensor& y = ctx.output(0);
    const TensorShape &sa = a.shape(), &sb = b.shape(), &sy = y.shape();
    size_t ra = sa.ndim(), rb = sb.ndim(), ry = sy.ndim();
    size_t m = sy[ry - 2], n = sy[ry - 1];
    size_t k = param.transpose_a ? sa[ra - 2] : sa[ra - 1];
    if (sy.is_empty()) return;
    if (k == 0) {
        BRAID_CUDA_CHECK(cudaMemsetAsync(y.raw_ptr(), 0, y.nr_bytes(), cuda.stream()));
        return;
    }
    size_t lda = sa[ra - 1], ldb = sb[rb - 1];
    constexpr size_t INT_LIMIT = size_t(std::numeric_limits<int>::max());
    if (m > INT_LIMIT || n > INT_LIMIT || k > INT_LIMIT || lda > INT_LIMIT || ldb > INT_LIMIT)
        BRAID_THROW(ShapeError, "{}: matrices of {} x {} exceed cuBLAS's 32-bit sizes",
                    opr.describe(), sa.to_string(), sb.to_string());
    cudaDataType type = cuda_data_type(opr, y.dtype());
    ptrdiff_t es = ptrdiff_t(y.dtype().size());
    ptrdiff_t a_mat = ptrdiff_t(sa[ra - 2] * lda), b_mat = ptrdiff_t(sb[rb - 2] * ldb),
              y_mat = ptrdiff_t(m * n);

    // The batch dims: each input's matrix strides broadcast to the output's batch shape,
    // size-1 dims dropped and neighbours merged where all three stay linear across them.
    auto batch_of = [](const TensorShape& s) {
        TensorShape r;
        r.set_ndim(s.ndim() - 2);
        for (size_t i = 0; i + 2 < s.ndim(); ++i) r[i] = s[i];
        return r;
    };
    TensorShape out_batch = batch_of(sy);
    TensorLayout la = TensorLayout(batch_of(sa), y.dtype()).broadcast(out_batch);
    TensorLayout lb = TensorLayout(batch_of(sb), y.dtype()).broadcast(out_batch);
    TensorLayout ly(out_batch, y.dtype());
    std::vector<BatchDim> dims;
    for (size_t d = 0; d < out_batch.ndim(); ++d) {
        size_t len = out_batch[d];
        if (len == 1) continue;
        if (!dims.empty()) {
            BatchDim& last = dims.back();
            ptrdiff_t l = ptrdiff_t(len);
            if (last.a == la.stride[d] * l && last.b == lb.stride[d] * l &&
                last.y == ly.stride[d] * l) {
                last.size *= len;
                last.a = la.stride[d];
                last.b = lb.stride[d];
                last.y = ly.stride[d];
                continue;
            }
        }
        dims.push_back({len, la.stride[d], lb.stride[d], ly.stride[d]});
    }
    if (dims.empty()) dims.push_back({1, 0, 0, 0});

    const auto& api = load_cublas();
    cublasHandle_t handle = cuda.cublas();
    const float alpha = 1.f, beta = 0.f;
    cublasOperation_t op_a = param.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = param.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    // Row-major y = op(a) op(b) is column-major y^T = op(b)^T op(a)^T: swap the operands.
    auto gemm = [&](size_t rows, const uint8_t* ap, ptrdiff_t stride_a, const uint8_t* bp,
                    ptrdiff_t stride_b, uint8_t* yp, ptrdiff_t stride_y, size_t count) {
        for (size_t c0 = 0; c0 < count; c0 += INT_LIMIT) {
            size_t c = std::min(count - c0, INT_LIMIT);
            ptrdiff_t i0 = ptrdiff_t(c0);
            BRAID_CUBLAS_CHECK(api.gemm_strided_batched_ex(
                handle, op_b, op_a, int(n), int(rows), int(k), &alpha, bp + i0 * stride_b * es,
                type, int(ldb), stride_b, ap + i0 * stride_a * es, type, int(lda), stride_a, &beta,
                yp + i0 * stride_y * es, type, int(n), stride_y, int(c), CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT));
        }
    };
    const uint8_t* ap = a.raw_ptr();
    const uint8_t* bp = b.raw_ptr();
    uint8_t* yp = y.raw_ptr();
    size_t nbatch = out_batch.total_nr_elems();
    if (dims.size() == 1 && dims[0].b == 0 && dims[0].a == 1 && !param.transpose_a &&
        nbatch * m <= INT_LIMIT) {
        // One right-hand matrix for every item and a's matrices packed: they stack into one
        // [nbatch * m, k] matrix, so the whole batch is a single GEMM.
        gemm(nbatch * m, ap, 0, bp, 0, yp, 0, 1);
        return;
    }
    // The innermost merged dim is one strided batched call; the host walks the others.
    BatchDim inner = dims.back();
    dims.pop_back();
    size_t outer = 1;
    for (auto& d : dims) outer *= d.size;
    std::vector<size_t> idx(dims.size(), 0);
    for (size_t o = 0; o < outer; ++o) {
        ptrdiff_t oa = 0, ob = 0, oy = 0;
        for (size_t d = 0; d < dims.size(); ++d) {
            oa += ptrdiff_t(idx[d]) * dims[d].a;
            ob += ptrdiff_t(idx[d]) * dims[d].b;
            oy += ptrdiff_t(idx[d]) * dims[d].y;
        }
        gemm(m, ap + oa * a_mat * es, inner.a * a_mat, bp + ob * b_mat * es, inner.b * b_mat,
             yp + oy * y_mat * es, inner.y * y_mat, inner.size);
        for (size_t d = dims.size(); d-- > 0;) {
            if (++idx[d] < dims[d].size) break;
            idx[d] = 0;
        }
    }
}

} // namespace

void register_matmul_kernels() {
    register_kernel("MatMul", Device::Kind::CUDA, &matmul_cuda);
    register_kernel("BatchedMatMul", Device::Kind::CUDA, &batched_matmul_cuda);
}

} // namespace braid::opr::cuda
