#include "operators/copy.h"
#include "graph/operator_registry.h"

#include "base/error.h"
#include "graph/grad.h"
#include "graph/kernel_registry.h"
#include "operators/optimizer.h"

namespace braid::opr {

Copy::Copy(VarNode* x, const OperatorConfig& config) : OperatorNode(config) {
    add_input(x);
    add_output();
}

SymbolVar Copy::make(SymbolVar x, CompNode target, const OperatorConfig& config) {
    if (!x.valid()) BRAID_THROW(GraphError, "Copy: the input var is null");
    if (!target.valid()) BRAID_THROW(GraphError, "Copy of \"{}\": invalid target", x.name());
    if (x.comp_node() == target) return x;
    OperatorConfig cfg = config;
    cfg.comp_node = target;
    if (cfg.name.empty()) cfg.name = x.name() + "@" + target.locator();
    return x.graph().insert_opr(std::make_unique<Copy>(x.node(), cfg))->output(0);
}

std::string Copy::param_string() const {
    return input(0)->comp_node().locator() + "->" + comp_node().locator();
}

bool Copy::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    out[0] = *ctx.shape(0);
    return true;
}

void Copy::execute(ExecCtx& ctx) {
    // The comp node picks the path: host memcpy, or a CUDA copy on its stream (a CPU comp
    // node copies synchronously).
    comp_node().copy(ctx.output(0), ctx.input(0));
}

namespace {

VarNode* route_through_copy(OperatorNode& reader, size_t input_idx, CompNode target) {
    VarNode* in = reader.input(input_idx);
    if (dynamic_cast<Copy*>(&reader)) return in; // reads across devices on purpose
    if (dynamic_cast<ParamUpdate*>(&reader) && input_idx == 0)
        BRAID_THROW(GraphError,
                    "ParamUpdate on {} updates parameter \"{}\", which lives on {}: an update "
                    "writes into the parameter's storage, so it must run on a comp node of the "
                    "parameter's device",
                    target.locator(), in->name(), in->comp_node().locator());
    return Copy::make(in, target).node();
}

VarNode* copy_grad(OperatorNode& opr, size_t, const VarNodeArray& out_grads) {
    if (!out_grads[0]) return nullptr;
    return Copy::make(out_grads[0], opr.input(0)->comp_node()).node();
}

void copy_kernel(OperatorNode& opr, ExecCtx& ctx) {
    opr.execute(ctx);
}

} // namespace

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

//! The target is the loaded operator's comp node, stored with every operator.
static SymbolVarArray load_copy(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 1);
    return {Copy::make(ctx.input(0), ctx.config.comp_node, ctx.config)};
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

void register_copy_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("Copy", "copy", no_params, load_copy);
    set_cross_device_copy(&route_through_copy);
    register_grad_rule("Copy", copy_grad);
    // Copy is device-agnostic (CompNode::copy picks the path), so its CUDA kernel is execute().
    register_kernel("Copy", Device::Kind::CUDA, &copy_kernel);
}

} // namespace braid::opr
