#include "graph/graph_pass.h"

#include "base/error.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace braid {

namespace {

struct RegisteredPass {
    std::string name;
    CompilePass pass;
};

std::vector<RegisteredPass>& passes() {
    static std::vector<RegisteredPass> list;
    return list;
}

} // namespace

CompilePassCtx::CompilePassCtx(ComputingGraph& graph, std::vector<OperatorNode*>& order,
                               const std::unordered_set<VarNode*>& pinned,
                               std::unordered_map<VarNode*, VarNode*>& replaced)
    : m_graph(graph), m_order(order), m_pinned(pinned), m_replaced(replaced) {
    index_readers();
}

VarNode* CompilePassCtx::current(VarNode* var) const {
    for (auto it = m_replaced.find(var); it != m_replaced.end(); it = m_replaced.find(var))
        var = it->second;
    return var;
}

void CompilePassCtx::index_readers() {
    m_readers.clear();
    for (auto* opr : m_order) {
        for (auto* in : opr->inputs()) {
            in = current(in); // a reader of a replaced var reads its replacement
            auto& r = m_readers[in];
            if (r.empty() || r.back() != opr) r.push_back(opr);
        }
    }
}

size_t CompilePassCtx::nr_readers(VarNode* var) const {
    auto it = m_readers.find(var);
    return it == m_readers.end() ? 0 : it->second.size();
}

bool CompilePassCtx::removable(VarNode* var, size_t readers) const {
    if (nr_readers(var) != readers) return false;
    // `var` itself, and the vars an earlier pass substituted it for: none may be an output or
    // an extra dependency.
    auto kept = [&](VarNode* v) { return m_pinned.count(v) || !m_graph.extra_deps(v).empty(); };
    if (kept(var)) return false;
    for (auto& [from, to] : m_replaced)
        if (current(from) == var && kept(from)) return false;
    return true;
}

OperatorNode* CompilePassCtx::single_reader(VarNode* var) const {
    auto it = m_readers.find(var);
    return it != m_readers.end() && it->second.size() == 1 ? it->second.front() : nullptr;
}

void CompilePassCtx::replace(const std::vector<OperatorNode*>& old_oprs, OperatorNode* new_opr) {
    replace(old_oprs, std::vector<OperatorNode*>{new_opr});
}

void CompilePassCtx::replace(const std::vector<OperatorNode*>& old_oprs,
                             const std::vector<OperatorNode*>& new_oprs) {
    BRAID_ASSERT(!old_oprs.empty() && !new_oprs.empty(), "replace() needs operators");
    // What replaces operators of an imported model keeps naming where they came from.
    std::vector<std::string> origins;
    for (auto* o : old_oprs)
        if (!o->origin().empty() &&
            std::find(origins.begin(), origins.end(), o->origin()) == origins.end())
            origins.push_back(o->origin());
    for (auto* o : new_oprs)
        if (o->origin().empty() && !origins.empty())
            o->set_origin(fmt::format("{}", fmt::join(origins, " and ")));
    for (size_t i = 0; i + 1 < old_oprs.size(); ++i) {
        auto it = std::find(m_order.begin(), m_order.end(), old_oprs[i]);
        BRAID_ASSERT(it != m_order.end(), "{} is not in the order", old_oprs[i]->describe());
        m_order.erase(it);
    }
    auto last = std::find(m_order.begin(), m_order.end(), old_oprs.back());
    BRAID_ASSERT(last != m_order.end(), "{} is not in the order", old_oprs.back()->describe());
    *last = new_oprs.front();
    m_order.insert(last + 1, new_oprs.begin() + 1, new_oprs.end());
    // An earlier substitution whose var an old operator computed: for the last one's output
    // it now leads on to the new operator's; any other such var is gone (nothing reads it).
    VarNode* result = old_oprs.back()->output(0);
    for (auto it = m_replaced.begin(); it != m_replaced.end();) {
        OperatorNode* owner = it->second->owner();
        bool gone = it->second != result &&
                    std::find(old_oprs.begin(), old_oprs.end(), owner) != old_oprs.end();
        it = gone ? m_replaced.erase(it) : std::next(it);
    }
    m_replaced[result] = new_oprs.back()->output(0);
    index_readers();
}

void register_compile_pass(const char* name, CompilePass pass) {
    for (auto& p : passes())
        if (p.name == name) return;
    passes().push_back({name, pass});
}

bool fusion_enabled(const GraphOptions& options) {
    if (!options.enable_fusion) return false;
    const char* env = std::getenv("BRAID_FUSION");
    return !(env && std::strcmp(env, "0") == 0);
}

std::unordered_map<VarNode*, VarNode*>
run_compile_passes(ComputingGraph& graph, std::vector<OperatorNode*>& order,
                   const std::unordered_set<VarNode*>& pinned) {
    std::unordered_map<VarNode*, VarNode*> replaced;
    if (passes().empty()) return replaced;
    CompilePassCtx ctx(graph, order, pinned, replaced);
    for (auto& p : passes()) p.pass(ctx);
    // Resolve chains (a var replaced by a var that a later pass replaced again).
    for (auto& [from, to] : replaced) {
        auto it = replaced.find(to);
        while (it != replaced.end()) {
            to = it->second;
            it = replaced.find(to);
        }
    }
    return replaced;
}

} // namespace braid
