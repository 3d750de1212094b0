// Control flow converters: If, Loop, Scan. An If whose condition is known at import (a
// constant, a folded value, a bound input) keeps only the taken branch, whose nodes join the
// enclosing graph; otherwise it becomes braid's If operator with both branches imported as
// graphs of their own, reading the outer values they use through Input vars (no copy at run
// time). Loop becomes braid's Loop with its body imported the same way; Scan becomes a Loop
// over the scan axis.
#include "onnx_import/onnx_internal.h"

#include "base/log.h"
#include "onnx_import/op_util.h"
#include "operators/concat_split.h"
#include "operators/control_flow.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

#include <fmt/ranges.h>

#include <set>

namespace braid::onnx_import {

namespace {

//! The names `g` reads from its enclosing scopes (in order of first use): read by a node of
//! `g`, by a graph of one of its nodes, or as an output, and defined neither as an input, an
//! initializer nor an earlier node's output of `g`.
std::vector<std::string> outer_names(const onnx::GraphProto& g) {
    std::set<std::string> defined, seen;
    for (auto& in : g.input()) defined.insert(in.name());
    for (auto& t : g.initializer()) defined.insert(t.name());
    std::vector<std::string> names;
    auto use = [&](const std::string& n) {
        if (!n.empty() && !defined.count(n) && seen.insert(n).second) names.push_back(n);
    };
    for (auto& node : g.node()) {
        for (auto& in : node.input()) use(in);
        for (auto& a : node.attribute()) {
            if (a.has_g())
                for (auto& n : outer_names(a.g())) use(n);
            for (auto& sub : a.graphs())
                for (auto& n : outer_names(sub)) use(n);
        }
        for (auto& out : node.output()) defined.insert(out);
    }
    for (auto& out : g.output()) use(out.name());
    return names;
}

const onnx::GraphProto& branch_graph(const NodeCtx& c, const char* name) {
    auto* a = c.attr(name);
    if (!a || !a->has_g()) c.invalid(fmt::format("attribute \"{}\" (a graph) is missing", name));
    if (a->g().input_size() != 0)
        c.invalid(fmt::format("{} declares {} inputs; an If branch takes none", name,
                              a->g().input_size()));
    return a->g();
}

//! Runs `convert`, naming the If node and its branch in any error (of the same class).
template <typename F> auto in_branch(const NodeCtx& c, const char* branch, F&& convert) {
    std::string context = fmt::format("{}, {}", c.where(), branch);
    try {
        return convert();
    } catch (const ShapeInputError& e) {
        throw ShapeInputError(context + ": " + e.what(), e.inputs());
    } catch (const UnsupportedOnnxError& e) {
        throw UnsupportedOnnxError(context + ": " + e.what());
    } catch (const std::exception&) {
        std::rethrow_exception(with_error_context(std::current_exception(), context, ""));
    }
}

//! The taken branch of an If whose condition is known: its nodes join the enclosing graph.
SymbolVarArray inline_branch(const NodeCtx& c, const onnx::GraphProto& g, const char* branch) {
    Importer& imp = c.importer();
    return in_branch(c, branch, [&] {
        for (auto& t : g.initializer())
            imp.constants[t.name()] =
                tensor_of(t, imp.dir, imp.source + ": initializer", &imp.external);
        imp.convert_nodes(g);
        SymbolVarArray outs;
        for (auto& out : g.output())
            outs.push_back(imp.output_var(
                out.name(), fmt::format("{}: {} output \"{}\"", c.where(), branch, out.name())));
        return outs;
    });
}

//! `g` imported into a subgraph of its own whose Inputs are `inputs`: `bind` records the values
//! of `g`'s names (the Inputs, or values computed from them), then `g`'s nodes are converted and
//! `finish` turns `g`'s outputs into the subgraph's (default: as they are).
opr::Subgraph import_subgraph(
    const NodeCtx& c, const onnx::GraphProto& g, const char* label,
    const std::vector<opr::SubgraphInput>& inputs, const std::map<std::string, Tensor>& known,
    const std::function<void(Importer&, const SymbolVarArray&)>& bind,
    const std::function<SymbolVarArray(const SymbolVarArray&, SymbolVarArray)>& finish = {}) {
    Importer& imp = c.importer();
    return in_branch(c, label, [&] {
        return opr::make_subgraph(
            *imp.graph, inputs, [&](ComputingGraph& sg, const SymbolVarArray& vars) {
                Importer sub;
                sub.graph = &sg;
                sub.source = imp.source;
                sub.dir = imp.dir;
                sub.opset = imp.opset;
                sub.model = imp.model;
                sub.constants = known;
                for (auto& t : g.initializer())
                    sub.constants[t.name()] =
                        tensor_of(t, imp.dir, imp.source + ": initializer", &imp.external);
                bind(sub, vars);
                sub.convert_nodes(g);
                SymbolVarArray outs;
                for (auto& out : g.output())
                    outs.push_back(
                        sub.output_var(out.name(), fmt::format("{}: {} output \"{}\"", c.where(),
                                                               label, out.name())));
                return finish ? finish(vars, std::move(outs)) : outs;
            });
    });
}

//! Inputs standing for the captured outer values.
void add_captured(std::vector<opr::SubgraphInput>& inputs, const std::vector<std::string>& names,
                  const SymbolVarArray& vars) {
    for (size_t i = 0; i < names.size(); ++i)
        inputs.push_back({names[i], vars[i].dtype(),
                          vars[i].node()->shape_known() ? vars[i].shape() : TensorShape{0}});
}

//! A branch imported as a graph of its own; `captured` names the outer values it may read as
//! Input vars (in the If's input order), `known` the outer values known at import.
opr::Subgraph import_branch(const NodeCtx& c, const onnx::GraphProto& g, const char* branch,
                            const std::vector<std::string>& captured,
                            const SymbolVarArray& captured_vars,
                            const std::map<std::string, Tensor>& known) {
    std::vector<opr::SubgraphInput> inputs;
    add_captured(inputs, captured, captured_vars);
    return import_subgraph(c, g, branch, inputs, known,
                           [&](Importer& sub, const SymbolVarArray& vars) {
                               for (size_t i = 0; i < captured.size(); ++i)
                                   sub.values[captured[i]] = vars[i];
                           });
}

//! The outer values some subgraphs read: those known at import (copied in as constants, so
//! that the subgraph folds what depends on them), and the others (the operator's captured
//! inputs), by name and var.
struct Outer {
    std::map<std::string, Tensor> known;
    std::vector<std::string> captured;
    SymbolVarArray captured_vars;
};

Outer outer_values(const NodeCtx& c, std::initializer_list<const onnx::GraphProto*> graphs) {
    Importer& imp = c.importer();
    std::vector<std::string> names;
    for (auto* g : graphs)
        for (auto& n : outer_names(*g))
            if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    Outer res;
    auto& [known, captured, captured_vars] = res;
    for (auto& n : names) {
        if (auto it = imp.constants.find(n); it != imp.constants.end()) {
            known[n] = it->second;
            continue;
        }
        if (imp.sequences.count(n))
            c.unsupported(fmt::format("a subgraph reads the sequence \"{}\" of the enclosing "
                                      "graph (only tensors)",
                                      n));
        auto it = imp.values.find(n);
        if (it == imp.values.end())
            c.invalid(fmt::format("a subgraph reads \"{}\", which the enclosing graph does not "
                                  "define before the node",
                                  n));
        std::vector<std::string> from_inputs;
        if (auto v = imp.fold(it->second, from_inputs)) {
            known[n] = std::move(*v);
            continue;
        }
        captured.push_back(n);
        captured_vars.push_back(it->second);
    }
    return res;
}

SymbolVarArray if_op(const NodeCtx& c) {
    const onnx::GraphProto& then_g = branch_graph(c, "then_branch");
    const onnx::GraphProto& else_g = branch_graph(c, "else_branch");
    if (then_g.output_size() != else_g.output_size())
        c.invalid(fmt::format("then_branch has {} outputs, else_branch {}", then_g.output_size(),
                              else_g.output_size()));
    if (const Tensor* cond = c.constant(0)) {
        if (cond->shape().total_nr_elems() != 1)
            c.invalid(fmt::format("the condition has shape {}; expected one element",
                                  cond->shape().to_string()));
        double v = 0;
        Tensor t = cond->contiguous();
        convert_elements(t.dtype(), t.raw_ptr(), dtype::Float64(), &v, 1);
        return v != 0 ? inline_branch(c, then_g, "then_branch")
                      : inline_branch(c, else_g, "else_branch");
    }
    Importer& imp = c.importer();
    Outer outer = outer_values(c, {&then_g, &else_g});
    const auto& known = outer.known;
    const auto& captured = outer.captured;
    const auto& captured_vars = outer.captured_vars;
    // A branch that cannot be built at these shapes (a model may take it only at others: an
    // 8 kHz path fed a 16 kHz chunk) fails when it is taken, naming why.
    auto branch = [&](const onnx::GraphProto& g, const char* name) {
        try {
            return import_branch(c, g, name, captured, captured_vars, known);
        } catch (const ShapeInputError& e) {
            // A shape argument read from outer values: name the graph inputs they come from,
            // which binding makes known.
            std::vector<std::string> inputs;
            for (auto& n : e.inputs()) {
                auto it = imp.values.find(n);
                if (it != imp.values.end())
                    imp.fold(it->second, inputs);
                else if (std::find(inputs.begin(), inputs.end(), n) == inputs.end())
                    inputs.push_back(n);
            }
            throw ShapeInputError(
                fmt::format("{} (from the graph input(s) {})", e.what(), fmt::join(inputs, ", ")),
                inputs);
        } catch (const Error& e) {
            logger()->debug("{}", e.what());
            return opr::failed_branch(std::current_exception(), captured.size());
        }
    };
    opr::Subgraph then_b = branch(then_g, "then_branch");
    opr::Subgraph else_b = branch(else_g, "else_branch");
    return opr::If::make(c.in(0), captured_vars, std::move(then_b), std::move(else_b),
                         OperatorConfig(c.node().name()));
}

//! Refuses a loop whose carried values change shape across iterations: the body is imported
//! at the initial shapes, and values folded from them at import would be wrong later.
void check_carried_shapes(const NodeCtx& c, const opr::Subgraph& body, size_t nr_carried) {
    for (size_t i = 0; i < nr_carried; ++i) {
        VarNode* in = body.inputs[2 + i];
        VarNode* out = body.outputs[1 + i];
        if (!out->shape_known() || out->shape() != in->shape())
            c.unsupported(fmt::format(
                "loop-carried value {} (\"{}\") changes shape in the body ({} -> {}); braid "
                "imports a body at the shapes it starts with",
                i, in->name(), in->shape().to_string(),
                out->shape_known() ? out->shape().to_string() : "dynamic"));
    }
}

SymbolVarArray loop_op(const NodeCtx& c) {
    auto* a = c.attr("body");
    if (!a || !a->has_g()) c.invalid("attribute \"body\" (a graph) is missing");
    const onnx::GraphProto& body = a->g();
    if (c.nr_inputs() < 2) c.invalid("needs inputs M and cond (either may be empty)");
    size_t n = c.nr_inputs() - 2;
    if (body.input_size() != int(2 + n) || body.output_size() < int(1 + n))
        c.invalid(fmt::format("the body has {} inputs and {} outputs; {} loop-carried values "
                              "need {} inputs and at least {} outputs",
                              body.input_size(), body.output_size(), n, 2 + n, 1 + n));
    SymbolVar max_trip = c.has_input(0) ? c.in(0) : SymbolVar();
    SymbolVar cond = c.has_input(1) ? c.in(1) : SymbolVar();
    SymbolVarArray carried;
    std::vector<opr::SubgraphInput> inputs{{body.input(0).name(), dtype::Int64(), TensorShape{}},
                                           {body.input(1).name(), dtype::Bool(), TensorShape{}}};
    for (size_t i = 0; i < n; ++i) {
        carried.push_back(c.in(2 + i));
        if (!carried.back().node()->shape_known())
            c.unsupported(fmt::format("loop-carried value {} has a dynamic shape", i));
        inputs.push_back(
            {body.input(int(2 + i)).name(), carried.back().dtype(), carried.back().shape()});
    }
    Outer outer = outer_values(c, {&body});
    add_captured(inputs, outer.captured, outer.captured_vars);
    opr::Subgraph sg = import_subgraph(c, body, "body", inputs, outer.known,
                                       [&](Importer& sub, const SymbolVarArray& vars) {
                                           for (size_t i = 0; i < 2 + n; ++i)
                                               sub.values[body.input(int(i)).name()] = vars[i];
                                           for (size_t k = 0; k < outer.captured.size(); ++k)
                                               sub.values[outer.captured[k]] = vars[2 + n + k];
                                       });
    check_carried_shapes(c, sg, n);
    return opr::Loop::make(max_trip, cond, carried, outer.captured_vars, std::move(sg),
                           OperatorConfig(c.node().name()));
}

//! A Scan's body as a Loop over the scan axis: the body takes slice `i` (or `len - 1 - i` for a
//! reverse direction) of each scan input, and the stacked scan outputs are reversed and moved to
//! their axes after it. `in_axes` are normalized here.
SymbolVarArray scan_loop(const NodeCtx& c, const onnx::GraphProto& body,
                         const SymbolVarArray& states, const SymbolVarArray& scans,
                         std::vector<int64_t> in_axes, const std::vector<int64_t>& in_dirs,
                         const std::vector<int64_t>& out_axes,
                         const std::vector<int64_t>& out_dirs) {
    size_t n = states.size(), nm = scans.size(), k_out = out_axes.size();
    std::vector<opr::SubgraphInput> inputs{{"iteration", dtype::Int64(), TensorShape{}},
                                           {"cond", dtype::Bool(), TensorShape{}}};
    for (size_t i = 0; i < n; ++i) {
        if (!states[i].node()->shape_known())
            c.unsupported(fmt::format("state {} has a dynamic shape", i));
        inputs.push_back({body.input(int(i)).name(), states[i].dtype(), states[i].shape()});
    }
    int64_t len = -1;
    for (size_t j = 0; j < nm; ++j) {
        const SymbolVar& x = scans[j];
        if (!x.node()->shape_known())
            c.unsupported(fmt::format("scan input {} has a dynamic shape", j));
        int64_t rank = int64_t(x.shape().ndim());
        if (in_axes[j] < -rank || in_axes[j] >= rank)
            c.invalid(fmt::format("scan_input_axes[{}] = {} for rank {}", j, in_axes[j], rank));
        if (in_axes[j] < 0) in_axes[j] += rank;
        int64_t l = int64_t(x.shape()[size_t(in_axes[j])]);
        if (len >= 0 && l != len)
            c.invalid(fmt::format(
                "scan input {} has {} entries along its axis; scan input 0 has {}", j, l, len));
        len = l;
        inputs.push_back({fmt::format("scan_input{}", j), x.dtype(), x.shape()});
    }
    Outer outer = outer_values(c, {&body});
    add_captured(inputs, outer.captured, outer.captured_vars);
    opr::Subgraph sg = import_subgraph(
        c, body, "body", inputs, outer.known,
        [&](Importer& sub, const SymbolVarArray& vars) {
            for (size_t i = 0; i < n; ++i) sub.values[body.input(int(i)).name()] = vars[2 + i];
            SymbolVar i32 = vars[0].astype(dtype::Int32());
            for (size_t j = 0; j < nm; ++j) {
                SymbolVar at = in_dirs[j] ? opr::scalar_like(i32, double(len - 1)) - i32 : i32;
                sub.values[body.input(int(n + j)).name()] =
                    take(vars[2 + n + j], int(in_axes[j]), at);
            }
            for (size_t k = 0; k < outer.captured.size(); ++k)
                sub.values[outer.captured[k]] = vars[2 + n + nm + k];
        },
        [](const SymbolVarArray& vars, SymbolVarArray outs) {
            outs.insert(outs.begin(), vars[1]); // the condition passes through: len iterations
            return outs;
        });
    check_carried_shapes(c, sg, n);
    SymbolVarArray captured = scans;
    captured.insert(captured.end(), outer.captured_vars.begin(), outer.captured_vars.end());
    auto trips = opr::ImmutableTensor::make_scalar(c.graph(), double(len), dtype::Int64());
    SymbolVarArray outs = opr::Loop::make(trips, SymbolVar(), states, captured, std::move(sg),
                                          OperatorConfig(c.node().name()));
    for (size_t k = 0; k < k_out; ++k) {
        SymbolVar& v = outs[n + k];
        if (out_dirs[k])
            v = opr::subtensor(v, {opr::AxisIndex::slice(0, std::nullopt, std::nullopt, -1)});
        int rank = int(v.shape().ndim());
        int axis = int(out_axes[k] < 0 ? out_axes[k] + rank : out_axes[k]);
        if (axis < 0 || axis >= rank)
            c.invalid(fmt::format("scan_output_axes[{}] = {} for rank {}", k, out_axes[k], rank));
        if (axis != 0) {
            std::vector<int> perm;
            for (int d = 1; d < rank; ++d) perm.push_back(d);
            perm.insert(perm.begin() + axis, 0);
            v = opr::transpose(v, perm);
        }
    }
    return outs;
}

//! Scan: opset 9 on, scan inputs and outputs along given axes; opset 8, a batch axis 0 before
//! the sequence axis 1 on every state and scan value, and sequence_lens (input 0), which must
//! be the whole sequence. Opset 8 runs one Loop per batch entry (the batch size is known at
//! import), its results stacked along the batch axis.
SymbolVarArray scan_op(const NodeCtx& c) {
    auto* a = c.attr("body");
    if (!a || !a->has_g()) c.invalid("attribute \"body\" (a graph) is missing");
    const onnx::GraphProto& body = a->g();
    size_t first = c.opset() < 9 ? 1 : 0; // sequence_lens
    int64_t m = c.attr_int("num_scan_inputs", -1);
    if (m < 1 || size_t(m) + first > c.nr_inputs())
        c.invalid(fmt::format("num_scan_inputs {} with {} inputs", m, c.nr_inputs()));
    size_t n = c.nr_inputs() - first - size_t(m), nm = size_t(m);
    if (body.input_size() != int(n + nm) || body.output_size() < int(n))
        c.invalid(fmt::format("the body has {} inputs and {} outputs; {} states and {} scan "
                              "inputs need {} inputs",
                              body.input_size(), body.output_size(), n, nm, n + nm));
    size_t k_out = size_t(body.output_size()) - n;
    auto ints_or = [&](const char* name, size_t count) {
        auto v = c.attr_ints(name);
        if (v.empty()) v.assign(count, 0);
        if (v.size() != count)
            c.invalid(fmt::format("{} has {} entries; expected {}", name, v.size(), count));
        return v;
    };
    SymbolVarArray states, scans;
    for (size_t i = 0; i < n; ++i) states.push_back(c.in(first + i));
    for (size_t j = 0; j < nm; ++j) scans.push_back(c.in(first + n + j));
    if (c.opset() >= 9)
        return scan_loop(c, body, states, scans, ints_or("scan_input_axes", nm),
                         ints_or("scan_input_directions", nm), ints_or("scan_output_axes", k_out),
                         ints_or("scan_output_directions", k_out));
    // Opset 8: every value has the batch axis 0.
    int64_t batch = -1, seq = -1;
    for (auto& v : states)
        if (v.node()->shape_known() && v.shape().ndim() >= 1) batch = int64_t(v.shape()[0]);
    for (auto& v : scans) {
        if (!v.node()->shape_known() || v.shape().ndim() < 2)
            c.invalid(
                fmt::format("scan input {} needs static [batch, sequence, ...] dims", v.name()));
        if ((batch >= 0 && int64_t(v.shape()[0]) != batch) ||
            (seq >= 0 && int64_t(v.shape()[1]) != seq))
            c.invalid(fmt::format("scan input {} has shape {}; the batch and sequence sizes "
                                  "differ between inputs",
                                  v.name(), v.shape().to_string()));
        batch = int64_t(v.shape()[0]), seq = int64_t(v.shape()[1]);
    }
    if (c.has_input(0))
        for (int64_t l : c.ints_input(0))
            if (l != seq)
                c.unsupported(
                    fmt::format("sequence_lens {} shorter than the sequence ({})", l, seq));
    if (batch < 1) c.unsupported("an empty batch");
    auto dirs = ints_or("directions", nm);
    std::vector<SymbolVarArray> per_entry;
    for (int64_t b = 0; b < batch; ++b) {
        auto entry = [&](const SymbolVar& v) {
            return opr::subtensor(v, {opr::AxisIndex::index(0, long(b))});
        };
        SymbolVarArray sb, xb;
        for (auto& v : states) sb.push_back(entry(v));
        for (auto& v : scans) xb.push_back(entry(v));
        per_entry.push_back(scan_loop(c, body, sb, xb, std::vector<int64_t>(nm, 0), dirs,
                                      std::vector<int64_t>(k_out, 0),
                                      std::vector<int64_t>(k_out, 0)));
    }
    SymbolVarArray outs;
    for (size_t k = 0; k < n + k_out; ++k) {
        SymbolVarArray parts;
        for (auto& e : per_entry) parts.push_back(opr::expand_dims(e[k], {0}));
        outs.push_back(opr::concat(parts, 0));
    }
    return outs;
}

} // namespace

void add_control_converters(ConverterTable& t) {
    t["If"] = if_op;
    t["Loop"] = loop_op;
    t["Scan"] = scan_op;
}

} // namespace braid::onnx_import
