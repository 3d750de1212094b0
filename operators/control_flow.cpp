#include "operators/control_flow.h"

#include "graph/executable.h"
#include "graph/input_node.h"
#include "graph/operator_registry.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>
#include <vector>

namespace braid::opr {

struct If::Pool {
    std::mutex mutex;
    std::vector<std::unique_ptr<Executable>> idle[2];
};

Branch make_branch(ComputingGraph& like, const SymbolVarArray& captured, const BranchBuilder& build,
                   const std::vector<std::string>& names) {
    BRAID_ASSERT(names.empty() || names.size() == captured.size(),
                 "make_branch: {} names for {} captured vars", names.size(), captured.size());
    GraphOptions options = like.options();
    options.default_comp_node = "cpu:default";
    Branch b;
    b.graph = ComputingGraph::make(options);
    SymbolVarArray inputs;
    std::set<std::string> taken;
    for (size_t i = 0; i < captured.size(); ++i) {
        const SymbolVar& v = captured[i];
        TensorShape shape = v.node()->shape_known() ? v.shape() : TensorShape{0};
        const std::string& base = names.empty() ? v.name() : names[i];
        std::string name = base;
        for (size_t k = 1; !taken.insert(name).second; ++k) name = fmt::format("{}#{}", base, k);
        inputs.push_back(Input::make(*b.graph, name, v.dtype(), shape));
        b.inputs.push_back(inputs.back().node());
    }
    for (auto& out : build(*b.graph, inputs)) {
        if (&out.graph() != b.graph.get())
            BRAID_THROW(GraphError,
                        "a branch's output \"{}\" belongs to another graph: a branch reads outer "
                        "values only through the Input vars it is given",
                        out.name());
        b.outputs.push_back(out.node());
    }
    return b;
}

Branch failed_branch(std::exception_ptr error, size_t nr_captured) {
    Branch b;
    b.inputs.assign(nr_captured, nullptr);
    b.error = std::move(error);
    return b;
}

If::If(VarNode* cond, const VarNodeArray& captured, Branch then_branch, Branch else_branch,
       const OperatorConfig& config)
    : OperatorNode(config), m_branches{std::move(then_branch), std::move(else_branch)},
      m_pool(std::make_unique<Pool>()) {
    add_input(cond);
    for (auto* v : captured) add_input(v);
    size_t nout = std::max(m_branches[0].outputs.size(), m_branches[1].outputs.size());
    for (size_t k = 0; k < nout; ++k) add_output(std::to_string(k));
}

If::~If() = default;

SymbolVarArray If::make(SymbolVar cond, const SymbolVarArray& captured, Branch then_branch,
                        Branch else_branch, const OperatorConfig& config) {
    const char* names[] = {"then", "else"};
    Branch* branches[] = {&then_branch, &else_branch};
    if (then_branch.error && else_branch.error) std::rethrow_exception(then_branch.error);
    for (size_t b = 0; b < 2; ++b) {
        auto& br = *branches[b];
        if (br.error) continue;
        if (!br.graph || br.inputs.size() != captured.size())
            BRAID_THROW(GraphError,
                        "If \"{}\": the {} branch stands for {} captured values; {} given",
                        config.name, names[b], br.inputs.size(), captured.size());
        for (auto* in : br.inputs)
            if (in && (in->graph() != br.graph.get() || !dynamic_cast<InputNode*>(in->owner())))
                BRAID_THROW(GraphError,
                            "If \"{}\": the {} branch's var \"{}\" is not an Input of its graph",
                            config.name, names[b], in->name());
        for (auto* out : br.outputs)
            if (out->graph() != br.graph.get())
                BRAID_THROW(GraphError,
                            "If \"{}\": the {} branch's output \"{}\" belongs to another graph",
                            config.name, names[b], out->name());
    }
    if (!then_branch.error && !else_branch.error &&
        then_branch.outputs.size() != else_branch.outputs.size())
        BRAID_THROW(GraphError, "If \"{}\": the then branch has {} outputs, the else branch {}",
                    config.name, then_branch.outputs.size(), else_branch.outputs.size());
    VarNodeArray in;
    for (auto& v : captured) in.push_back(v.node());
    auto* opr = cond.graph().insert_opr(std::make_unique<If>(
        cond.node(), in, std::move(then_branch), std::move(else_branch), config));
    return SymbolVarArray(opr->outputs().begin(), opr->outputs().end());
}

SymbolVarArray cond(SymbolVar cond, const SymbolVarArray& captured, const BranchBuilder& then_fn,
                    const BranchBuilder& else_fn, const OperatorConfig& config) {
    auto& g = cond.graph();
    return If::make(cond, captured, make_branch(g, captured, then_fn),
                    make_branch(g, captured, else_fn), config);
}

void If::init_output_dtypes() {
    DType c = input(0)->dtype();
    if (!(c == dtype::Bool() || c.is_integer() || c.is_float()))
        BRAID_THROW(DTypeError, "{}: condition \"{}\" has dtype {}; expected bool or a number",
                    describe(), input(0)->name(), c.name());
    for (size_t k = 0; k < outputs().size(); ++k) {
        if (m_branches[0].error || m_branches[1].error) {
            output(k)->set_dtype(m_branches[m_branches[0].error ? 1 : 0].outputs[k]->dtype());
            continue;
        }
        DType t = m_branches[0].outputs[k]->dtype(), e = m_branches[1].outputs[k]->dtype();
        if (t != e)
            BRAID_THROW(DTypeError,
                        "{}: output {} is {} in the then branch and {} in the else branch",
                        describe(), k, t.name(), e.name());
        output(k)->set_dtype(t);
    }
}

//! Whether a one-element condition holds (is nonzero); ShapeError for another element count.
static bool holds(const OperatorNode& opr, const Tensor& cond) {
    if (cond.shape().total_nr_elems() != 1)
        BRAID_THROW(ShapeError, "{}: condition \"{}\" has shape {}; expected one element",
                    opr.describe(), opr.input(0)->name(), cond.shape().to_string());
    double v = 0;
    Tensor c = cond.contiguous();
    convert_elements(c.dtype(), c.raw_ptr(), dtype::Float64(), &v, 1);
    return v != 0;
}

bool If::infer_branch(size_t b, const InferCtx& ctx, TensorShape* out) const {
    const Branch& br = m_branches[b];
    if (br.error) raise_branch_error(b);
    std::lock_guard lk(br.graph->inference_mutex());
    for (size_t i = 0; i < br.inputs.size(); ++i) {
        if (!br.inputs[i]) continue;
        const TensorShape* s = ctx.shape(i + 1);
        if (!s) return false;
        static_cast<InputNode*>(br.inputs[i]->owner())->set_fed_shape(*s);
    }
    br.graph->reinfer_all();
    for (size_t k = 0; k < br.outputs.size(); ++k) {
        if (!br.outputs[k]->shape_known()) return false;
        out[k] = br.outputs[k]->shape();
    }
    return true;
}

bool If::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (const Tensor* c = ctx.value(0)) return infer_branch(holds(*this, *c) ? 0 : 1, ctx, out);
    if (const TensorShape* s = ctx.shape(0); s && s->total_nr_elems() != 1)
        BRAID_THROW(ShapeError, "{}: condition \"{}\" has shape {}; expected one element",
                    describe(), input(0)->name(), s->to_string());
    // Either branch may run: static outputs only where both agree. A branch that cannot run
    // with these shapes fails when it is taken, not before.
    for (size_t b = 0; b < 2; ++b)
        if (m_branches[b].error) return infer_branch(1 - b, ctx, out);
    std::vector<TensorShape> then_shapes(outputs().size()), else_shapes(outputs().size());
    try {
        if (!infer_branch(0, ctx, then_shapes.data()) || !infer_branch(1, ctx, else_shapes.data()))
            return false;
    } catch (const ShapeError&) {
        return false;
    }
    if (then_shapes != else_shapes) return false;
    std::copy(then_shapes.begin(), then_shapes.end(), out);
    return true;
}

