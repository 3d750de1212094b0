#include "operators/matmul.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "operators/dense_kernels.h"

#include <limits>
#include <vector>

namespace braid::opr {

namespace {

void check_float_pair(const OperatorNode& opr) {
    DType a = opr.input(0)->dtype(), b = opr.input(1)->dtype();
    if (a != b || !(kern::is_dense_float(a) || a == dtype::Float64()))
        BRAID_THROW(DTypeError,
                    "{}: inputs must share a float dtype (float32, float16, bfloat16 or "
                    "float64), got {} and {}",
                    opr.describe(), a.name(), b.name());
}

//! The (m, k) of op(a) and (k, n) of op(b) from the last two dims of each shape; throws
//! ShapeError when the inner dims differ.
struct GemmDims {
    size_t m, n, k;
};

GemmDims gemm_dims(const OperatorNode& opr, const MatMulParam& p, const TensorShape& a,
                   const TensorShape& b) {
    size_t ra = a.ndim() - 2, rb = b.ndim() - 2;
    size_t m = p.transpose_a ? a[ra + 1] : a[ra];
    size_t ka = p.transpose_a ? a[ra] : a[ra + 1];
    size_t kb = p.transpose_b ? b[rb + 1] : b[rb];
    size_t n = p.transpose_b ? b[rb] : b[rb + 1];
    if (ka != kb)
        BRAID_THROW(ShapeError, "{}: inner dims differ: {} x {} (k = {} vs {})", opr.describe(),
                    a.to_string(), b.to_string(), ka, kb);
    constexpr size_t int_max = size_t(std::numeric_limits<int>::max());
    if (m > int_max || n > int_max || ka > int_max)
        BRAID_THROW(ShapeError, "{}: matrix dims of {} x {} exceed the BLAS limit of {}",
                    opr.describe(), a.to_string(), b.to_string(), int_max);
    return {m, n, ka};
}

//! The batched product in float64 (dgemm): y's batch item i multiplies a's item a_item[i] by
//! b's item b_item[i]; lda and ldb are the inputs' row strides (their last dims).
void matmul_f64(const MatMulParam& p, const GemmDims& d, const Tensor& a, size_t lda,
                const std::vector<size_t>& a_item, const Tensor& b, size_t ldb,
                const std::vector<size_t>& b_item, Tensor& y) {
    size_t nbatch = a_item.size();
    size_t a_mat = (p.transpose_a ? d.k : d.m) * lda, b_mat = (p.transpose_b ? d.n : d.k) * ldb;
    std::vector<const double*> as(nbatch), bs(nbatch);
    std::vector<double*> ys(nbatch);
    for (size_t i = 0; i < nbatch; ++i) {
        as[i] = a.ptr<double>() + a_item[i] * a_mat;
        bs[i] = b.ptr<double>() + b_item[i] * b_mat;
        ys[i] = y.ptr<double>() + i * d.m * d.n;
    }
    kern::dgemm_batched(p.transpose_a, p.transpose_b, d.m, d.n, d.k, as.data(), lda, bs.data(), ldb,
                        ys.data(), d.n, nbatch);
}

} // namespace

// ---- MatMul ----

MatMul::MatMul(VarNode* a, VarNode* b, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(a);
    add_input(b);
    add_output();
}

SymbolVar MatMul::make(SymbolVar a, SymbolVar b, Param param, const OperatorConfig& config) {
    return a.graph()
        .insert_opr(std::make_unique<MatMul>(a.node(), b.node(), param, config))
        ->output(0);
}

SymbolVar matmul(SymbolVar a, SymbolVar b, bool transpose_a, bool transpose_b) {
    return MatMul::make(a, b, {transpose_a, transpose_b});
}

void MatMul::init_output_dtypes() {
    check_float_pair(*this);
    output(0)->set_dtype(input(0)->dtype());
}

bool MatMul::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    const auto &a = *ctx.shape(0), &b = *ctx.shape(1);
    if (a.ndim() != 2 || b.ndim() != 2)
        BRAID_THROW(ShapeError, "{}: inputs must be 2-D, got {} and {} (BatchedMatMul takes more)",
                    describe(), a.to_string(), b.to_string());
    auto d = gemm_dims(*this, m_param, a, b);
    out[0] = TensorShape{d.m, d.n};
    return true;
}

