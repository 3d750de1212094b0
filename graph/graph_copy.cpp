#include "graph/graph_copy.h"

#include "base/error.h"
#include "graph/input_node.h"
#include "graph/operator_registry.h"

#include <fmt/format.h>

#include <unordered_map>
#include <variant>

namespace braid {

namespace {

//! One operator's params, held in memory between its dumper and its loader.
using CopiedParam = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                                 std::vector<double>, std::shared_ptr<Tensor>, StoredGraph>;

class MemoryParamWriter final : public ParamWriter {
public:
    explicit MemoryParamWriter(std::map<std::string, CopiedParam, std::less<>>& fields)
        : m_fields(fields) {}
    void write_int(std::string_view name, int64_t v) override { put(name, v); }
    void write_float(std::string_view name, double v) override { put(name, v); }
    void write_bool(std::string_view name, bool v) override { put(name, v); }
    void write_string(std::string_view name, std::string_view v) override {
        put(name, std::string(v));
    }
    void write_ints(std::string_view name, const std::vector<int64_t>& v) override { put(name, v); }
    void write_floats(std::string_view name, const std::vector<double>& v) override {
        put(name, v);
    }
    void write_tensor(std::string_view name, const Tensor& v) override {
        put(name, std::make_shared<Tensor>(v)); // shares the storage
    }
    void write_graph(std::string_view name, const SymbolVarArray& outputs) override {
        // The subgraph is copied now, into a graph of its own.
        StoredGraph g;
        g.graph = ComputingGraph::make(outputs.at(0).node()->graph()->options());
        g.outputs = copy_graph(outputs, *g.graph);
        for (auto& opr : g.graph->operators())
            if (auto* in = dynamic_cast<InputNode*>(opr.get()))
                g.inputs[in->input_name()] = SymbolVar(in->output(0));
        put(name, std::move(g));
    }

private:
    void put(std::string_view name, CopiedParam f) { m_fields[std::string(name)] = std::move(f); }
    std::map<std::string, CopiedParam, std::less<>>& m_fields;
};

class MemoryParamReader final : public ParamReader {
public:
    MemoryParamReader(const std::map<std::string, CopiedParam, std::less<>>& fields,
                      uint32_t version, std::string context)
        : m_fields(fields), m_version(version), m_context(std::move(context)) {}
    bool has(std::string_view name) const override { return m_fields.count(name) != 0; }
    int64_t read_int(std::string_view name) const override { return get<int64_t>(name); }
    double read_float(std::string_view name) const override { return get<double>(name); }
    bool read_bool(std::string_view name) const override { return get<bool>(name); }
    std::string read_string(std::string_view name) const override { return get<std::string>(name); }
    std::vector<int64_t> read_ints(std::string_view name) const override {
        return get<std::vector<int64_t>>(name);
    }
    std::vector<double> read_floats(std::string_view name) const override {
        return get<std::vector<double>>(name);
    }
    Tensor read_tensor(std::string_view name) const override {
        return *get<std::shared_ptr<Tensor>>(name);
    }
    std::shared_ptr<Tensor> read_shared_tensor(std::string_view name) const override {
        return get<std::shared_ptr<Tensor>>(name);
    }
    StoredGraph read_graph(std::string_view name) const override { return get<StoredGraph>(name); }
    uint32_t version() const override { return m_version; }
    const std::string& context() const override { return m_context; }

private:
    template <typename T> const T& get(std::string_view name) const {
        auto it = m_fields.find(name);
        if (it == m_fields.end() || !std::holds_alternative<T>(it->second))
            BRAID_THROW(GraphError, "{}: param \"{}\" was not written as it is read", m_context,
                        name);
        return std::get<T>(it->second);
    }
    const std::map<std::string, CopiedParam, std::less<>>& m_fields;
    uint32_t m_version;
    std::string m_context;
};

//! The copy of each var copied so far.
using CopiedVars = std::unordered_map<VarNode*, SymbolVar>;

SymbolVarArray rebuild_operator(OperatorNode& opr, ComputingGraph& target,
                                const SymbolVarArray& inputs, bool keep_comp_node) {
    const OperatorDescriptor* desc = OperatorRegistry::instance().find(opr.type_name());
    if (!desc || !desc->dump_params || !desc->load)
        BRAID_THROW(GraphError,
                    "{}: cannot be copied into another graph (its type has no params "
                    "dump and load functions)",
                    opr.describe());
    std::map<std::string, CopiedParam, std::less<>> fields;
    MemoryParamWriter writer(fields);
    desc->dump_params(opr, writer);
    MemoryParamReader reader(fields, desc->version, opr.describe());
    OperatorConfig config(opr.name(), keep_comp_node ? opr.comp_node() : CompNode());
    // An operator that communicates stays bound to its group manager's client.
    CollectiveBinding collective;
    collective.group_client = opr.group_client();
    static const std::map<std::string, std::string> bindings;
    static const std::map<std::string, TensorShape> input_shapes;
    OprLoadContext ctx{target, inputs, reader, config, collective, bindings, input_shapes};
    SymbolVarArray outs = desc->load(ctx);
    if (outs.size() != opr.outputs().size())
        BRAID_THROW(GraphError, "{}: its copy has {} outputs instead of {}", opr.describe(),
                    outs.size(), opr.outputs().size());
    return outs;
}

void copy_operator(OperatorNode& opr, ComputingGraph& target, CopiedVars& copied,
                   bool keep_comp_node) {
    SymbolVarArray inputs;
    for (VarNode* v : opr.inputs()) inputs.push_back(copied.at(v));
    SymbolVarArray outs = rebuild_operator(opr, target, inputs, keep_comp_node);
    for (size_t k = 0; k < outs.size(); ++k) copied[opr.outputs()[k]] = outs[k];
}

} // namespace

SymbolVarArray copy_operator(OperatorNode& opr, ComputingGraph& target,
                             const SymbolVarArray& inputs) {
    if (inputs.size() != opr.inputs().size())
        BRAID_THROW(GraphError, "{}: copied with {} inputs; it has {}", opr.describe(),
                    inputs.size(), opr.inputs().size());
    return rebuild_operator(opr, target, inputs, false);
}

SymbolVarArray copy_graph(const SymbolVarArray& outputs, ComputingGraph& target,
                          const std::map<VarNode*, SymbolVar>& replace, bool keep_comp_nodes) {
    CopiedVars copied(replace.begin(), replace.end());
    if (outputs.empty()) return {};
    // The operators the outputs need, through their inputs and extra dependencies (a gradient's
    // side effect, an order imposed after the fact), copied in the source's insertion order:
    // that order is topological, and a comp node runs its operators in it (graph/schedule.h).
    std::unordered_map<OperatorNode*, bool> needed;
    std::vector<OperatorNode*> stack;
    auto visit = [&](VarNode* v) {
        if (!copied.count(v)) stack.push_back(v->owner());
    };
    ComputingGraph& source = *outputs[0].node()->owner()->graph();
    for (auto& out : outputs) visit(out.node());
    while (!stack.empty()) {
        OperatorNode* opr = stack.back();
        stack.pop_back();
        if (needed[opr]) continue;
        needed[opr] = true;
        for (VarNode* in : opr->inputs()) visit(in);
        for (VarNode* out : opr->outputs())
            for (VarNode* dep : source.extra_deps(out)) visit(dep);
    }
    std::vector<OperatorNode*> order;
    for (auto& opr : source.operators())
        if (needed.count(opr.get())) {
            order.push_back(opr.get());
            copy_operator(*opr, target, copied, keep_comp_nodes);
        }
    for (OperatorNode* opr : order)
        for (VarNode* out : opr->outputs())
            for (VarNode* dep : source.extra_deps(out))
                if (copied.count(dep))
                    target.add_extra_dep(copied.at(out).node(), copied.at(dep).node());
    SymbolVarArray res;
    for (auto& out : outputs) res.push_back(copied.at(out.node()));
    return res;
}

} // namespace braid
