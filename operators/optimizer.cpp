#include "operators/optimizer.h"
#include "graph/operator_registry.h"

#include "base/error.h"
#include "graph/grad.h"
#include "operators/grad_util.h"
#include "operators/io.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace braid::opr {

ParamUpdate::ParamUpdate(VarNode* param, VarNode* grad, const VarNodeArray& after,
                         OptimizerConfig config, const OperatorConfig& opr_config)
    : ParamOperator(config, opr_config) {
    if (!dynamic_cast<SharedParam*>(param->owner()))
        BRAID_THROW(GraphError,
                    "ParamUpdate: \"{}\" is not a parameter (a SharedParam var); only parameter "
                    "storage can be updated in place",
                    param->name());
    add_input(param);
    add_input(grad);
    for (auto* v : after) add_input(v);
    add_output();
}

SymbolVar ParamUpdate::make(SymbolVar param, SymbolVar grad, const SymbolVarArray& after,
                            OptimizerConfig config, const OperatorConfig& opr_config) {
    VarNodeArray a;
    for (auto& v : after) a.push_back(v.node());
    return param.graph()
        .insert_opr(std::make_unique<ParamUpdate>(param.node(), grad.node(), a, config, opr_config))
        ->output(0);
}

void ParamUpdate::init_output_dtypes() {
    if (input(0)->dtype() != dtype::Float32() || input(1)->dtype() != dtype::Float32())
        BRAID_THROW(DTypeError, "{}: parameter and gradient must be float32, got {} and {}",
                    describe(), input(0)->dtype().name(), input(1)->dtype().name());
    output(0)->set_dtype(input(0)->dtype());
}

bool ParamUpdate::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    if (*ctx.shape(0) != *ctx.shape(1))
        BRAID_THROW(ShapeError, "{}: parameter {} and gradient {} differ", describe(),
                    ctx.shape(0)->to_string(), ctx.shape(1)->to_string());
    out[0] = *ctx.shape(0);
    return true;
}

void ParamUpdate::execute(ExecCtx& ctx) {
    const Tensor& p_t = ctx.input(0); // the parameter's own storage (SharedParam binds it)
    Tensor g_t = ctx.input(1).contiguous();
    size_t n = p_t.shape().total_nr_elems();
    float* p = p_t.ptr<float>();
    const float* g = g_t.ptr<float>();
    const auto& c = m_param;
    auto ensure_state = [&](Tensor& s) {
        if (s.empty() || s.shape() != p_t.shape()) {
            s = Tensor(p_t.shape(), dtype::Float32());
            std::memset(s.raw_ptr(), 0, s.nr_bytes());
        }
    };
    ++m_steps;
    if (c.kind == OptimizerConfig::Kind::SGD) {
        if (c.momentum == 0.f) {
            for (size_t i = 0; i < n; ++i) p[i] -= c.lr * (g[i] + c.weight_decay * p[i]);
        } else {
            ensure_state(m_state1);
            float* v = m_state1.ptr<float>();
            for (size_t i = 0; i < n; ++i) {
                v[i] = c.momentum * v[i] + g[i] + c.weight_decay * p[i];
                p[i] -= c.lr * v[i];
            }
        }
    } else {
        ensure_state(m_state1);
        ensure_state(m_state2);
        float* m = m_state1.ptr<float>();
        float* v = m_state2.ptr<float>();
        float bc1 = 1.f - std::pow(c.beta1, float(m_steps));
        float bc2 = 1.f - std::pow(c.beta2, float(m_steps));
        for (size_t i = 0; i < n; ++i) {
            float gi = g[i] + c.weight_decay * p[i];
            m[i] = c.beta1 * m[i] + (1.f - c.beta1) * gi;
            v[i] = c.beta2 * v[i] + (1.f - c.beta2) * gi * gi;
            p[i] -= c.lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + c.eps);
        }
    }
    ctx.output(0) = p_t;
}

SymbolVarArray minimize(SymbolVar loss, const SymbolVarArray& params, OptimizerConfig config) {
    if (params.empty()) BRAID_THROW(GraphError, "minimize(): no parameters given");
    auto grads = grad(loss, params);
    SymbolVarArray updates;
    for (size_t i = 0; i < params.size(); ++i)
        updates.push_back(ParamUpdate::make(params[i], grads[i], {loss}, config,
                                            OperatorConfig::on(params[i].comp_node())));
    return updates;
}

const char* optimizer_kind_name(OptimizerKind kind) {
    switch (kind) {
    case OptimizerKind::SGD:
        return "SGD";
    case OptimizerKind::ADAM:
        return "ADAM";
    }
    return "?";
}

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

static SymbolVarArray load_param_update(const OprLoadContext& ctx) {
    ctx.expect_inputs(2, std::numeric_limits<size_t>::max());
    const auto& r = ctx.params;
    auto c = read_param<OptimizerConfig>(r);
    for (auto [name, v] : {std::pair{"lr", c.lr}, std::pair{"momentum", c.momentum},
                           std::pair{"beta1", c.beta1}, std::pair{"beta2", c.beta2},
                           std::pair{"eps", c.eps}, std::pair{"weight_decay", c.weight_decay}})
        if (!std::isfinite(v))
            BRAID_THROW(SerializationError,
                        "{}: param \"{}\" is {}; expected a finite float32 value", r.context(),
                        name, v);
    if (c.kind == OptimizerConfig::Kind::ADAM) {
        for (auto [name, beta] : {std::pair{"beta1", c.beta1}, std::pair{"beta2", c.beta2}})
            if (!(beta >= 0.f && beta < 1.f))
                BRAID_THROW(SerializationError, "{}: param \"{}\" is {}; Adam needs 0 <= beta < 1",
                            r.context(), name, beta);
    }
    SymbolVarArray after(ctx.inputs.begin() + 2, ctx.inputs.end());
    // make() refuses a parameter input that is not a SharedParam (GraphError).
    return {ParamUpdate::make(ctx.input(0), ctx.input(1), after, c, ctx.config)};
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_optimizer_kernels();
}
#endif

void register_optimizer_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("ParamUpdate", "optimizer", dump_param<ParamUpdate>, load_param_update);
    register_non_differentiable("ParamUpdate", "parameter updates have no gradient");
#if BRAID_WITH_CUDA
    cuda::register_optimizer_kernels(); // operators/cuda/optimizer.cpp
#endif
}

} // namespace braid::opr
