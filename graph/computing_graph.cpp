#include "graph/computing_graph.h"

#include "base/error.h"
#include "base/hash.h"
#include "base/log.h"
#include "graph/executable.h"
#include "graph/input_node.h"
#include "graph/symbol_var.h"

#include <atomic>
#include <cstring>

namespace braid {

namespace {
std::atomic<CrossDeviceCopyFn> g_cross_device_copy{nullptr};
} // namespace

void set_cross_device_copy(CrossDeviceCopyFn fn) {
    g_cross_device_copy.store(fn);
}

void ComputingGraph::route_cross_device_inputs(OperatorNode& opr) {
    Device dev = opr.m_comp_node.device();
    for (size_t i = 0; i < opr.m_inputs.size(); ++i) {
        VarNode* in = opr.m_inputs[i];
        if (in->comp_node().device() == dev) continue;
        auto fn = g_cross_device_copy.load();
        if (!fn)
            BRAID_THROW(GraphError,
                        "{} on {} reads var \"{}\" on {}, another device; call "
                        "register_all_operators() (which inserts copies between devices) or "
                        "insert an opr::Copy",
                        opr.type_name(), opr.m_comp_node.locator(), in->name(),
                        in->comp_node().locator());
        opr.m_inputs[i] = fn(opr, i, opr.m_comp_node);
    }
}

OutputSpec::OutputSpec(const SymbolVar& v) : var(v.node()) {}
OutputSpec::OutputSpec(const SymbolVar& v, std::function<void(const Tensor&)> cb)
    : var(v.node()), callback(std::move(cb)) {}

std::shared_ptr<ComputingGraph> ComputingGraph::make(GraphOptions options) {
    return std::shared_ptr<ComputingGraph>(new ComputingGraph(std::move(options)));
}

ComputingGraph::~ComputingGraph() = default;

uint64_t ComputingGraph::dedup_hash(const OperatorNode& opr) const {
    Hasher h;
    h.add(std::string_view(opr.type_name()));
    h.add_pod(opr.comp_node().id());
    for (auto* in : opr.inputs()) h.add_pod(in->id());
    opr.hash_params(h);
    return h.digest();
}

OperatorNode* ComputingGraph::insert_opr(std::unique_ptr<OperatorNode> opr) {
    for (auto* in : opr->inputs())
        if (in->graph() != this)
            BRAID_THROW(GraphError, "{}: input var \"{}\" belongs to another graph",
                        opr->type_name(), in->name());
    opr->m_graph = this;
    if (opr->m_origin.empty()) opr->m_origin = m_origin;
    CompNode cn = opr->m_config.comp_node;
    if (!cn.valid())
        cn = opr->inputs().empty() ? CompNode::load(m_options.default_comp_node)
                                   : opr->inputs()[0]->comp_node();
    opr->m_comp_node = cn;
    route_cross_device_inputs(*opr);

    uint64_t hash = 0;
    if (opr->allow_dedup()) {
        hash = dedup_hash(*opr);
        auto range = m_dedup.equal_range(hash);
        for (auto it = range.first; it != range.second; ++it) {
            auto* old = it->second;
            if (std::strcmp(old->type_name(), opr->type_name()) == 0 && old->comp_node() == cn &&
                old->inputs() == opr->inputs() && old->outputs().size() == opr->outputs().size() &&
                old->params_equal(*opr) &&
                (opr->m_config.name.empty() || opr->m_config.name == old->name()))
                return old;
        }
    }

    opr->m_id = m_oprs.size();
    opr->m_name = opr->m_config.name.empty() ? fmt::format("{}{}", opr->type_name(), opr->m_id)
                                             : opr->m_config.name;
    for (size_t i = 0; i < opr->m_outputs.size(); ++i) {
        auto* var = opr->m_outputs[i];
        var->m_id = m_next_var_id++;
        const auto& suffix = opr->m_output_suffixes[i];
        if (!suffix.empty())
            var->set_name(opr->m_name + ":" + suffix);
        else if (opr->m_outputs.size() == 1)
            var->set_name(opr->m_name);
        else
            var->set_name(fmt::format("{}:{}", opr->m_name, i));
        var->set_comp_node(cn);
    }
    opr->init_output_dtypes();
    infer_opr(opr.get());
    for (auto* in : opr->inputs()) in->add_reader(opr.get());
    if (opr->allow_dedup()) m_dedup.emplace(hash, opr.get());
    m_oprs.push_back(std::move(opr));
    return m_oprs.back().get();
}

void ComputingGraph::infer_opr(OperatorNode* opr, bool may_block) {
    const auto& inputs = opr->inputs();
    size_t nin = inputs.size();
    std::vector<const TensorShape*> shapes(nin);
    std::vector<const Tensor*> values(nin);
    bool all_values = true;
    for (size_t i = 0; i < nin; ++i) {
        shapes[i] = inputs[i]->shape_known() ? &inputs[i]->shape() : nullptr;
        values[i] = inputs[i]->static_value();
        all_values &= values[i] != nullptr;
    }
    InferCtx ctx(shapes.data(), values.data(), nin, may_block);
    const auto& outputs = opr->outputs();
    std::vector<TensorShape> out_shapes(outputs.size());
    for (auto* out : outputs) out->clear_shape();
    if (!opr->infer_output_shapes(ctx, out_shapes.data())) return; // dynamic
    // A shape out of bounds would make later size computations overflow (a loaded model can
    // ask for one through a shape var or a param); refuse it here.
    for (size_t k = 0; k < outputs.size(); ++k)
        if (!out_shapes[k].packed_bytes(outputs[k]->dtype()))
            BRAID_THROW(ShapeError, "{}: output shape {} of {} is too large: more than 2^56 bytes",
                        opr->describe(), out_shapes[k].to_string(),
                        outputs[k]->dtype().valid() ? outputs[k]->dtype().name() : "elements");
    for (size_t k = 0; k < outputs.size(); ++k) outputs[k]->set_shape(out_shapes[k]);

    auto vi = opr->value_inference();
    if (vi == ValueInference::NONE) return;
    for (auto& s : out_shapes)
        if (s.total_nr_elems() > m_options.max_static_value_elems) return;
    std::vector<Tensor> out_values(outputs.size());
    if (vi == ValueInference::FROM_SHAPES) {
        opr->infer_value(ctx, out_values.data());
    } else {
        if (!all_values) return;
        // Constant folding: run the CPU kernel on the static values.
        std::vector<Tensor*> out_ptrs;
        for (size_t k = 0; k < outputs.size(); ++k) {
            if (opr->output_mem(k) == OutputMem::PLANNED)
                out_values[k] = Tensor(out_shapes[k], outputs[k]->dtype());
            out_ptrs.push_back(&out_values[k]);
        }
        std::vector<Tensor> contiguous(nin);
        for (size_t i = 0; i < nin; ++i) {
            if (!opr->accepts_strided_inputs() && !values[i]->layout().is_contiguous()) {
                contiguous[i] = values[i]->contiguous();
                values[i] = &contiguous[i];
            }
        }
        ExecCtx ectx(values.data(), nin, out_ptrs.data(), out_ptrs.size());
        opr->execute(ectx);
    }
    for (size_t k = 0; k < outputs.size(); ++k)
        if (!out_values[k].empty()) outputs[k]->set_static_value(std::move(out_values[k]));
}

void ComputingGraph::add_extra_dep(VarNode* var, VarNode* dep) {
    BRAID_ASSERT(var->graph() == this && dep->graph() == this,
                 "extra dependency between vars of different graphs");
    m_extra_deps[var].push_back(dep);
}

const VarNodeArray& ComputingGraph::extra_deps(VarNode* var) const {
    static const VarNodeArray none;
    auto it = m_extra_deps.find(var);
    return it == m_extra_deps.end() ? none : it->second;
}

void ComputingGraph::reinfer_all() {
    for (auto& opr : m_oprs) infer_opr(opr.get());
}

std::unique_ptr<Executable> ComputingGraph::compile(const std::vector<OutputSpec>& outputs) {
    return std::make_unique<Executable>(shared_from_this(), outputs);
}

void FedShapeRollback::restore(ComputingGraph& graph) noexcept {
    for (auto& [in, shape] : m_saved) {
        if (shape)
            in->set_fed_shape(*shape);
        else
            in->clear_fed_shape();
    }
    try {
        graph.reinfer_all();
    } catch (const std::exception& e) {
        logger()->warn("re-inferring the graph for its previous input shapes failed: {}", e.what());
    }
}

} // namespace braid
