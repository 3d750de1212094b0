#include "graph/symbol_var.h"

#include "graph/operator_node.h"

namespace braid {

ComputingGraph& SymbolVar::graph() const {
    return *m_node->graph();
}

} // namespace braid
