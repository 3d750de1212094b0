#include "graph/grad.h"

#include "base/error.h"
#include "graph/computing_graph.h"
#include "graph/operator_registry.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace braid {

namespace {

// Rules live in the operator descriptors (graph/operator_registry.h); the walk's arithmetic
// is installed once.
struct GradArithSlot {
    std::mutex mutex;
    GradArith arith;
};

GradArithSlot& arith_slot() {
    static GradArithSlot slot;
    return slot;
}

} // namespace

void register_grad_rule(const std::string& type_name, GradRule rule, bool always_run) {
    OperatorRegistry::instance().update(type_name, [&](OperatorDescriptor& d) {
        d.grad = std::move(rule);
        d.grad_always_run = always_run;
    });
}

void register_non_differentiable(const std::string& type_name, const std::string& reason) {
    OperatorRegistry::instance().update(
        type_name, [&](OperatorDescriptor& d) { d.non_differentiable_reason = reason; });
}

void set_grad_arith(GradArith arith) {
    auto& slot = arith_slot();
    std::lock_guard lk(slot.mutex);
    slot.arith = std::move(arith);
}

SymbolVar grad(SymbolVar loss, SymbolVar wrt, const GradOptions& options) {
    return grad(loss, SymbolVarArray{wrt}, options)[0];
}

SymbolVarArray grad(SymbolVar loss, const SymbolVarArray& wrt, const GradOptions& options) {
    auto& reg = OperatorRegistry::instance();
    GradArith arith;
    {
        std::lock_guard lk(arith_slot().mutex);
        arith = arith_slot().arith;
    }
    if (!arith.add)
        BRAID_THROW(GraphError, "grad(): the operator library is not registered; call "
                                "braid::register_all_operators() first");
    if (!loss.valid()) BRAID_THROW(GraphError, "grad(): the loss var is null");
    VarNode* loss_var = loss.node();
    ComputingGraph* graph = loss_var->graph();

    // Operators the loss depends on.
    std::unordered_set<OperatorNode*> ancestors;
    std::vector<OperatorNode*> stack{loss_var->owner()};
    while (!stack.empty()) {
        auto* opr = stack.back();
        stack.pop_back();
        if (!ancestors.insert(opr).second) continue;
        for (auto* in : opr->inputs()) stack.push_back(in->owner());
    }
    // Gradient rules need static shapes, and some shapes are known only once peers have said
    // them (a BROADCAST non-root learns its output shape from the root): infer what is still
    // unknown, in order, letting such rules wait for their peers (within their deadlines).
    for (auto& opr_ptr : graph->operators()) {
        auto* opr = opr_ptr.get();
        if (!ancestors.count(opr)) continue;
        bool unknown = false;
        for (auto* out : opr->outputs()) unknown |= !out->shape_known();
        if (unknown) graph->infer_opr(opr, /*may_block=*/true);
    }
    if (!loss_var->shape_known() || loss_var->shape().total_nr_elems() != 1)
        BRAID_THROW(
            GraphError, "grad(): the loss \"{}\" must be a scalar (one element), got shape {}",
            loss_var->name(), loss_var->shape_known() ? loss_var->shape().to_string() : "dynamic");
    if (!loss_var->dtype().is_float())
        BRAID_THROW(DTypeError, "grad(): the loss \"{}\" must be a float var, got {}",
                    loss_var->name(), loss_var->dtype().name());
    for (auto& w : wrt)
        if (!w.valid() || w.node()->graph() != graph)
            BRAID_THROW(GraphError, "grad(): a wrt var is null or belongs to another graph");

    // Vars on a path from some wrt var to the loss: walk forward in insertion order.
    std::unordered_set<VarNode*> on_path;
    for (auto& w : wrt) on_path.insert(w.node());
    std::vector<OperatorNode*> active;
    auto always_run = [&](OperatorNode* opr) {
        auto* desc = reg.find(opr->type_name());
        return desc && desc->grad && desc->grad_always_run;
    };
    for (auto& opr_ptr : graph->operators()) {
        auto* opr = opr_ptr.get();
        if (!ancestors.count(opr)) continue;
        bool touches = false;
        for (auto* in : opr->inputs()) touches |= on_path.count(in) > 0;
        // An always-run operator's outputs are gradient sources like wrt vars: its gradient
        // has side effects peers rely on, even when no input of it needs a gradient.
        if (!touches && !always_run(opr)) continue;
        active.push_back(opr);
        for (auto* out : opr->outputs()) on_path.insert(out);
    }
    VarNodeArray side_effects;

    std::unordered_map<VarNode*, std::vector<VarNode*>> contributions;
    auto summed = [&](VarNode* var) -> VarNode* {
        auto it = contributions.find(var);
        if (it == contributions.end() || it->second.empty()) return nullptr;
        auto& parts = it->second;
        while (parts.size() > 1) { // pairwise, so long sums stay shallow
            std::vector<VarNode*> next;
            for (size_t i = 0; i + 1 < parts.size(); i += 2)
                next.push_back(arith.add(parts[i], parts[i + 1]));
            if (parts.size() % 2) next.push_back(parts.back());
            parts.swap(next);
        }
        return parts[0];
    };
    contributions[loss_var].push_back(arith.ones_like(loss_var));

    for (auto it = active.rbegin(); it != active.rend(); ++it) {
        auto* opr = *it;
        VarNodeArray out_grads;
        bool any = false;
        for (auto* out : opr->outputs()) {
            out_grads.push_back(summed(out));
            any |= out_grads.back() != nullptr;
        }
        if (!any) continue;
        GradRule rule;
        std::string reason;
        if (auto* desc = reg.find(opr->type_name())) {
            rule = desc->grad;
            reason = desc->non_differentiable_reason;
        }
        bool any_input = false;
        for (size_t i = 0; i < opr->inputs().size(); ++i) {
            VarNode* in = opr->input(i);
            if (!on_path.count(in)) continue;
            any_input = true;
            if (!rule)
                BRAID_THROW(GraphError, "grad(): {} is not differentiable{}{} (input {} \"{}\")",
                            opr->describe(), reason.empty() ? "" : ": ", reason, i, in->name());
            VarNode* g = rule(*opr, i, out_grads);
            if (!g) continue;
            BRAID_ASSERT(g->dtype() == in->dtype() &&
                             (!in->shape_known() || !g->shape_known() || g->shape() == in->shape()),
                         "gradient rule of {} for input {} gave {} {}, expected {} {}",
                         opr->describe(), i, g->dtype().name(),
                         g->shape_known() ? g->shape().to_string() : "dynamic", in->dtype().name(),
                         in->shape_known() ? in->shape().to_string() : "dynamic");
            contributions[in].push_back(g);
        }
        if (!any_input && rule && always_run(opr))
            if (VarNode* effect = rule(*opr, GRAD_SIDE_EFFECT_ONLY, out_grads))
                side_effects.push_back(effect);
    }

    SymbolVarArray result;
    for (auto& w : wrt) {
        VarNode* g = summed(w.node());
        if (!g) {
            if (!options.zero_for_unreachable)
                BRAID_THROW(GraphError,
                            "grad(): the loss \"{}\" does not depend on \"{}\" (pass "
                            "GradOptions{{.zero_for_unreachable = true}} for a zero gradient)",
                            loss_var->name(), w.name());
            g = arith.zeros_like(w.node());
        }
        result.emplace_back(g);
    }
    for (auto& r : result)
        for (auto* effect : side_effects) graph->add_extra_dep(r.node(), effect);
    return result;
}

} // namespace braid