void If::raise_branch_error(size_t b) const {
    std::rethrow_exception(with_error_context(
        m_branches[b].error,
        fmt::format("{}: the {} branch, which could not be built for the shapes the If was built "
                    "at",
                    describe(), b == 0 ? "then" : "else"),
        ""));
}

void If::execute(ExecCtx& ctx) {
    size_t b = holds(*this, ctx.input(0)) ? 0 : 1;
    const Branch& br = m_branches[b];
    if (br.error) raise_branch_error(b);
    std::unique_ptr<Executable> exec;
    {
        std::lock_guard lk(m_pool->mutex);
        auto& idle = m_pool->idle[b];
        if (!idle.empty()) {
            exec = std::move(idle.back());
            idle.pop_back();
        }
    }
    if (!exec) {
        std::vector<OutputSpec> outs(br.outputs.begin(), br.outputs.end());
        exec = br.graph->compile(outs);
    }
    for (size_t i = 0; i < br.inputs.size(); ++i)
        if (br.inputs[i] && exec->takes(SymbolVar(br.inputs[i])))
            exec->feed(SymbolVar(br.inputs[i]), ctx.input(i + 1));
    exec->run();
    for (size_t k = 0; k < br.outputs.size(); ++k) {
        const Tensor& r = exec->output(k);
        Tensor& o = ctx.output(k);
        if (r.shape() != o.shape())
            BRAID_THROW(ShapeError, "{}: the {} branch's output {} has shape {}; planned {}",
                        describe(), b == 0 ? "then" : "else", k, r.shape().to_string(),
                        o.shape().to_string());
        comp_node().copy(o, r);
    }
    std::lock_guard lk(m_pool->mutex);
    m_pool->idle[b].push_back(std::move(exec));
}

