#include "graph/operator_node.h"

#include "base/error.h"
#include "graph/computing_graph.h"

namespace braid {

ComputingGraph* VarNode::graph() const {
    return m_owner->graph();
}

const TensorShape& VarNode::shape() const {
    if (!m_shape_known)
        BRAID_THROW(GraphError,
                    "var \"{}\" has a dynamic shape (known only at execution); its static shape "
                    "was requested",
                    m_name);
    return m_shape;
}

std::string OperatorNode::describe() const {
    auto params = param_string();
    std::string text = params.empty() ? fmt::format("{} \"{}\"", type_name(), m_name)
                                      : fmt::format("{}({}) \"{}\"", type_name(), params, m_name);
    if (!m_origin.empty()) text += fmt::format(" (from {})", m_origin);
    return text;
}

void OperatorNode::init_output_dtypes() {
    BRAID_ASSERT(!m_inputs.empty(), "{} has no input; it must set its output dtypes", type_name());
    for (auto* out : m_outputs) out->set_dtype(m_inputs[0]->dtype());
}

void OperatorNode::add_input(VarNode* var) {
    if (!var) BRAID_THROW(GraphError, "{}: input {} is a null var", type_name(), m_inputs.size());
    m_inputs.push_back(var);
}

VarNode* OperatorNode::add_output(const std::string& suffix) {
    m_output_storage.push_back(std::make_unique<VarNode>(this));
    m_output_suffixes.push_back(suffix);
    m_outputs.push_back(m_output_storage.back().get());
    return m_outputs.back();
}

bool bound_to_static_values(const OperatorNode& opr) {
    if (opr.value_inference() != ValueInference::FROM_SHAPES) return false;
    for (auto* out : opr.outputs())
        if (!out->static_value()) return false;
    return true;
}

} // namespace braid
