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

//! Whether a value is true (its first element is not zero).
bool truth(const Tensor& t) {
    double v = 0;
    Tensor c = t.contiguous();
    convert_elements(c.dtype(), c.raw_ptr(), dtype::Float64(), &v, 1);
    return v != 0;
}

//! Whether a graph declares a sequence or an optional among its outputs.
bool declares_sequence_or_optional(const onnx::GraphProto& g) {
    for (auto& out : g.output())
        if (out.type().has_sequence_type() || out.type().has_optional_type()) return true;
    return false;
}

//! The taken branch of an If whose condition is known: its nodes join the enclosing graph, and
//! its outputs (tensors, sequences or optionals) become the If's.
SymbolVarArray inline_branch(const NodeCtx& c, const onnx::GraphProto& g, const char* branch) {
    Importer& imp = c.importer();
    return in_subgraph(c, branch, [&] {
        for (auto& t : g.initializer())
            imp.constants[t.name()] =
                tensor_of(t, imp.dir, imp.source + ": initializer", &imp.external);
        imp.convert_nodes(g);
        for (int k = 0; k < g.output_size() && k < c.node().output_size(); ++k) {
            const std::string& name = g.output(k).name();
            if (!imp.value(name).defined())
                imp.output_var(name, fmt::format("{}: {} output \"{}\"", c.where(), branch, name));
            if (!c.node().output(k).empty()) imp.alias(name, c.node().output(k));
        }
        return SymbolVarArray{};
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
    return in_subgraph(c, label, [&] {
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
    // Sequences and optionals are known at import, so an If giving them takes its branch at
    // import: its condition is then read like a shape input (ShapeInputError).
    const Tensor* cond =
        declares_sequence_or_optional(then_g) || declares_sequence_or_optional(else_g)
            ? &c.constant_input(0)
            : c.constant(0);
    if (cond) {
        if (cond->shape().total_nr_elems() != 1)
            c.invalid(fmt::format("the condition has shape {}; expected one element",
                                  cond->shape().to_string()));
        return truth(*cond) ? inline_branch(c, then_g, "then_branch")
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

//! Why a loop's carried values cannot keep one body (empty when they can): one changes shape
//! across iterations, and the body is imported at the initial shapes (values folded from them
//! at import would be wrong later).
std::string carried_shape_change(const opr::Subgraph& body, size_t nr_carried) {
    for (size_t i = 0; i < nr_carried; ++i) {
        VarNode* in = body.inputs[2 + i];
        VarNode* out = body.outputs[1 + i];
        if (!out->shape_known() || out->shape() != in->shape())
            return fmt::format("loop-carried value {} (\"{}\") changes shape in the body ({} -> "
                               "{})",
                               i, in->name(), in->shape().to_string(),
                               out->shape_known() ? out->shape().to_string() : "dynamic");
    }
    return {};
}

//! Refuses a Scan whose states change shape (carried_shape_change).
void check_carried_shapes(const NodeCtx& c, const opr::Subgraph& body, size_t nr_carried) {
    std::string change = carried_shape_change(body, nr_carried);
    if (!change.empty())
        c.unsupported(change + "; braid imports a body at the shapes it starts with");
}

//! Most iterations a Loop is unrolled to at import.
constexpr int64_t MAX_UNROLLED_ITERATIONS = 4096;

/*!
 * A Loop run at import: its body imported once per iteration into the enclosing graph, for the
 * loops braid's Loop operator cannot take (sequences or optionals carried or read, carried
 * tensors that change shape). The trip count and the condition must be known at import (read
 * like shape inputs when they come from graph inputs), and so must each condition the body
 * computes. Scan outputs are stacked after the last iteration.
 */
SymbolVarArray unrolled_loop(const NodeCtx& c, const onnx::GraphProto& body, const char* why) {
    Importer& imp = c.importer();
    size_t n = c.nr_inputs() - 2, k_out = size_t(body.output_size()) - 1 - n;
    std::optional<int64_t> trips;
    if (c.has_input(0)) trips = c.ints_input(0).at(0);
    bool cond = !c.has_input(1) || truth(c.constant_input(1));
    std::vector<Importer::Value> state;
    for (size_t k = 0; k < n; ++k) {
        state.push_back(imp.value(c.node().input(int(2 + k))));
        if (!state.back().defined()) c.in(2 + k); // the error naming it
    }
    std::vector<SymbolVarArray> scans(k_out);
    for (int64_t i = 0; cond && (!trips || i < *trips); ++i) {
        if (i == MAX_UNROLLED_ITERATIONS)
            c.unsupported(fmt::format("{}: such a loop is unrolled at import, up to {} "
                                      "iterations",
                                      why, MAX_UNROLLED_ITERATIONS));
        auto scope = imp.nested();
        Tensor iteration(TensorShape{}, dtype::Int64()), now(TensorShape{}, dtype::Bool());
        iteration.ptr<int64_t>()[0] = i;
        now.ptr<bool>()[0] = true;
        scope->set_value(body.input(0).name(), {.constant = iteration});
        scope->set_value(body.input(1).name(), {.constant = now});
        for (size_t k = 0; k < n; ++k) scope->set_value(body.input(int(2 + k)).name(), state[k]);
        for (auto& t : body.initializer())
            scope->constants[t.name()] = tensor_of(t, imp.dir, imp.source + ": initializer");
        in_subgraph(c, fmt::format("body, iteration {}", i), [&] {
            scope->convert_nodes(body);
            auto out = [&](int k) {
                Importer::Value v = scope->value(body.output(k).name());
                if (!v.defined())
                    scope->output_var(body.output(k).name(),
                                      fmt::format("body output \"{}\"", body.output(k).name()));
                return v;
            };
            Importer::Value next = out(0);
            std::vector<std::string> from;
            std::optional<Tensor> known =
                next.constant ? next.constant
                              : (next.var ? scope->fold(*next.var, from) : std::nullopt);
            if (!known)
                c.unsupported(fmt::format("{}: such a loop is unrolled at import, and the "
                                          "condition its body computes depends on values known "
                                          "only when the model runs",
                                          why));
            cond = truth(*known);
            for (size_t k = 0; k < n; ++k) state[k] = out(int(1 + k));
            for (size_t k = 0; k < k_out; ++k)
                scans[k].push_back(scope->output_var(
                    body.output(int(1 + n + k)).name(),
                    fmt::format("body output \"{}\"", body.output(int(1 + n + k)).name())));
        });
    }
    for (size_t k = 0; k < n; ++k)
        if (!c.node().output(int(k)).empty()) imp.set_value(c.node().output(int(k)), state[k]);
    for (size_t k = 0; k < k_out; ++k) {
        if (c.node().output(int(n + k)).empty()) continue;
        if (scans[k].empty())
            c.unsupported(fmt::format("{}: such a loop is unrolled at import, and no iteration "
                                      "ran, so scan output {} has no shape",
                                      why, k));
        SymbolVarArray parts;
        for (auto& v : scans[k]) parts.push_back(opr::expand_dims(v, {0}));
        imp.values[c.node().output(int(n + k))] =
            parts.size() == 1 ? parts[0] : opr::concat(parts, 0);
    }
    return {};
}

//! Why a Loop needs unrolling at import (empty when braid's Loop takes it): a sequence or
//! optional carried or read from the enclosing graph.
std::string unroll_reason(const NodeCtx& c, const onnx::GraphProto& body) {
    for (size_t k = 2; k < c.nr_inputs(); ++k)
        if (c.is_sequence(k) || c.is_none(k))
            return fmt::format("loop-carried value {} is a sequence or an optional", k - 2);
    Importer& imp = c.importer();
    for (auto& name : outer_names(body))
        if (imp.sequences.count(name) || imp.nones.count(name))
            return fmt::format("the body reads the sequence or optional \"{}\"", name);
    return {};
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
    if (std::string why = unroll_reason(c, body); !why.empty())
        return unrolled_loop(c, body, why.c_str());
    SymbolVar max_trip = c.has_input(0) ? c.in(0) : SymbolVar();
    SymbolVar cond = c.has_input(1) ? c.in(1) : SymbolVar();
    SymbolVarArray carried;
    std::vector<opr::SubgraphInput> inputs{{body.input(0).name(), dtype::Int64(), TensorShape{}},
                                           {body.input(1).name(), dtype::Bool(), TensorShape{}}};
    for (size_t i = 0; i < n; ++i) {
        carried.push_back(c.in(2 + i));
        if (!carried.back().node()->shape_known())
            return unrolled_loop(
                c, body, fmt::format("loop-carried value {} has a dynamic shape", i).c_str());
        inputs.push_back(
            {body.input(int(2 + i)).name(), carried.back().dtype(), carried.back().shape()});
    }
    Outer outer = outer_values(c, {&body});
    add_captured(inputs, outer.captured, outer.captured_vars);
    std::optional<opr::Subgraph> sg;
    try {
        sg = import_subgraph(c, body, "body", inputs, outer.known,
                             [&](Importer& sub, const SymbolVarArray& vars) {
                                 for (size_t i = 0; i < 2 + n; ++i)
                                     sub.values[body.input(int(i)).name()] = vars[i];
                                 for (size_t k = 0; k < outer.captured.size(); ++k)
                                     sub.values[outer.captured[k]] = vars[2 + n + k];
                             });
    } catch (const ShapeInputError& e) {
        // A shape argument the body computes from the iteration number or a carried value (a
        // slice at the iteration number): known in each iteration of the loop unrolled.
        for (auto& name : e.inputs())
            for (size_t i = 0; i < 2 + n; ++i)
                if (name == body.input(int(i)).name())
                    return unrolled_loop(
                        c, body,
                        fmt::format("the body reads \"{}\" as a shape argument", name).c_str());
        throw;
    }
    // A carried value that changes shape: unrolled at import instead.
    if (std::string change = carried_shape_change(*sg, n); !change.empty())
        return unrolled_loop(c, body, change.c_str());
    return opr::Loop::make(max_trip, cond, carried, outer.captured_vars, std::move(*sg),
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