void MatMul::execute(ExecCtx& ctx) {
    if (ctx.output(0).dtype() == dtype::Float64()) {
        Tensor a = ctx.input(0).contiguous(), b = ctx.input(1).contiguous();
        auto d = gemm_dims(*this, m_param, a.shape(), b.shape());
        matmul_f64(m_param, d, a, a.shape()[1], {0}, b, b.shape()[1], {0}, ctx.output(0));
        return;
    }
    Tensor a = kern::as_float32(ctx.input(0)), b = kern::as_float32(ctx.input(1));
    Tensor& y = ctx.output(0);
    Tensor yf = kern::float32_target(y);
    auto d = gemm_dims(*this, m_param, a.shape(), b.shape());
    kern::sgemm_parallel(m_param.transpose_a, m_param.transpose_b, d.m, d.n, d.k, 1.f,
                         a.ptr<float>(), a.shape()[1], b.ptr<float>(), b.shape()[1], 0.f,
                         yf.ptr<float>(), d.n);
    kern::store_float32(yf, y);
}

// ---- BatchedMatMul ----

BatchedMatMul::BatchedMatMul(VarNode* a, VarNode* b, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(a);
    add_input(b);
    add_output();
}

SymbolVar BatchedMatMul::make(SymbolVar a, SymbolVar b, Param param, const OperatorConfig& config) {
    return a.graph()
        .insert_opr(std::make_unique<BatchedMatMul>(a.node(), b.node(), param, config))
        ->output(0);
}

SymbolVar batched_matmul(SymbolVar a, SymbolVar b, bool transpose_a, bool transpose_b) {
    return BatchedMatMul::make(a, b, {transpose_a, transpose_b});
}

void BatchedMatMul::init_output_dtypes() {
    check_float_pair(*this);
    output(0)->set_dtype(input(0)->dtype());
}

namespace {

//! The batch dims of `s` (all but the last two).
TensorShape batch_shape(const TensorShape& s) {
    TensorShape r;
    r.set_ndim(s.ndim() - 2);
    for (size_t i = 0; i + 2 < s.ndim(); ++i) r[i] = s[i];
    return r;
}

} // namespace

bool BatchedMatMul::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    const auto &a = *ctx.shape(0), &b = *ctx.shape(1);
    if (a.ndim() < 2 || b.ndim() < 2)
        BRAID_THROW(ShapeError, "{}: inputs need at least 2 dims, got {} and {}", describe(),
                    a.to_string(), b.to_string());
    auto d = gemm_dims(*this, m_param, a, b);
    TensorShape ba = batch_shape(a), bb = batch_shape(b), batch;
    const TensorShape* shapes[] = {&ba, &bb};
    if (!broadcast_shapes(shapes, 2, batch))
        BRAID_THROW(ShapeError, "{}: batch dims {} of {} do not broadcast with batch dims {} of {}",
                    describe(), ba.to_string(), a.to_string(), bb.to_string(), b.to_string());
    if (batch.ndim() + 2 > TensorShape::MAX_NDIM)
        BRAID_THROW(ShapeError, "{}: result of {} x {} would have more than {} dims", describe(),
                    a.to_string(), b.to_string(), TensorShape::MAX_NDIM);
    TensorShape y;
    y.set_ndim(batch.ndim() + 2);
    for (size_t i = 0; i < batch.ndim(); ++i) y[i] = batch[i];
    y[batch.ndim()] = d.m;
    y[batch.ndim() + 1] = d.n;
    out[0] = y;
    return true;
}

