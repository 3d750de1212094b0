#include "operators/matmul.h"

#include "base/error.h"
#include "base/hash.h"

#include <cblas.h>

namespace braid::opr {

MatMul::MatMul(VarNode* a, VarNode* b, Param param, const OperatorConfig& config)
    : OperatorNode(config), m_param(param) {
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

void MatMul::hash_params(Hasher& h) const {
    h.add_pod(m_param.transpose_a).add_pod(m_param.transpose_b);
}

bool MatMul::params_equal(const OperatorNode& rhs) const {
    auto& o = static_cast<const MatMul&>(rhs).m_param;
    return o.transpose_a == m_param.transpose_a && o.transpose_b == m_param.transpose_b;
}

std::string MatMul::param_string() const {
    return fmt::format("{}{}", m_param.transpose_a ? "A^T" : "A",
                       m_param.transpose_b ? "B^T" : "B");
}

void MatMul::init_output_dtypes() {
    DType a = input(0)->dtype(), b = input(1)->dtype();
    if (a != b || !a.is_float())
        BRAID_THROW(DTypeError, "{}: inputs must share a float dtype, got {} and {}", describe(),
                    a.name(), b.name());
    output(0)->set_dtype(a);
}

bool MatMul::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    const auto &a = *ctx.shape(0), &b = *ctx.shape(1);
    if (a.ndim() != 2 || b.ndim() != 2)
        BRAID_THROW(ShapeError, "{}: inputs must be 2-D, got {} and {}", describe(), a.to_string(),
                    b.to_string());
    size_t m = m_param.transpose_a ? a[1] : a[0];
    size_t ka = m_param.transpose_a ? a[0] : a[1];
    size_t kb = m_param.transpose_b ? b[1] : b[0];
    size_t n = m_param.transpose_b ? b[0] : b[1];
    if (ka != kb)
        BRAID_THROW(ShapeError, "{}: inner dims differ: {} x {} (k = {} vs {})", describe(),
                    a.to_string(), b.to_string(), ka, kb);
    out[0] = TensorShape{m, n};
    return true;
}

void MatMul::execute(ExecCtx& ctx) {
    Tensor a = ctx.input(0), b = ctx.input(1);
    Tensor& y = ctx.output(0);
    bool convert = y.dtype() != dtype::Float32();
    Tensor yf = y;
    if (convert) {
        auto to_f32 = [](const Tensor& t) {
            Tensor r(t.shape(), dtype::Float32());
            convert_elements(t.dtype(), t.raw_ptr(), dtype::Float32(), r.raw_ptr(),
                             t.shape().total_nr_elems());
            return r;
        };
        a = to_f32(a);
        b = to_f32(b);
        yf = Tensor(y.shape(), dtype::Float32());
    }
    int m = int(y.shape()[0]), n = int(y.shape()[1]);
    int k = int(m_param.transpose_a ? a.shape()[0] : a.shape()[1]);
    if (m && n) {
        if (k == 0) {
            std::memset(yf.raw_ptr(), 0, yf.nr_bytes());
        } else {
            cblas_sgemm(CblasRowMajor, m_param.transpose_a ? CblasTrans : CblasNoTrans,
                        m_param.transpose_b ? CblasTrans : CblasNoTrans, m, n, k, 1.f,
                        a.ptr<float>(), int(a.shape()[1]), b.ptr<float>(), int(b.shape()[1]), 0.f,
                        yf.ptr<float>(), n);
        }
    }
    if (convert)
        convert_elements(dtype::Float32(), yf.raw_ptr(), y.dtype(), y.raw_ptr(),
                         y.shape().total_nr_elems());
}

} // namespace braid::opr

// ---- serialization: params dump and load, registered in register_all_operators()
#include "serialization/params.h"

namespace braid::opr {

void dump_matmul(const OperatorNode& opr, ParamWriter& w) {
    auto& p = opr_cast<MatMul>(opr).param();
    w.write_bool("transpose_a", p.transpose_a);
    w.write_bool("transpose_b", p.transpose_b);
}

SymbolVarArray load_matmul(const OprLoadContext& ctx) {
    ctx.expect_inputs(2, 2);
    MatMul::Param p{ctx.params.read_bool("transpose_a"), ctx.params.read_bool("transpose_b")};
    return {MatMul::make(ctx.input(0), ctx.input(1), p, ctx.config)};
}

} // namespace braid::opr
