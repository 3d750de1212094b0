#include "operators/control_flow.h"

#include "base/run_control.h"
#include "graph/executable.h"
#include "graph/grad.h"
#include "graph/graph_copy.h"
#include "graph/input_node.h"
#include "graph/operator_registry.h"
#include "operators/elemwise.h"
#include "operators/grad_util.h"
#include "operators/indexing.h"
#include "operators/io.h"
#include "operators/reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

namespace braid::opr {

namespace detail {

//! Compiled executables of one subgraph not running now; a run takes one (compiling a new one
//! when none is idle) and gives it back.
class ExecutablePool {
public:
    std::unique_ptr<Executable> take(const Subgraph& sg) {
        {
            std::lock_guard lk(m_mutex);
            if (!m_idle.empty()) {
                auto e = std::move(m_idle.back());
                m_idle.pop_back();
                return e;
            }
        }
        std::vector<OutputSpec> outs(sg.outputs.begin(), sg.outputs.end());
        return sg.graph->compile(outs);
    }
    void give(std::unique_ptr<Executable> e) {
        std::lock_guard lk(m_mutex);
        m_idle.push_back(std::move(e));
    }

private:
    std::mutex m_mutex;
    std::vector<std::unique_ptr<Executable>> m_idle;
};

} // namespace detail

namespace {

//! The subgraph's output shapes for its inputs' shapes (`shapes[i]` for `sg.inputs[i]`); false
//! when one is unknown.
bool infer_subgraph(const Subgraph& sg, const std::vector<const TensorShape*>& shapes,
                    TensorShape* out) {
    std::lock_guard lk(sg.graph->inference_mutex());
    for (size_t i = 0; i < sg.inputs.size(); ++i) {
        if (!sg.inputs[i]) continue;
        if (!shapes[i]) return false;
        static_cast<InputNode*>(sg.inputs[i]->owner())->set_fed_shape(*shapes[i]);
    }
    sg.graph->reinfer_all();
    for (size_t k = 0; k < sg.outputs.size(); ++k) {
        if (!sg.outputs[k]->shape_known()) return false;
        out[k] = sg.outputs[k]->shape();
    }
    return true;
}

//! Runs `e` (compiled from `sg`) on `inputs[i]` for `sg.inputs[i]`, under the cancellation and
//! deadline of the run this thread executes.
void run_subgraph(Executable& e, const Subgraph& sg, const std::vector<const Tensor*>& inputs) {
    for (size_t i = 0; i < sg.inputs.size(); ++i)
        if (sg.inputs[i] && e.takes(SymbolVar(sg.inputs[i])))
            e.feed(SymbolVar(sg.inputs[i]), *inputs[i]);
    e.set_run_control(current_run_control());
    e.run();
}

//! Whether a one-element condition holds (is nonzero); ShapeError naming `opr` otherwise.
bool holds(const OperatorNode& opr, const Tensor& cond, const char* what) {
    if (cond.shape().total_nr_elems() != 1)
        BRAID_THROW(ShapeError, "{}: {} has shape {}; expected one element", opr.describe(), what,
                    cond.shape().to_string());
    double v = 0;
    Tensor c = cond.contiguous();
    convert_elements(c.dtype(), c.raw_ptr(), dtype::Float64(), &v, 1);
    return v != 0;
}

void check_subgraph(const Subgraph& sg, size_t nr_inputs, const std::string& what) {
    if (!sg.graph || sg.inputs.size() != nr_inputs)
        BRAID_THROW(GraphError, "{} stands for {} values; {} given", what, sg.inputs.size(),
                    nr_inputs);
    for (auto* in : sg.inputs)
        if (in && (in->graph() != sg.graph.get() || !dynamic_cast<InputNode*>(in->owner())))
            BRAID_THROW(GraphError, "{}: var \"{}\" is not an Input of its graph", what,
                        in->name());
    for (auto* out : sg.outputs)
        if (out->graph() != sg.graph.get())
            BRAID_THROW(GraphError, "{}: output \"{}\" belongs to another graph", what,
                        out->name());
}

} // namespace

Subgraph
make_subgraph(ComputingGraph& like, const std::vector<SubgraphInput>& inputs,
              const std::function<SymbolVarArray(ComputingGraph&, const SymbolVarArray&)>& build) {
    GraphOptions options = like.options();
    options.default_comp_node = "cpu:default";
    Subgraph sg;
    sg.graph = ComputingGraph::make(options);
    SymbolVarArray vars;
    std::set<std::string> taken;
    for (auto& in : inputs) {
        std::string name = in.name;
        for (size_t k = 1; !taken.insert(name).second; ++k) name = fmt::format("{}#{}", in.name, k);
        vars.push_back(Input::make(*sg.graph, name, in.dtype, in.shape));
        sg.inputs.push_back(vars.back().node());
    }
    for (auto& out : build(*sg.graph, vars)) {
        if (&out.graph() != sg.graph.get())
            BRAID_THROW(GraphError,
                        "a subgraph's output \"{}\" belongs to another graph: a subgraph reads "
                        "outer values only through the Input vars it is given",
                        out.name());
        sg.outputs.push_back(out.node());
    }
    return sg;
}

//! The Input of a subgraph standing for `v` (a dynamic shape: {0} until inferred).
static SubgraphInput input_like(const SymbolVar& v, const std::string& name) {
    return {name, v.dtype(), v.node()->shape_known() ? v.shape() : TensorShape{0}};
}

Subgraph make_branch(ComputingGraph& like, const SymbolVarArray& captured,
                     const BranchBuilder& build) {
    std::vector<SubgraphInput> inputs;
    for (auto& v : captured) inputs.push_back(input_like(v, v.name()));
    return make_subgraph(like, inputs, build);
}

Subgraph failed_branch(std::exception_ptr error, size_t nr_captured) {
    Subgraph b;
    b.inputs.assign(nr_captured, nullptr);
    b.error = std::move(error);
    return b;
}

If::If(VarNode* cond, const VarNodeArray& captured, Subgraph then_branch, Subgraph else_branch,
       const OperatorConfig& config)
    : OperatorNode(config), m_branches{std::move(then_branch), std::move(else_branch)},
      m_pools{std::make_shared<detail::ExecutablePool>(),
              std::make_shared<detail::ExecutablePool>()} {
    add_input(cond);
    for (auto* v : captured) add_input(v);
    size_t nout = std::max(m_branches[0].outputs.size(), m_branches[1].outputs.size());
    for (size_t k = 0; k < nout; ++k) add_output(std::to_string(k));
}

SymbolVarArray If::make(SymbolVar cond, const SymbolVarArray& captured, Subgraph then_branch,
                        Subgraph else_branch, const OperatorConfig& config) {
    const char* names[] = {"then", "else"};
    Subgraph* branches[] = {&then_branch, &else_branch};
    if (then_branch.error && else_branch.error) std::rethrow_exception(then_branch.error);
    for (size_t b = 0; b < 2; ++b)
        if (!branches[b]->error)
            check_subgraph(*branches[b], captured.size(),
                           fmt::format("If \"{}\": the {} branch", config.name, names[b]));
    if (!then_branch.error && !else_branch.error &&
        then_branch.outputs.size() != else_branch.outputs.size())
        BRAID_THROW(GraphError, "If \"{}\": the then branch has {} outputs, the else branch {}",
                    config.name, then_branch.outputs.size(), else_branch.outputs.size());
    // A condition known now: the taken branch's operators join the enclosing graph (on the
    // captured values' comp node), so no If runs.
    if (const Tensor* known = cond.node()->static_value();
        known && known->shape().total_nr_elems() == 1) {
        double v = 0;
        Tensor c = known->contiguous();
        convert_elements(c.dtype(), c.raw_ptr(), dtype::Float64(), &v, 1);
        const Subgraph& taken = *branches[v != 0 ? 0 : 1];
        if (!taken.error) {
            std::map<VarNode*, SymbolVar> replace;
            for (size_t i = 0; i < captured.size(); ++i)
                if (taken.inputs[i]) replace[taken.inputs[i]] = captured[i];
            try {
                return copy_graph(SymbolVarArray(taken.outputs.begin(), taken.outputs.end()),
                                  cond.graph(), replace, false);
            } catch (const GraphError&) {
                // An operator type the registry cannot rebuild (register_all_operators() not
                // called): an If it is; what was copied is left unused.
            }
        }
    }
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

bool If::infer_branch(size_t b, const InferCtx& ctx, TensorShape* out) const {
    const Subgraph& br = m_branches[b];
    if (br.error) raise_branch_error(b);
    std::vector<const TensorShape*> shapes(br.inputs.size());
    for (size_t i = 0; i < shapes.size(); ++i) shapes[i] = ctx.shape(i + 1);
    return infer_subgraph(br, shapes, out);
}

bool If::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (const Tensor* c = ctx.value(0))
        return infer_branch(holds(*this, *c, "the condition") ? 0 : 1, ctx, out);
    if (const TensorShape* s = ctx.shape(0); s && s->total_nr_elems() != 1)
        BRAID_THROW(ShapeError, "{}: the condition has shape {}; expected one element", describe(),
                    s->to_string());
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
    size_t b = holds(*this, ctx.input(0), "the condition") ? 0 : 1;
    const Subgraph& br = m_branches[b];
    if (br.error) raise_branch_error(b);
    auto exec = m_pools[b]->take(br);
    std::vector<const Tensor*> inputs(br.inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = &ctx.input(i + 1);
    run_subgraph(*exec, br, inputs);
    for (size_t k = 0; k < br.outputs.size(); ++k) {
        const Tensor& r = exec->output(k);
        Tensor& o = ctx.output(k);
        if (r.shape() != o.shape())
            BRAID_THROW(ShapeError, "{}: the {} branch's output {} has shape {}; planned {}",
                        describe(), b == 0 ? "then" : "else", k, r.shape().to_string(),
                        o.shape().to_string());
        comp_node().copy(o, r);
    }
    m_pools[b]->give(std::move(exec));
}

// ---------------------------------------------------------------- Loop

Loop::Loop(VarNode* max_trip, VarNode* cond, const VarNodeArray& carried,
           const VarNodeArray& captured, Subgraph body, const OperatorConfig& config)
    : OperatorNode(config), m_has_trip(max_trip != nullptr), m_has_cond(cond != nullptr),
      m_nr_carried(carried.size()), m_nr_captured(captured.size()), m_body(std::move(body)),
      m_pool(std::make_shared<detail::ExecutablePool>()) {
    if (max_trip) add_input(max_trip);
    if (cond) add_input(cond);
    for (auto* v : carried) add_input(v);
    for (auto* v : captured) add_input(v);
    for (size_t k = 1; k < m_body.outputs.size(); ++k)
        add_output(k <= m_nr_carried ? fmt::format("carried{}", k - 1)
                                     : fmt::format("scan{}", k - 1 - m_nr_carried));
}

SymbolVarArray Loop::make(SymbolVar max_trip, SymbolVar cond, const SymbolVarArray& carried,
                          const SymbolVarArray& captured, Subgraph body,
                          const OperatorConfig& config) {
    std::string what = fmt::format("Loop \"{}\": the body", config.name);
    check_subgraph(body, 2 + carried.size() + captured.size(), what);
    if (body.outputs.size() < 1 + carried.size())
        BRAID_THROW(GraphError, "{} has {} outputs; expected the condition and {} carried values",
                    what, body.outputs.size(), carried.size());
    ComputingGraph* g = max_trip.valid()    ? &max_trip.graph()
                        : cond.valid()      ? &cond.graph()
                        : !carried.empty()  ? &carried[0].graph()
                        : !captured.empty() ? &captured[0].graph()
                                            : nullptr;
    if (!g)
        BRAID_THROW(GraphError, "Loop \"{}\": needs a trip count, a condition or an input",
                    config.name);
    VarNodeArray c, k;
    for (auto& v : carried) c.push_back(v.node());
    for (auto& v : captured) k.push_back(v.node());
    auto* opr = g->insert_opr(
        std::make_unique<Loop>(max_trip.node(), cond.node(), c, k, std::move(body), config));
    return SymbolVarArray(opr->outputs().begin(), opr->outputs().end());
}

void Loop::init_output_dtypes() {
    size_t first = 0;
    if (m_has_trip) {
        DType t = input(first++)->dtype();
        if (!t.is_integer())
            BRAID_THROW(DTypeError, "{}: the trip count \"{}\" has dtype {}; expected an integer",
                        describe(), input(0)->name(), t.name());
    }
    if (m_has_cond) ++first;
    for (size_t i = 0; i < m_nr_carried; ++i) {
        DType in = input(first + i)->dtype(), out = m_body.outputs[1 + i]->dtype();
        if (in != out)
            BRAID_THROW(DTypeError,
                        "{}: carried value {} enters the body as {} and leaves it as {}",
                        describe(), i, in.name(), out.name());
        output(i)->set_dtype(in);
    }
    for (size_t k = m_nr_carried; k < outputs().size(); ++k)
        output(k)->set_dtype(m_body.outputs[1 + k]->dtype());
}

namespace {
//! The trip count of `loop` given its trip count and condition values (null: unknown) when it
//! is known and nothing can end the loop early.
std::optional<int64_t> fixed_trip_count(const Loop& loop, const Tensor* trip, const Tensor* cond) {
    if (!loop.has_max_trip() || !trip) return std::nullopt;
    if (loop.has_cond() && (!cond || !holds(loop, *cond, "the condition"))) return std::nullopt;
    const Subgraph& body = loop.body();
    VarNode* body_cond = body.outputs[0];
    bool passes = body_cond == body.inputs[1];
    if (const Tensor* v = body_cond->static_value())
        passes = holds(loop, *v, "the body's condition");
    if (!passes) return std::nullopt;
    Tensor t = trip->contiguous();
    double n = 0;
    convert_elements(t.dtype(), t.raw_ptr(), dtype::Float64(), &n, 1);
    return std::max<int64_t>(0, int64_t(n));
}
} // namespace

std::optional<int64_t> Loop::static_trip_count(const InferCtx& ctx) const {
    return fixed_trip_count(*this, m_has_trip ? ctx.value(0) : nullptr,
                            m_has_trip && m_has_cond ? ctx.value(1) : nullptr);
}

bool Loop::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    static const TensorShape scalar{};
    size_t first = size_t(m_has_trip) + size_t(m_has_cond);
    std::vector<const TensorShape*> shapes{&scalar, &scalar};
    for (size_t i = 0; i < m_nr_carried + m_nr_captured; ++i)
        shapes.push_back(ctx.shape(first + i));
    std::vector<TensorShape> body_out(m_body.outputs.size());
    if (!infer_subgraph(m_body, shapes, body_out.data())) return false;
    for (size_t i = 0; i < m_nr_carried; ++i) {
        if (body_out[1 + i] != *shapes[2 + i]) return false; // changes shape: known when run
        out[i] = body_out[1 + i];
    }
    if (outputs().size() == m_nr_carried) return true;
    auto trips = static_trip_count(ctx);
    if (!trips) return false;
    for (size_t k = m_nr_carried; k < outputs().size(); ++k) {
        std::vector<size_t> dims{size_t(*trips)}, slice = body_out[1 + k].dims();
        dims.insert(dims.end(), slice.begin(), slice.end());
        out[k] = TensorShape(dims);
    }
    return true;
}

namespace {

//! Whether the bytes of `a` and `b` overlap.
bool overlaps(const Tensor& a, const Tensor& b) {
    if (a.empty() || b.empty()) return false;
    auto* a0 = a.raw_ptr();
    auto* b0 = b.raw_ptr();
    auto* a1 = a0 + a.shape().nr_bytes(a.dtype());
    auto* b1 = b0 + b.shape().nr_bytes(b.dtype());
    return a0 < b1 && b0 < a1;
}

//! `slices` stacked along a new axis 0 ({0, slice...} of `empty_slice` when there are none).
Tensor stack(const std::vector<Tensor>& slices, DType dtype, const TensorShape& empty_slice) {
    const TensorShape& slice = slices.empty() ? empty_slice : slices[0].shape();
    std::vector<size_t> dims{slices.size()}, slice_dims = slice.dims();
    dims.insert(dims.end(), slice_dims.begin(), slice_dims.end());
    Tensor r(TensorShape(dims), dtype);
    size_t bytes = slice.nr_bytes(dtype);
    for (size_t i = 0; i < slices.size(); ++i) {
        if (slices[i].shape() != slice)
            BRAID_THROW(ShapeError, "a scan output's iteration {} has shape {}; iteration 0 had {}",
                        i, slices[i].shape().to_string(), slice.to_string());
        std::memcpy(r.raw_ptr() + i * bytes, slices[i].raw_ptr(), bytes);
    }
    return r;
}

} // namespace

void Loop::execute(ExecCtx& ctx) {
    size_t first = 0;
    int64_t max_trip = std::numeric_limits<int64_t>::max();
    if (m_has_trip) {
        Tensor t = ctx.input(first++).contiguous();
        if (t.shape().total_nr_elems() != 1)
            BRAID_THROW(ShapeError, "{}: the trip count has shape {}; expected one element",
                        describe(), t.shape().to_string());
        convert_elements(t.dtype(), t.raw_ptr(), dtype::Int64(), &max_trip, 1);
    }
    bool go = true;
    if (m_has_cond) go = holds(*this, ctx.input(first++), "the condition");
    const size_t nc = m_nr_carried, ns = outputs().size() - nc;
    std::vector<Tensor> carried(nc);
    for (size_t i = 0; i < nc; ++i) carried[i] = ctx.input(first + i);
    std::vector<std::vector<Tensor>> scans(ns);
    // Two executables of the body take turns, so that one's outputs are the other's inputs
    // without a copy.
    std::unique_ptr<Executable> execs[2] = {m_pool->take(m_body), nullptr};
    std::vector<const Tensor*> inputs(m_body.inputs.size());
    for (size_t j = 0; j < m_nr_captured; ++j) inputs[2 + nc + j] = &ctx.input(first + nc + j);
    const RunControl* rc = current_run_control();
    // Made once: an iteration allocates nothing of its own (scan values aside). A body output
    // that views the iteration number or the condition is read (the condition) or copied
    // (aliased carried values, scans) before the next iteration writes them.
    Tensor iteration(TensorShape{}, dtype::Int64()), cond(TensorShape{}, dtype::Bool());
    std::vector<Tensor> next(nc);
    inputs[0] = &iteration;
    inputs[1] = &cond;
    for (int64_t i = 0; i < max_trip && go; ++i) {
        if (rc) rc->check();
        auto& exec = execs[i % 2];
        if (!exec) exec = m_pool->take(m_body);
        *iteration.ptr<int64_t>() = i;
        *cond.ptr<bool>() = go;
        for (size_t k = 0; k < nc; ++k) inputs[2 + k] = &carried[k];
        run_subgraph(*exec, m_body, inputs);
        go = holds(*this, exec->output(0), "the body's condition");
        for (size_t k = 0; k < nc; ++k) {
            const Tensor& r = exec->output(1 + k);
            // An output that views what this run was fed would be overwritten under the
            // other executable's feet: copy it.
            bool aliased = !r.layout().is_contiguous();
            for (auto* in : inputs) aliased = aliased || overlaps(r, *in);
            next[k] = aliased ? r.contiguous().copy() : r;
        }
        carried.swap(next);
        for (size_t k = 0; k < ns; ++k)
            scans[k].push_back(exec->output(1 + nc + k).contiguous().copy());
    }
    // The last carried values live in an executable's outputs: copied before it is given back.
    for (size_t k = 0; k < nc; ++k) ctx.output(k) = carried[k].contiguous().copy();
    for (auto& e : execs)
        if (e) m_pool->give(std::move(e));
    for (size_t k = 0; k < ns; ++k) {
        VarNode* slice_var = m_body.outputs[1 + nc + k];
        TensorShape empty = slice_var->shape_known() ? slice_var->shape() : TensorShape{0};
        ctx.output(nc + k) = stack(scans[k], output(nc + k)->dtype(), empty);
    }
}

SymbolVarArray loop(SymbolVar max_trip, SymbolVar cond, const SymbolVarArray& carried,
                    const SymbolVarArray& captured, const LoopBodyBuilder& build,
                    const OperatorConfig& config) {
    std::vector<SubgraphInput> inputs{{"iteration", dtype::Int64(), TensorShape{}},
                                      {"cond", dtype::Bool(), TensorShape{}}};
    for (size_t i = 0; i < carried.size(); ++i)
        inputs.push_back(input_like(carried[i], fmt::format("carried{}", i)));
    for (auto& v : captured) inputs.push_back(input_like(v, v.name()));
    size_t nc = carried.size();
    Subgraph body = make_subgraph(
        max_trip.valid() ? max_trip.graph()
        : cond.valid()   ? cond.graph()
                         : carried.at(0).graph(),
        inputs, [&](ComputingGraph& g, const SymbolVarArray& in) {
            return build(g, in[0], in[1], SymbolVarArray(in.begin() + 2, in.begin() + 2 + nc),
                         SymbolVarArray(in.begin() + 2 + nc, in.end()));
        });
    return Loop::make(max_trip, cond, carried, captured, std::move(body), config);
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

//! A subgraph as params under `prefix`: a stored graph of its distinct outputs ("body_graph"),
//! the one each output takes ("body_outputs"), and the name of the Input standing for each
//! value passed in ("body_input_3"; empty where it reads none).
void write_subgraph(ParamWriter& w, const std::string& prefix, const Subgraph& sg) {
    SymbolVarArray distinct;
    std::vector<int64_t> which;
    for (auto* out : sg.outputs) {
        auto it = std::find(distinct.begin(), distinct.end(), SymbolVar(out));
        which.push_back(it - distinct.begin());
        if (it == distinct.end()) distinct.push_back(out);
    }
    w.write_graph(prefix + "_graph", distinct);
    w.write_ints(prefix + "_outputs", which);
    // The stored graph holds the Inputs its outputs depend on; the others are named "", as
    // they are when loaded, so that a loaded model dumps to the same bytes.
    std::set<VarNode*> reached;
    std::vector<VarNode*> stack(sg.outputs.begin(), sg.outputs.end());
    while (!stack.empty()) {
        VarNode* v = stack.back();
        stack.pop_back();
        if (!reached.insert(v).second) continue;
        for (auto* in : v->owner()->inputs()) stack.push_back(in);
    }
    for (size_t i = 0; i < sg.inputs.size(); ++i)
        w.write_string(fmt::format("{}_input_{}", prefix, i),
                       sg.inputs[i] && reached.count(sg.inputs[i])
                           ? static_cast<InputNode*>(sg.inputs[i]->owner())->input_name()
                           : "");
}

Subgraph read_subgraph(const ParamReader& r, const std::string& prefix, size_t nr_inputs) {
    StoredGraph g = r.read_graph(prefix + "_graph");
    Subgraph sg;
    sg.graph = g.graph;
    for (int64_t k : r.read_ints(prefix + "_outputs")) {
        if (k < 0 || size_t(k) >= g.outputs.size())
            r.throw_bad_value(prefix + "_outputs", std::to_string(k));
        sg.outputs.push_back(g.outputs[size_t(k)].node());
    }
    for (size_t i = 0; i < nr_inputs; ++i) {
        auto it = g.inputs.find(r.read_string(fmt::format("{}_input_{}", prefix, i)));
        sg.inputs.push_back(it == g.inputs.end() ? nullptr : it->second.node());
    }
    return sg;
}

//! Each branch as a subgraph ("then_graph", ...); a branch that could not be built keeps its
//! error's message ("then_error").
void dump_if(const OperatorNode& opr, ParamWriter& w) {
    auto& op = opr_cast<If>(opr);
    for (size_t b = 0; b < 2; ++b) {
        const Subgraph& br = op.branch(b);
        if (br.error)
            w.write_string(std::string(BRANCH_NAMES[b]) + "_error", message_of(br.error));
        else
            write_subgraph(w, BRANCH_NAMES[b], br);
    }
}

SymbolVarArray load_if(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, std::numeric_limits<size_t>::max());
    SymbolVarArray captured(ctx.inputs.begin() + 1, ctx.inputs.end());
    Subgraph branches[2];
    for (size_t b = 0; b < 2; ++b) {
        std::string prefix = BRANCH_NAMES[b];
        if (ctx.params.has(prefix + "_error"))
            branches[b] = failed_branch(
                std::make_exception_ptr(GraphError(ctx.params.read_string(prefix + "_error"))),
                captured.size());
        else
            branches[b] = read_subgraph(ctx.params, prefix, captured.size());
    }
    return If::make(ctx.input(0), captured, std::move(branches[0]), std::move(branches[1]),
                    ctx.config);
}

//! Whether the trip count and condition are given, how many values are carried, the body.
void dump_loop(const OperatorNode& opr, ParamWriter& w) {
    auto& op = opr_cast<Loop>(opr);
    w.write_bool("has_max_trip", op.has_max_trip());
    w.write_bool("has_cond", op.has_cond());
    w.write_int("nr_carried", int64_t(op.nr_carried()));
    write_subgraph(w, "body", op.body());
}

SymbolVarArray load_loop(const OprLoadContext& ctx) {
    bool has_trip = ctx.params.read_bool("has_max_trip"),
         has_cond = ctx.params.read_bool("has_cond");
    size_t first = size_t(has_trip) + size_t(has_cond);
    int64_t nc = ctx.params.read_int("nr_carried");
    if (nc < 0 || size_t(nc) > ctx.inputs.size() - std::min(first, ctx.inputs.size()))
        ctx.params.throw_bad_value("nr_carried", std::to_string(nc));
    ctx.expect_inputs(first, std::numeric_limits<size_t>::max());
    SymbolVarArray carried(ctx.inputs.begin() + first, ctx.inputs.begin() + first + nc);
    SymbolVarArray captured(ctx.inputs.begin() + first + nc, ctx.inputs.end());
    Subgraph body = read_subgraph(ctx.params, "body", 2 + ctx.inputs.size() - first);
    return Loop::make(has_trip ? ctx.input(0) : SymbolVar(),
                      has_cond ? ctx.input(first - 1) : SymbolVar(), carried, captured,
                      std::move(body), ctx.config);
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

//! Running sums of x's rows (a scan output) and their total (a carried value), three
//! iterations, x read from outside.
SymbolVarArray loop_example(SymbolVar x) {
    auto trips = ImmutableTensor::make_scalar(x.graph(), 3, dtype::Int64());
    auto zero = reduce_sum(x, {0}) * 0.0;
    return loop(trips, SymbolVar(), {zero}, {x},
                [](ComputingGraph&, SymbolVar, SymbolVar cond, const SymbolVarArray& carried,
                   const SymbolVarArray& captured) {
                    auto sum = carried[0] + reduce_sum(captured[0], {0});
                    return SymbolVarArray{cond, sum, sum};
                });
}

//! The gradient branch of a forward branch `br` of an If with `nr_captured` captured values:
//! a copy of the branch, then the gradient of sum(output_j * grad_j) for the outputs with a
//! gradient, w.r.t. every captured value. Its inputs: the captured values, then those output
//! gradients (`graded`: which outputs have one).
Subgraph gradient_branch(const Subgraph& br, ComputingGraph& like, const SymbolVarArray& inputs,
                         size_t nr_captured, const std::vector<size_t>& graded) {
    if (br.error) return failed_branch(br.error, inputs.size());
    return make_branch(like, inputs, [&](ComputingGraph& g, const SymbolVarArray& in) {
        std::map<VarNode*, SymbolVar> replace;
        for (size_t i = 0; i < nr_captured; ++i)
            if (br.inputs[i]) replace[br.inputs[i]] = in[i];
        SymbolVarArray outs =
            copy_graph(SymbolVarArray(br.outputs.begin(), br.outputs.end()), g, replace);
        SymbolVar loss;
        for (size_t k = 0; k < graded.size(); ++k) {
            SymbolVar term = reduce_sum(outs[graded[k]] * in[nr_captured + k]);
            loss = loss.valid() ? loss + term : term;
        }
        GradOptions opt;
        opt.zero_for_unreachable = true;
        return grad(loss, SymbolVarArray(in.begin(), in.begin() + ptrdiff_t(nr_captured)), opt);
    });
}

const SymbolVarArray& If::backward(const VarNodeArray& out_grads) {
    auto it = m_backward.find(out_grads);
    if (it != m_backward.end()) return it->second;
    SymbolVarArray inputs;
    for (size_t i = 1; i < this->inputs().size(); ++i) inputs.push_back(input(i));
    size_t nr_captured = inputs.size();
    std::vector<size_t> graded;
    for (size_t j = 0; j < out_grads.size(); ++j)
        if (out_grads[j]) {
            graded.push_back(j);
            inputs.push_back(SymbolVar(out_grads[j]));
        }
    ComputingGraph& g = *graph();
    Subgraph then_grad = gradient_branch(m_branches[0], g, inputs, nr_captured, graded);
    Subgraph else_grad = gradient_branch(m_branches[1], g, inputs, nr_captured, graded);
    return m_backward[out_grads] =
               If::make(input(0), inputs, std::move(then_grad), std::move(else_grad),
                        OperatorConfig(name() + ":grad", comp_node()));
}

VarNode* if_grad(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads) {
    if (wrt == 0) return nullptr; // the condition
    if (!opr.input(wrt)->dtype().is_float()) return nullptr;
    return static_cast<If&>(opr).backward(out_grads)[wrt - 1].node();
}

//! Row `t` (an int64 scalar) of `stacked` [n, ...], of shape `row`.
SymbolVar row_of(SymbolVar stacked, SymbolVar t, const TensorShape& row) {
    long n = long(stacked.shape()[0]), width = long(row.total_nr_elems());
    SymbolVar r = embedding(stacked.reshape({n, width}), t.astype(dtype::Int32()));
    std::vector<size_t> dims = row.dims();
    return r.reshape(std::vector<long>(dims.begin(), dims.end()));
}

const SymbolVarArray& Loop::backward(const VarNodeArray& out_grads) {
    auto it = m_backward.find(out_grads);
    if (it != m_backward.end()) return it->second;
    size_t first = size_t(m_has_trip) + size_t(m_has_cond), nc = m_nr_carried,
           ns = outputs().size() - nc;
    std::optional<int64_t> trips =
        fixed_trip_count(*this, m_has_trip ? input(0)->static_value() : nullptr,
                         m_has_cond ? input(1)->static_value() : nullptr);
    if (!trips)
        BRAID_THROW(GraphError,
                    "{}: a gradient through a Loop needs a static trip count and no condition "
                    "that can end the loop early",
                    describe());
    for (size_t i = 0; i < outputs().size(); ++i)
        if (!output(i)->shape_known())
            BRAID_THROW(GraphError,
                        "{}: a gradient through a Loop needs static shapes (output {} "
                        "has none)",
                        describe(), i);
    SymbolVar max_trip = input(0);
    int64_t n = *trips;
    SymbolVarArray carried, captured;
    for (size_t i = 0; i < nc; ++i) carried.push_back(input(first + i));
    for (size_t j = first + nc; j < inputs().size(); ++j) captured.push_back(input(j));
    const Subgraph& body = m_body;
    // The forward body copied into `g` on these vars: {condition, carried..., scans...}.
    auto copy_body = [&body](ComputingGraph& g, SymbolVar iteration, SymbolVar cond,
                             const SymbolVarArray& c, const SymbolVarArray& cap) {
        std::map<VarNode*, SymbolVar> replace;
        SymbolVarArray fed{iteration, cond};
        fed.insert(fed.end(), c.begin(), c.end());
        fed.insert(fed.end(), cap.begin(), cap.end());
        for (size_t k = 0; k < fed.size(); ++k)
            if (body.inputs[k]) replace[body.inputs[k]] = fed[k];
        return copy_graph(SymbolVarArray(body.outputs.begin(), body.outputs.end()), g, replace);
    };

    // 1. The loop again, recording each iteration's carried values (before the step).
    SymbolVarArray recorded = loop(
        max_trip, SymbolVar(), carried, captured,
        [&](ComputingGraph& g, SymbolVar iteration, SymbolVar cond, const SymbolVarArray& c,
            const SymbolVarArray& cap) {
            SymbolVarArray outs = copy_body(g, iteration, cond, c, cap);
            outs.insert(outs.end(), c.begin(), c.end());
            return outs;
        },
        OperatorConfig(name() + ":record", comp_node()));
    SymbolVarArray states(recorded.begin() + ptrdiff_t(nc + ns), recorded.end());

    // 2. The body's gradient from the last iteration to the first. Carried: the gradients of
    // the float carried values, then the sums of the float captured values' gradients.
    std::vector<size_t> grad_carried, grad_captured, graded_scans;
    for (size_t i = 0; i < nc; ++i)
        if (carried[i].dtype().is_float()) grad_carried.push_back(i);
    for (size_t j = 0; j < captured.size(); ++j)
        if (captured[j].dtype().is_float()) grad_captured.push_back(j);
    SymbolVarArray acc, extra = states;
    for (size_t i : grad_carried)
        acc.push_back(out_grads[i] ? SymbolVar(out_grads[i]) : zeros_of(SymbolVar(output(i))));
    for (size_t j : grad_captured) acc.push_back(zeros_of(captured[j]));
    for (size_t k = 0; k < ns; ++k)
        if (out_grads[nc + k]) {
            graded_scans.push_back(k);
            extra.push_back(out_grads[nc + k]);
        }
    extra.insert(extra.end(), captured.begin(), captured.end());
    SymbolVarArray backward = loop(
        max_trip, SymbolVar(), acc, extra,
        [&](ComputingGraph& g, SymbolVar iteration, SymbolVar cond, const SymbolVarArray& a,
            const SymbolVarArray& x) {
            SymbolVar t = scalar_like(iteration, double(n - 1)) - iteration;
            SymbolVarArray c, cap(x.end() - ptrdiff_t(captured.size()), x.end());
            for (size_t i = 0; i < nc; ++i) c.push_back(row_of(x[i], t, carried[i].shape()));
            SymbolVar always = ImmutableTensor::make_scalar(g, 1, dtype::Bool());
            SymbolVarArray outs = copy_body(g, t, always, c, cap);
            SymbolVar loss;
            auto add = [&](SymbolVar term) { loss = loss.valid() ? loss + term : term; };
            for (size_t k = 0; k < grad_carried.size(); ++k)
                add(reduce_sum(outs[1 + grad_carried[k]] * a[k]));
            for (size_t k = 0; k < graded_scans.size(); ++k) {
                SymbolVar g_scan = x[nc + k];
                add(reduce_sum(outs[1 + nc + graded_scans[k]] *
                               row_of(g_scan, t, outs[1 + nc + graded_scans[k]].shape())));
            }
            SymbolVarArray wrt;
            for (size_t i : grad_carried) wrt.push_back(c[i]);
            for (size_t j : grad_captured) wrt.push_back(cap[j]);
            GradOptions opt;
            opt.zero_for_unreachable = true;
            SymbolVarArray grads = grad(loss, wrt, opt);
            SymbolVarArray next{cond};
            for (size_t k = 0; k < grad_carried.size(); ++k) next.push_back(grads[k]);
            for (size_t k = 0; k < grad_captured.size(); ++k) {
                size_t at = grad_carried.size() + k;
                next.push_back(a[at] + grads[at]);
            }
            return next;
        },
        OperatorConfig(name() + ":grad", comp_node()));
    SymbolVarArray res(inputs().size() - first);
    for (size_t k = 0; k < grad_carried.size(); ++k) res[grad_carried[k]] = backward[k];
    for (size_t k = 0; k < grad_captured.size(); ++k)
        res[nc + grad_captured[k]] = backward[grad_carried.size() + k];
    return m_backward[out_grads] = res;
}

VarNode* loop_grad(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads) {
    auto& op = static_cast<Loop&>(opr);
    size_t first = size_t(op.has_max_trip()) + size_t(op.has_cond());
    if (wrt < first) return nullptr; // the trip count and the condition
    SymbolVar g = op.backward(out_grads)[wrt - first];
    return g.valid() ? g.node() : nullptr;
}

void register_control_flow_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("If", "control_flow", dump_if, load_if, if_example);
    register_grad_rule("If", if_grad);
    register_grad_rule("Loop", loop_grad);
    reg.add("Loop", "control_flow", dump_loop, load_loop, loop_example);
}

} // namespace braid::opr
