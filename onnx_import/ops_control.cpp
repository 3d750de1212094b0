// Control flow converters: If. A condition known at import (a constant, a folded value, a
// bound input) keeps only the taken branch, whose nodes join the enclosing graph; otherwise the
// node becomes braid's If operator with both branches imported as graphs of their own, reading
// the outer values they use through Input vars (no copy at run time).
#include "onnx_import/onnx_internal.h"

#include "base/log.h"
#include "onnx_import/op_util.h"
#include "operators/control_flow.h"

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

//! A branch imported as a graph of its own; `captured` names the outer values it may read as
//! Input vars (in the If's input order), `known` the outer values known at import.
opr::Branch import_branch(const NodeCtx& c, const onnx::GraphProto& g, const char* branch,
                          const std::vector<std::string>& captured,
                          const SymbolVarArray& captured_vars,
                          const std::map<std::string, Tensor>& known) {
    Importer& imp = c.importer();
    return in_branch(c, branch, [&] {
        return opr::make_branch(
            *imp.graph, captured_vars,
            [&](ComputingGraph& bg, const SymbolVarArray& inputs) {
                Importer sub;
                sub.graph = &bg;
                sub.source = imp.source;
                sub.dir = imp.dir;
                sub.opset = imp.opset;
                sub.model = imp.model;
                sub.constants = known;
                for (size_t i = 0; i < captured.size(); ++i) sub.values[captured[i]] = inputs[i];
                for (auto& t : g.initializer())
                    sub.constants[t.name()] =
                        tensor_of(t, imp.dir, imp.source + ": initializer", &imp.external);
                sub.convert_nodes(g);
                SymbolVarArray outs;
                for (auto& out : g.output())
                    outs.push_back(
                        sub.output_var(out.name(), fmt::format("{}: {} output \"{}\"", c.where(),
                                                               branch, out.name())));
                return outs;
            },
            captured);
    });
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
    // The outer values either branch reads: those known at import are copied in as constants
    // (so that the branch folds what depends on them), the others are the If's inputs.
    Importer& imp = c.importer();
    std::vector<std::string> names = outer_names(then_g);
    for (auto& n : outer_names(else_g))
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    std::map<std::string, Tensor> known;
    std::vector<std::string> captured;
    SymbolVarArray captured_vars;
    for (auto& n : names) {
        if (auto it = imp.constants.find(n); it != imp.constants.end()) {
            known[n] = it->second;
            continue;
        }
        if (imp.sequences.count(n))
            c.unsupported(fmt::format("a branch reads the sequence \"{}\" of the enclosing "
                                      "graph (only tensors)",
                                      n));
        auto it = imp.values.find(n);
        if (it == imp.values.end())
            c.invalid(fmt::format("a branch reads \"{}\", which the enclosing graph does not "
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
    opr::Branch then_b = branch(then_g, "then_branch");
    opr::Branch else_b = branch(else_g, "else_branch");
    return opr::If::make(c.in(0), captured_vars, std::move(then_b), std::move(else_b),
                         OperatorConfig(c.node().name()));
}

} // namespace

void add_control_converters(ConverterTable& t) {
    t["If"] = if_op;
}

} // namespace braid::onnx_import