void BatchedMatMul::execute(ExecCtx& ctx) {
    if (ctx.output(0).dtype() == dtype::Float64()) {
        execute_f64(ctx);
        return;
    }
    Tensor a = kern::as_float32(ctx.input(0)), b = kern::as_float32(ctx.input(1));
    Tensor& y = ctx.output(0);
    Tensor yf = kern::float32_target(y);
    const auto &sa = a.shape(), &sb = b.shape();
    auto d = gemm_dims(*this, m_param, sa, sb);
    TensorShape out_batch = batch_shape(y.shape());
    size_t nbatch = out_batch.total_nr_elems();
    if (nbatch == 0 || d.m == 0 || d.n == 0) return;
    size_t lda = sa[sa.ndim() - 1], ldb = sb[sb.ndim() - 1];
    size_t a_mat = sa[sa.ndim() - 2] * lda, b_mat = sb[sb.ndim() - 2] * ldb, y_mat = d.m * d.n;

    // Matrix index of each batch item in a and b: contiguous strides over the batch dims,
    // broadcast (stride 0) where an input's batch dim is 1 or missing.
    TensorLayout la(batch_shape(sa), dtype::Float32()), lb(batch_shape(sb), dtype::Float32());
    la = la.broadcast(out_batch);
    lb = lb.broadcast(out_batch);
    size_t a_count = batch_shape(sa).total_nr_elems(), b_count = batch_shape(sb).total_nr_elems();

    const float* ap = a.ptr<float>();
    const float* bp = b.ptr<float>();
    float* yp = yf.ptr<float>();
    if (b_count == 1 && a_count == nbatch && !m_param.transpose_a) {
        // One right-hand matrix for every item: a's matrices stack into one [nbatch*m, k]
        // matrix, so the whole batch is a single large GEMM.
        kern::sgemm_parallel(false, m_param.transpose_b, nbatch * d.m, d.n, d.k, 1.f, ap, lda, bp,
                             ldb, 0.f, yp, d.n);
    } else {
        std::vector<const float*> as(nbatch), bs(nbatch);
        std::vector<float*> ys(nbatch);
        for_each_strided(la, [&](size_t i, ptrdiff_t off) { as[i] = ap + size_t(off) * a_mat; });
        for_each_strided(lb, [&](size_t i, ptrdiff_t off) { bs[i] = bp + size_t(off) * b_mat; });
        for (size_t i = 0; i < nbatch; ++i) ys[i] = yp + i * y_mat;
        kern::sgemm_batched(m_param.transpose_a, m_param.transpose_b, d.m, d.n, d.k, 1.f, as.data(),
                            lda, bs.data(), ldb, 0.f, ys.data(), d.n, nbatch);
    }
    kern::store_float32(yf, y);
}

void BatchedMatMul::execute_f64(ExecCtx& ctx) {
    Tensor a = ctx.input(0).contiguous(), b = ctx.input(1).contiguous();
    Tensor& y = ctx.output(0);
    const auto &sa = a.shape(), &sb = b.shape();
    auto d = gemm_dims(*this, m_param, sa, sb);
    TensorShape out_batch = batch_shape(y.shape());
    size_t nbatch = out_batch.total_nr_elems();
    if (nbatch == 0 || d.m == 0 || d.n == 0) return;
    // Matrix index of each batch item in a and b, broadcast like the float32 path.
    TensorLayout la(batch_shape(sa), dtype::Float64()), lb(batch_shape(sb), dtype::Float64());
    la = la.broadcast(out_batch);
    lb = lb.broadcast(out_batch);
    std::vector<size_t> a_item(nbatch), b_item(nbatch);
    for_each_strided(la, [&](size_t i, ptrdiff_t off) { a_item[i] = size_t(off); });
    for_each_strided(lb, [&](size_t i, ptrdiff_t off) { b_item[i] = size_t(off); });
    matmul_f64(m_param, d, a, sa[sa.ndim() - 1], a_item, b, sb[sb.ndim() - 1], b_item, y);
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_matmul_kernels();
}
#endif

void register_matmul_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("MatMul", "matmul", dump_param<MatMul>, load_param<MatMul>);
    reg.add("BatchedMatMul", "matmul", dump_param<BatchedMatMul>, load_param<BatchedMatMul>);
    register_grad_rule("MatMul", MatMul::grad_rule);
    register_grad_rule("BatchedMatMul", BatchedMatMul::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_matmul_kernels(); // operators/cuda/matmul.cpp
#endif
}

} // namespace braid::opr