namespace {

const char* const BRANCH_NAMES[] = {"then", "else"};

std::string message_of(const std::exception_ptr& err) {
    try {
        std::rethrow_exception(err);
    } catch (const std::exception& e) {
        return e.what();
    }
}

//! Each branch as a stored graph of its distinct outputs ("then_graph"), the output each If
//! output takes ("then_outputs"), and the name of the Input standing for each captured value
//! ("then_input_3"; empty where the branch reads none); a branch that could not be built keeps
//! its error's message ("then_error").
void dump_if(const OperatorNode& opr, ParamWriter& w) {
    auto& op = opr_cast<If>(opr);
    for (size_t b = 0; b < 2; ++b) {
        const Branch& br = op.branch(b);
        std::string prefix = BRANCH_NAMES[b];
        if (br.error) {
            w.write_string(prefix + "_error", message_of(br.error));
            continue;
        }
        SymbolVarArray distinct;
        std::vector<int64_t> which;
        for (auto* out : br.outputs) {
            auto it = std::find(distinct.begin(), distinct.end(), SymbolVar(out));
            which.push_back(it - distinct.begin());
            if (it == distinct.end()) distinct.push_back(out);
        }
        w.write_graph(prefix + "_graph", distinct);
        w.write_ints(prefix + "_outputs", which);
        for (size_t i = 0; i < br.inputs.size(); ++i)
            w.write_string(
                fmt::format("{}_input_{}", prefix, i),
                br.inputs[i] ? static_cast<InputNode*>(br.inputs[i]->owner())->input_name() : "");
    }
}

SymbolVarArray load_if(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, std::numeric_limits<size_t>::max());
    SymbolVarArray captured(ctx.inputs.begin() + 1, ctx.inputs.end());
    Branch branches[2];
    for (size_t b = 0; b < 2; ++b) {
        std::string prefix = BRANCH_NAMES[b];
        if (ctx.params.has(prefix + "_error")) {
            branches[b] = failed_branch(
                std::make_exception_ptr(GraphError(ctx.params.read_string(prefix + "_error"))),
                captured.size());
            continue;
        }
        StoredGraph g = ctx.params.read_graph(prefix + "_graph");
        Branch& br = branches[b];
        br.graph = g.graph;
        for (int64_t k : ctx.params.read_ints(prefix + "_outputs")) {
            if (k < 0 || size_t(k) >= g.outputs.size())
                ctx.params.throw_bad_value(prefix + "_outputs", std::to_string(k));
            br.outputs.push_back(g.outputs[size_t(k)].node());
        }
        for (size_t i = 0; i < captured.size(); ++i) {
            std::string name = ctx.params.read_string(fmt::format("{}_input_{}", prefix, i));
            auto it = g.inputs.find(name);
            br.inputs.push_back(it == g.inputs.end() ? nullptr : it->second.node());
        }
    }
    return If::make(ctx.input(0), captured, std::move(branches[0]), std::move(branches[1]),
                    ctx.config);
}

//! x doubled where its sum is positive, else x - 1 and its sum (two outputs, one read of an
//! outer value by each branch).
SymbolVarArray if_example(SymbolVar x) {
    SymbolVar s = reduce_sum(x);
    SymbolVar positive = less(scalar_like(s, 0), s);
    return cond(
        positive, {x, s},
        [](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{in[0] * scalar_like(in[0], 2), in[1]};
        },
        [](ComputingGraph&, const SymbolVarArray& in) {
            return SymbolVarArray{in[0] - scalar_like(in[0], 1), in[1]};
        });
}

} // namespace

void register_control_flow_operators() {
    OperatorRegistry::instance().add("If", "control_flow", dump_if, load_if, if_example);
}

} // namespace braid::opr
