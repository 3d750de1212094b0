// SymbolVar: the value-like handle users build graphs with.
//
//     auto g = ComputingGraph::make();
//     SymbolVar x = opr::Input::make(*g, "x", dtype::Float32(), {64, 784});
//     SymbolVar y = opr::relu(opr::matmul(x, w) + b);
//
// Arithmetic operators (+, -, *, /, unary -) and the members below insert operators into the
// var's graph; they are declared here and defined with their operators in operators/.
#pragma once

#include "graph/var_node.h"

#include <vector>

namespace braid {

//! A handle to a VarNode, cheap to copy. Thread-safety follows the graph's.
class SymbolVar {
public:
    SymbolVar() = default;
    SymbolVar(VarNode* node) : m_node(node) {}

    VarNode* node() const { return m_node; }
    bool valid() const { return m_node != nullptr; }
    ComputingGraph& graph() const;
    const std::string& name() const { return m_node->name(); }
    //! Renames the var (for messages, inputs and outputs); returns *this.
    SymbolVar rename(const std::string& name) const {
        m_node->set_name(name);
        return *this;
    }
    DType dtype() const { return m_node->dtype(); }
    //! The static shape; throws GraphError when the shape is dynamic.
    const TensorShape& shape() const { return m_node->shape(); }
    CompNode comp_node() const { return m_node->comp_node(); }

    //! Reshape to `shape`; one dim may be -1 (inferred). A view when the input is contiguous.
    SymbolVar reshape(const std::vector<long>& shape) const;
    //! Reshape to the value of a shape-carrying int32 var (e.g. another var's shape()).
    SymbolVar reshape(SymbolVar shape) const;
    //! Broadcast (numpy rules) to `shape`.
    SymbolVar broadcast(const TensorShape& shape) const;
    //! Broadcast to the value of a shape-carrying int32 var.
    SymbolVar broadcast(SymbolVar shape) const;
    //! This var's shape as a 1-D int32 var (value known statically when the shape is).
    SymbolVar symshape() const;
    //! Element type conversion.
    SymbolVar astype(DType dtype) const;

    bool operator==(const SymbolVar& rhs) const { return m_node == rhs.m_node; }

private:
    VarNode* m_node = nullptr;
};

using SymbolVarArray = std::vector<SymbolVar>;

} // namespace braid
