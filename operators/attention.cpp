#include "operators/attention.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "operators/attention_kernels.h"
#include "operators/dense_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace braid::opr {

Attention::Attention(VarNode* q, VarNode* k, VarNode* v, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(q);
    add_input(k);
    add_input(v);
    add_output("out");
    add_output("lse");
}

SymbolVarArray Attention::make(SymbolVar q, SymbolVar k, SymbolVar v, Param param,
                               const OperatorConfig& config) {
    auto* opr = q.graph().insert_opr(
        std::make_unique<Attention>(q.node(), k.node(), v.node(), param, config));
    return {opr->output(0), opr->output(1)};
}

SymbolVarArray scaled_dot_product_attention(SymbolVar q, SymbolVar k, SymbolVar v, bool causal,
                                            std::optional<float> scale) {
    return Attention::make(q, k, v, {causal, scale});
}

void Attention::init_output_dtypes() {
    // The param is checked here, the first step after the operator got its name.
    if (m_param.scale && !std::isfinite(*m_param.scale))
        BRAID_THROW(ValueError, "{}: scale must be finite, got {}", describe(), *m_param.scale);
    DType q = input(0)->dtype(), k = input(1)->dtype(), v = input(2)->dtype();
    if (q != k || q != v || !kern::is_dense_float(q))
        BRAID_THROW(DTypeError,
                    "{}: q, k and v must share a float dtype (float32, float16 or bfloat16), got "
                    "{}, {} and {}",
                    describe(), q.name(), k.name(), v.name());
    output(0)->set_dtype(q);
    output(1)->set_dtype(dtype::Float32());
}

bool Attention::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1) || !ctx.shape(2)) return false;
    const auto &q = *ctx.shape(0), &k = *ctx.shape(1), &v = *ctx.shape(2);
    if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4)
        BRAID_THROW(ShapeError, "{}: q, k and v must be 4-D [B, H, S, D], got {}, {} and {}",
                    describe(), q.to_string(), k.to_string(), v.to_string());
    if (k[0] != q[0] || k[1] != q[1] || v[0] != q[0] || v[1] != q[1])
        BRAID_THROW(ShapeError, "{}: batch and head dims differ: q {}, k {}, v {}", describe(),
                    q.to_string(), k.to_string(), v.to_string());
    if (k[3] != q[3])
        BRAID_THROW(ShapeError, "{}: head dims differ: q {} has D = {}, k {} has D = {}",
                    describe(), q.to_string(), q[3], k.to_string(), k[3]);
    if (v[2] != k[2])
        BRAID_THROW(ShapeError, "{}: key counts differ: k {} has {} keys, v {} has {}", describe(),
                    k.to_string(), k[2], v.to_string(), v[2]);
    constexpr size_t int_max = size_t(std::numeric_limits<int>::max());
    if (q[2] > int_max || k[2] > int_max || q[3] > int_max || v[3] > int_max)
        BRAID_THROW(ShapeError, "{}: sizes of q {}, k {}, v {} exceed the BLAS limit {}",
                    describe(), q.to_string(), k.to_string(), v.to_string(), int_max);
    out[0] = TensorShape{q[0], q[1], q[2], v[3]};
    out[1] = TensorShape{q[0], q[1], q[2]};
    return true;
}

void Attention::execute(ExecCtx& ctx) {
    Tensor q = kern::as_float32(ctx.input(0)), k = kern::as_float32(ctx.input(1)),
           v = kern::as_float32(ctx.input(2));
    Tensor& out = ctx.output(0);
    Tensor& lse = ctx.output(1);
    const auto &qs = q.shape(), &ks = k.shape(), &vs = v.shape();
    kern::AttentionGeometry g{qs[2], ks[2], qs[3], vs[3], 0.f, m_param.causal};
    g.scale = m_param.scale ? *m_param.scale : 1.f / std::sqrt(float(g.d));
    Tensor outf = kern::float32_target(out);
    kern::attention_forward(g, qs[0] * qs[1], kern::HeadStrides::contiguous(g), q.ptr<float>(),
                            k.ptr<float>(), v.ptr<float>(), outf.ptr<float>(), lse.ptr<float>());
    kern::store_float32(outf, out);
}

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

static SymbolVarArray load_attention_grad(const OprLoadContext& ctx) {
    ctx.expect_inputs(6, 7);
    return AttentionGrad::make(ctx.inputs, read_param<AttentionGrad::Param>(ctx.params),
                               ctx.config);
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_attention_kernels();
}
#endif

void register_attention_operators() {
    auto& reg = OperatorRegistry::instance();
    // Loaded by make(), which refuses a non-finite scale.
    reg.add("Attention", "attention", dump_param<Attention>, load_param<Attention>);
    reg.add("AttentionGrad", "attention", dump_param<AttentionGrad>, load_attention_grad);
    register_grad_rule("Attention", Attention::grad_rule);
    register_non_differentiable("AttentionGrad",
                                "second derivatives of attention are not implemented");
#if BRAID_WITH_CUDA
    cuda::register_attention_kernels(); // operators/cuda/attention.cpp
#endif
}

} // namespace braid::opr
