// Parameter updates for training steps. An update operator writes the new value into the
// parameter's own storage (the parameter is donated), so a training step allocates no new
// parameter memory; its output is the updated parameter itself.
//
// Ordering: an update reads the gradient and the loss, so it runs after the backward pass;
// on its comp node it also runs after every operator inserted before it. Keep the operators
// that read a parameter on the update's comp node, or on the loss's path.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! The update rule.
enum class OptimizerKind : uint8_t { SGD, ADAM };
//! "SGD" or "ADAM".
const char* optimizer_kind_name(OptimizerKind kind);

//! Update rule and hyper-parameters (the params of ParamUpdate).
struct OptimizerConfig {
    using Kind = OptimizerKind;
    Kind kind = Kind::SGD;
    float lr = 0.01f;
    float momentum = 0.f;                            //!< SGD: v = momentum * v + g; p -= lr * v
    float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f; //!< Adam
    float weight_decay = 0.f;                        //!< added to the gradient as weight_decay * p
    static constexpr auto fields() {
        using P = OptimizerConfig;
        return std::tuple{param_field("kind", &P::kind, optimizer_kind_name),
                          param_field("lr", &P::lr),
                          param_field("momentum", &P::momentum),
                          param_field("beta1", &P::beta1),
                          param_field("beta2", &P::beta2),
                          param_field("eps", &P::eps),
                          param_field("weight_decay", &P::weight_decay)};
    }
};

//! param ← update(param, grad). `param` must be a SharedParam var (float32); `after` are
//! extra vars the update must wait for (e.g. the loss).
class ParamUpdate final : public ParamOperator<ParamUpdate, OptimizerConfig> {
public:
    ParamUpdate(VarNode* param, VarNode* grad, const VarNodeArray& after, OptimizerConfig config,
                const OperatorConfig& opr_config);
    static SymbolVar make(SymbolVar param, SymbolVar grad, const SymbolVarArray& after,
                          OptimizerConfig config, const OperatorConfig& opr_config = {});

    const char* type_name() const override { return "ParamUpdate"; }
    //! Never merged with an equal-looking update: each applies its own step.
    bool allow_dedup() const override { return false; }
    ValueInference value_inference() const override { return ValueInference::NONE; }
    bool accepts_strided_inputs() const override { return true; }
    OutputMem output_mem(size_t) const override { return OutputMem::BOUND; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
    //! The update rule and hyper-parameters (the Param).
    const OptimizerConfig& config() const { return m_param; }
    //! Number of updates applied so far.
    uint64_t steps() const { return m_steps; }
    //! Counts one applied update and returns the new count (used by device kernels, whose
    //! optimizer moments live in kernel_state()).
    uint64_t count_step() { return ++m_steps; }

private:
    Tensor m_state1, m_state2; //!< momentum / Adam first and second moments
    uint64_t m_steps = 0;
};

//! Gradients of `loss` for every parameter and one update each; compile the returned vars
//! (with the loss) to get a training step as one executable.
SymbolVarArray minimize(SymbolVar loss, const SymbolVarArray& params, OptimizerConfig config);

} // namespace braid::opr
