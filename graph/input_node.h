// InputNode: the interface of operators the user feeds through Executable::feed().
#pragma once

#include "graph/operator_node.h"

#include <optional>

namespace braid {

/*!
 * An operator whose output value the user supplies before each execution. The fed tensor
 * belongs to the executable that was fed, never to the graph, so several executables of one
 * graph run independently: an InputNode has no graph inputs, and its kernel finds the tensor
 * fed to the running executable as `ctx.input(0)`.
 */
class InputNode : public OperatorNode {
public:
    //! Name the user feeds it by (the operator's name).
    const std::string& input_name() const { return name(); }
    //! The dtype a fed tensor must have.
    DType input_dtype() const { return m_input_dtype; }

    //! The shape static inference gives this input: the one set by the last executable that
    //! re-inferred the graph for its fed shapes (under ComputingGraph::inference_mutex()), or
    //! nullptr before any, when the declared shape applies.
    const TensorShape* fed_shape() const { return m_has_fed_shape ? &m_fed_shape : nullptr; }
    void set_fed_shape(const TensorShape& shape) {
        m_fed_shape = shape;
        m_has_fed_shape = true;
    }
    //! Back to the declared shape (no fed shape).
    void clear_fed_shape() { m_has_fed_shape = false; }

protected:
    InputNode(DType input_dtype, const OperatorConfig& config)
        : OperatorNode(config), m_input_dtype(input_dtype) {}

private:
    DType m_input_dtype;
    TensorShape m_fed_shape;
    bool m_has_fed_shape = false;
};

//! Remembers the fed shapes of some inputs when made; restore() puts them back and re-infers the
//! graph. Used under ComputingGraph::inference_mutex() around a re-inference that may fail, so
//! that shapes the graph rejected (or could not plan within the memory budget) do not stay in it
//! for the next executable compiled from the graph.
class FedShapeRollback {
public:
    explicit FedShapeRollback(const std::vector<InputNode*>& inputs) {
        for (auto* in : inputs)
            m_saved.emplace_back(in,
                                 in->fed_shape() ? std::optional(*in->fed_shape()) : std::nullopt);
    }
    //! Puts the remembered shapes back and re-infers; never throws (the shapes were inferred
    //! before, and a failure now is logged).
    void restore(ComputingGraph& graph) noexcept;

private:
    std::vector<std::pair<InputNode*, std::optional<TensorShape>>> m_saved;
};

} // namespace braid
