#include "operators/batch_norm.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "operators/dense_kernels.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace braid::opr {

namespace {
const char* const STAT_NAMES[] = {"", "scale", "bias", "mean", "var"};
} // namespace

BatchNorm::BatchNorm(const VarNodeArray& inputs, float eps, const OperatorConfig& config)
    : ParamOperator({eps}, config) {
    for (auto* in : inputs) add_input(in);
    add_output();
}

SymbolVar BatchNorm::make(SymbolVar x, SymbolVar scale, SymbolVar bias, SymbolVar mean,
                          SymbolVar var, float eps, const OperatorConfig& config) {
    VarNodeArray in{x.node(), scale.node(), bias.node(), mean.node(), var.node()};
    return x.graph().insert_opr(std::make_unique<BatchNorm>(in, eps, config))->output(0);
}

SymbolVar batch_norm(SymbolVar x, SymbolVar scale, SymbolVar bias, SymbolVar mean, SymbolVar var,
                     float eps) {
    return BatchNorm::make(x, scale, bias, mean, var, eps);
}

void BatchNorm::init_output_dtypes() {
    // The param is checked here, the first step after the operator got its name.
    if (!(m_param.eps >= 0.f) || !std::isfinite(m_param.eps))
        BRAID_THROW(ValueError, "{}: eps must be finite and >= 0, got {}", describe(), m_param.eps);
    DType dt = input(0)->dtype();
    if (!kern::is_dense_float(dt))
        BRAID_THROW(DTypeError, "{}: input dtype {} is not supported (float32, float16, bfloat16)",
                    describe(), dt.name());
    for (size_t i = 1; i < 5; ++i) {
        DType s = input(i)->dtype();
        if (s != dt && s != dtype::Float32())
            BRAID_THROW(DTypeError, "{}: {} has dtype {}; expected the input's {} or float32",
                        describe(), STAT_NAMES[i], s.name(), dt.name());
    }
    output(0)->set_dtype(dt);
}

bool BatchNorm::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    for (size_t i = 0; i < 5; ++i)
        if (!ctx.shape(i)) return false;
    const auto& x = *ctx.shape(0);
    if (x.ndim() < 2)
        BRAID_THROW(ShapeError, "{}: input must have a channel axis (rank >= 2), got {}",
                    describe(), x.to_string());
    size_t c = x[1];
    for (size_t i = 1; i < 5; ++i) {
        const auto& s = *ctx.shape(i);
        bool ok = s.ndim() == 1 && s[0] == c;
        if (s.ndim() == x.ndim()) {
            ok = s[1] == c;
            for (size_t d = 0; d < s.ndim(); ++d) ok &= d == 1 || s[d] == 1;
        }
        if (!ok)
            BRAID_THROW(ShapeError,
                        "{}: {} has shape {}; expected {{{}}} or {{1,{},1,...}} for input {}",
                        describe(), STAT_NAMES[i], s.to_string(), c, c, x.to_string());
    }
    out[0] = x;
    return true;
}

void BatchNorm::execute(ExecCtx& ctx) {
    Tensor x = kern::as_float32(ctx.input(0));
    Tensor& y = ctx.output(0);
    const auto& xs = x.shape();
    size_t c = xs[1], planes = xs[0] * c;
    size_t inner = c ? xs.total_nr_elems() / std::max<size_t>(planes, 1) : 0;
    if (xs.is_empty()) return;
    // Fold the statistics into one multiply-add per element: y = x·a[c] + b[c].
    Tensor stats[4];
    for (size_t i = 0; i < 4; ++i) stats[i] = kern::as_float32(ctx.input(i + 1));
    const float *scale = stats[0].ptr<float>(), *bias = stats[1].ptr<float>(),
                *mean = stats[2].ptr<float>(), *var = stats[3].ptr<float>();
    std::vector<float> mul(c), add(c);
    for (size_t i = 0; i < c; ++i) {
        double a = double(scale[i]) / std::sqrt(double(var[i]) + double(m_param.eps));
        mul[i] = float(a);
        add[i] = float(double(bias[i]) - double(mean[i]) * a);
    }
    Tensor yf = kern::float32_target(y);
    const float* xp = x.ptr<float>();
    float* yp = yf.ptr<float>();
    parallel_for(planes, std::max<size_t>(1, 16384 / std::max<size_t>(inner, 1)),
                 [&](size_t begin, size_t end) {
                     for (size_t pl = begin; pl < end; ++pl) {
                         float a = mul[pl % c], b = add[pl % c];
                         const float* src = xp + pl * inner;
                         float* dst = yp + pl * inner;
                         for (size_t i = 0; i < inner; ++i) dst[i] = src[i] * a + b;
                     }
                 });
    kern::store_float32(yf, y);
}

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

static SymbolVarArray load_batch_norm(const OprLoadContext& ctx) {
    ctx.expect_inputs(5, 5);
    float eps = read_param<BatchNorm::Param>(ctx.params).eps;
    if (!(eps >= 0 && eps <= std::numeric_limits<float>::max()))
        BRAID_THROW(SerializationError,
                    "{}: param \"eps\" is {}; expected a finite float32 value >= 0",
                    ctx.params.context(), eps);
    return {BatchNorm::make(ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3), ctx.input(4),
                            eps, ctx.config)};
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_batch_norm_kernels();
}
#endif

void register_batch_norm_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("BatchNorm", "batch_norm", dump_param<BatchNorm>, load_batch_norm);
    register_grad_rule("BatchNorm", BatchNorm::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_batch_norm_kernels(); // operators/cuda/batch_norm.cpp
#endif
}

} // namespace braid::opr
