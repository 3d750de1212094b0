// InputNode: the interface of operators the user feeds through Executable::feed().
#pragma once

#include "graph/operator_node.h"

namespace braid {

//! An operator whose output value the user supplies before each execution.
class InputNode : public OperatorNode {
public:
    //! Name the user feeds it by (the operator's name).
    const std::string& input_name() const { return name(); }
    //! Stores `value` as the next executions' input; throws DTypeError on a dtype mismatch.
    virtual void feed(Tensor value) = 0;
    //! The fed tensor (empty before the first feed()).
    virtual const Tensor& fed() const = 0;

protected:
    using OperatorNode::OperatorNode;
};

} // namespace braid
