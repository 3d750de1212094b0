// Compile-time folding of constant subgraphs (the compile pass "fold_constants", registered
// first; graph/graph_pass.h): an operator on a CPU comp node whose inputs are all constants
// (ImmutableTensor values, or results folded before it) runs once when the executable is
// compiled, and an ImmutableTensor holding its result takes its place in the executable.
// Build-time value inference (ComputingGraph) folds results of up to
// GraphOptions::max_static_value_elems elements only, and for the graph's own shape and value
// queries; executables still ran those operators on every run. Exported models compute from
// their constants at run time: a voice-activity model rebuilds its LSTM's weight blocks with
// Slice and Concat on every run (8 us of a 75 us run).
//
// Only results the executable's remaining operators read (or that it outputs) become
// constants; the folded operators between them leave the executable. A constant takes the
// name of the operator it replaces with a suffix, so a second compile of the graph finds the
// same constant (ComputingGraph's deduplication) instead of adding another.
#include "base/determinism.h"
#include "graph/graph_pass.h"
#include "graph/input_node.h"
#include "operators/io.h"

#include <fmt/format.h>

#include <unordered_map>
#include <vector>

namespace braid::opr {
namespace {

//! A result is folded when it is at most this size, or no larger than the constants it is
//! computed from: a constant is held for the graph's life, where the run's arena reuses the
//! memory. (Dequantizing a segmentation model's int8 weights to float32 at compile time made
//! it 6% faster and held 150 MB more.)
constexpr size_t FOLD_SMALL_BYTES = size_t(64) << 10;

//! The result of `opr` on constant `inputs`, or an empty tensor where it is not folded.
Tensor fold(OperatorNode& opr, const std::vector<const Tensor*>& inputs) {
    VarNode* out = opr.output(0);
    if (!out->shape_known() || !out->dtype().valid()) return {};
    auto bytes = out->shape().packed_bytes(out->dtype());
    size_t input_bytes = 0;
    for (auto* t : inputs) input_bytes += t->nr_bytes();
    if (!bytes || out->shape().is_empty() || (*bytes > FOLD_SMALL_BYTES && *bytes > input_bytes))
        return {};
    std::vector<Tensor> contiguous;
    contiguous.reserve(inputs.size());
    std::vector<const Tensor*> in = inputs;
    for (auto& t : in)
        if (!opr.accepts_strided_inputs() && !t->layout().is_contiguous()) {
            contiguous.push_back(t->contiguous());
            t = &contiguous.back();
        }
    // Planned: the kernel writes here; a view of an input (Subtensor, Reshape): execute()
    // assigns it, sharing the constant's storage.
    Tensor result =
        opr.output_mem(0) == OutputMem::PLANNED ? Tensor(out->shape(), out->dtype()) : Tensor();
    Tensor* outs[1] = {&result};
    ExecCtx ctx(in.data(), in.size(), outs, 1);
    try {
        opr.execute(ctx);
    } catch (const std::exception&) {
        return {}; // it fails at run time too, with the executable's context in the message
    }
    if (result.empty() || result.shape() != out->shape() || result.dtype() != out->dtype())
        return {};
    return result.contiguous(); // an ImmutableTensor holds it contiguous anyway
}

void fold_constants(CompilePassCtx& ctx) {
    // The kernels run in the graph's mode, as its executables run them: in deterministic mode
    // a folded value's bits must not depend on the compiling thread's kernel threads.
    DeterministicScope mode(ctx.graph().options().deterministic || deterministic_kernels());
    std::unordered_map<VarNode*, Tensor> value; // constant vars -> their values
    std::vector<OperatorNode*> folded;
    for (auto* opr : ctx.order()) {
        if (opr->comp_node().device().kind != Device::Kind::CPU) continue;
        if (auto* c = dynamic_cast<ImmutableTensor*>(opr)) {
            value.emplace(c->output(0), c->value());
            continue;
        }
        if (opr->value_inference() != ValueInference::FROM_VALUES || opr->inputs().empty() ||
            opr->outputs().size() != 1 || opr->output_mem(0) == OutputMem::BOUND ||
            dynamic_cast<InputNode*>(opr) || !ctx.graph().extra_deps(opr->output(0)).empty())
            continue;
        std::vector<const Tensor*> inputs;
        for (auto* in : opr->inputs()) {
            auto it = value.find(ctx.current(in));
            if (it == value.end()) break;
            inputs.push_back(&it->second);
        }
        if (inputs.size() != opr->inputs().size()) continue;
        Tensor result = fold(*opr, inputs);
        if (result.empty()) continue;
        value.emplace(opr->output(0), std::move(result));
        folded.push_back(opr);
    }
    // The results something outside the folded operators reads (or the executable outputs)
    // become constants; the other folded operators go with the last of them.
    std::vector<OperatorNode*> kept, internal;
    for (auto* opr : folded) {
        VarNode* out = opr->output(0);
        size_t readers = ctx.nr_readers(out), folded_readers = 0;
        for (auto* other : folded) {
            bool reads = false;
            for (auto* in : other->inputs()) reads |= ctx.current(in) == out;
            folded_readers += reads;
        }
        bool outside = readers > folded_readers || !ctx.removable(out, readers);
        (outside ? kept : internal).push_back(opr);
    }
    for (size_t i = 0; i < kept.size(); ++i) {
        OperatorNode* opr = kept[i];
        SymbolVar constant = ImmutableTensor::make(
            ctx.graph(), value.at(opr->output(0)),
            OperatorConfig(fmt::format("{}:folded", opr->name()), opr->comp_node()));
        std::vector<OperatorNode*> old;
        if (i + 1 == kept.size()) old = internal;
        old.push_back(opr);
        ctx.replace(old, constant.node()->owner());
    }
}

} // namespace

void register_constant_fold_pass() {
    register_compile_pass("fold_constants", fold_constants);
}

} // namespace braid::opr
