// VarNode: one value in the computing graph (an operator's output).
#pragma once

#include "graph/comp_node.h"
#include "memory/tensor.h"

#include <optional>
#include <string>
#include <vector>

namespace braid {

class OperatorNode;
class ComputingGraph;

//! An operator output. Owned by its operator; not thread-safe (graphs are built from
//! one thread).
class VarNode {
public:
    explicit VarNode(OperatorNode* owner) : m_owner(owner) {}

    const std::string& name() const { return m_name; }
    void set_name(std::string name) { m_name = std::move(name); }
    //! Unique within the graph, increasing in insertion order.
    size_t id() const { return m_id; }
    OperatorNode* owner() const { return m_owner; }
    ComputingGraph* graph() const;
    CompNode comp_node() const { return m_comp_node; }
    DType dtype() const { return m_dtype; }

    //! True when the shape is known before execution.
    bool shape_known() const { return m_shape_known; }
    //! The statically inferred shape; throws GraphError when it is dynamic.
    const TensorShape& shape() const;
    //! Bytes of the var at its static shape; 0 when the shape is dynamic.
    size_t static_bytes() const {
        return m_shape_known ? m_shape.total_nr_elems() * m_dtype.size() : 0;
    }
    //! The value inferred at build time (constants, shapes, small arithmetic on them), or
    //! nullptr when the value is only known at execution.
    const Tensor* static_value() const { return m_static_value ? &*m_static_value : nullptr; }

    //! Operators that read this var, in insertion order.
    const std::vector<OperatorNode*>& readers() const { return m_readers; }

    // Set by the graph and operator machinery.
    void set_comp_node(CompNode cn) { m_comp_node = cn; }
    void set_dtype(DType dt) { m_dtype = dt; }
    void set_shape(const TensorShape& shape) {
        m_shape = shape;
        m_shape_known = true;
    }
    void clear_shape() {
        m_shape_known = false;
        m_static_value.reset();
    }
    void set_static_value(Tensor value) { m_static_value = std::move(value); }
    void add_reader(OperatorNode* opr) { m_readers.push_back(opr); }

private:
    friend class ComputingGraph;
    OperatorNode* m_owner;
    std::string m_name;
    size_t m_id = 0;
    CompNode m_comp_node;
    DType m_dtype;
    TensorShape m_shape;
    bool m_shape_known = false;
    std::optional<Tensor> m_static_value;
    std::vector<OperatorNode*> m_readers;
};

using VarNodeArray = std::vector<VarNode*>;

} // namespace braid
