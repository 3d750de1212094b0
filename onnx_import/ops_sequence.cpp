// ONNX sequence and optional ops → braid: a sequence is known at import element by element (a
// list of vars: built inside the model, or a graph input imported per length), so SequenceInsert,
// SequenceAt, ConcatFromSequence and the rest are list operations at import time, and SequenceMap
// imports its body once per element. Whether an optional holds a value is known at import too.
// Positions must be known at import.
#include "op_util.h"

#include "operators/concat_split.h"
#include "operators/io.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

namespace braid::onnx_import {

using namespace braid::opr;

namespace {

//! A position into a sequence of `size` elements (negative counts from the end); `end` allows
//! position == size (insertion at the back).
size_t position(const NodeCtx& c, size_t input, size_t size, bool end) {
    int64_t p = c.ints_input(input).at(0), n = int64_t(size);
    if (p < -n || p > n || (p == n && !end))
        c.invalid(fmt::format("position {} is outside a sequence of {} elements", p, n));
    return size_t(p < 0 ? p + n : p);
}

SymbolVarArray sequence_empty(const NodeCtx& c) {
    c.set_sequence_output(0, {});
    return {};
}

SymbolVarArray sequence_construct(const NodeCtx& c) {
    std::vector<SymbolVar> elements;
    for (size_t i = 0; i < c.nr_inputs(); ++i) elements.push_back(c.in(i));
    c.set_sequence_output(0, elements);
    return {};
}

SymbolVarArray sequence_insert(const NodeCtx& c) {
    auto elements = c.sequence(0);
    size_t at = c.has_input(2) ? position(c, 2, elements.size(), true) : elements.size();
    elements.insert(elements.begin() + long(at), c.in(1));
    c.set_sequence_output(0, elements);
    return {};
}

SymbolVarArray sequence_erase(const NodeCtx& c) {
    auto elements = c.sequence(0);
    if (elements.empty()) c.invalid("erasing from an empty sequence");
    size_t at = c.has_input(1) ? position(c, 1, elements.size(), false) : elements.size() - 1;
    elements.erase(elements.begin() + long(at));
    c.set_sequence_output(0, elements);
    return {};
}

SymbolVarArray sequence_at(const NodeCtx& c) {
    const auto& elements = c.sequence(0);
    return one(elements.at(position(c, 1, elements.size(), false)));
}

SymbolVarArray sequence_length(const NodeCtx& c) {
    Tensor t(TensorShape{}, dtype::Int64());
    t.ptr<int64_t>()[0] = int64_t(c.sequence(0).size());
    return one(c.known_output(0, t));
}

SymbolVarArray concat_from_sequence(const NodeCtx& c) {
    const auto& elements = c.sequence(0);
    if (elements.empty()) c.invalid("concatenating an empty sequence");
    bool new_axis = c.attr_int("new_axis", 0) != 0;
    size_t rank = rank_of(c, elements[0]) + (new_axis ? 1 : 0);
    int axis = norm_axis(c, c.attr_int("axis", 0), rank);
    SymbolVarArray parts;
    for (auto& e : elements) parts.push_back(new_axis ? expand_dims(e, {axis}) : e);
    return one(parts.size() == 1 ? parts[0] : concat(parts, axis));
}

SymbolVarArray split_to_sequence(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    int axis = norm_axis(c, c.attr_int("axis", 0), rank);
    size_t dim = x.shape()[size_t(axis)];
    std::vector<size_t> sizes;
    bool keep = true;
    if (c.has_input(1)) {
        auto v = c.ints_input(1);
        if (c.constant_input(1).shape().ndim() == 0) { // one chunk size; the last may be shorter
            if (v.at(0) <= 0) c.invalid(fmt::format("split size {} is not positive", v[0]));
            for (size_t done = 0; done < dim; done += size_t(v[0]))
                sizes.push_back(std::min(size_t(v[0]), dim - done));
        } else {
            for (int64_t s : v) {
                if (s < 0) c.invalid(fmt::format("negative split size {}", s));
                sizes.push_back(size_t(s));
            }
        }
    } else {
        // Chunks of 1; keepdims 0 drops the split axis.
        sizes.assign(dim, 1);
        keep = c.attr_int("keepdims", 1) != 0;
    }
    SymbolVarArray parts = sizes.size() == 1 ? SymbolVarArray{x} : split(x, axis, sizes);
    std::vector<SymbolVar> elements;
    for (auto& p : parts) elements.push_back(keep ? p : squeeze(p, {axis}));
    c.set_sequence_output(0, elements);
    return {};
}

//! SequenceMap: the body imported once per element of the first input, in the enclosing graph;
//! sequence inputs give the body their element at that position, tensor inputs themselves.
SymbolVarArray sequence_map(const NodeCtx& c) {
    auto* a = c.attr("body");
    if (!a || !a->has_g()) c.invalid("attribute \"body\" (a graph) is missing");
    const onnx::GraphProto& body = a->g();
    if (body.input_size() != int(c.nr_inputs()) || body.output_size() != c.node().output_size())
        c.invalid(fmt::format("the body has {} inputs and {} outputs; the node {} and {}",
                              body.input_size(), body.output_size(), c.nr_inputs(),
                              c.node().output_size()));
    size_t n = c.sequence(0).size();
    for (size_t k = 1; k < c.nr_inputs(); ++k)
        if (c.is_sequence(k) && c.sequence(k).size() != n)
            c.invalid(fmt::format("input {} has {} elements; input 0 has {}", k,
                                  c.sequence(k).size(), n));
    std::vector<std::vector<SymbolVar>> outs(size_t(body.output_size()));
    for (size_t i = 0; i < n; ++i) {
        auto scope = c.importer().nested();
        for (size_t k = 0; k < c.nr_inputs(); ++k)
            scope->values[body.input(int(k)).name()] =
                c.is_sequence(k) ? c.sequence(k)[i] : c.in(k);
        for (auto& t : body.initializer())
            scope->constants[t.name()] = tensor_of(t, scope->dir, scope->source + ": initializer");
        in_subgraph(c, fmt::format("body, element {}", i), [&] {
            scope->convert_nodes(body);
            for (int k = 0; k < body.output_size(); ++k)
                outs[size_t(k)].push_back(scope->output_var(
                    body.output(k).name(),
                    fmt::format("{}: body output \"{}\"", c.where(), body.output(k).name())));
        });
    }
    for (size_t k = 0; k < outs.size(); ++k) c.set_sequence_output(k, outs[k]);
    return {};
}

//! Optional: its input as it is (a tensor or a sequence), or no value without one.
SymbolVarArray optional_op(const NodeCtx& c) {
    if (c.has_input(0))
        c.forward(0, 0);
    else
        c.set_none_output(0);
    return {};
}

SymbolVarArray optional_has_element(const NodeCtx& c) {
    Tensor t(TensorShape{}, dtype::Bool());
    t.ptr<bool>()[0] = c.has_input(0) && !c.is_none(0);
    return one(c.known_output(0, t));
}

SymbolVarArray optional_get_element(const NodeCtx& c) {
    if (c.is_none(0)) c.invalid("the optional input has no value");
    c.forward(0, 0);
    return {};
}

} // namespace

void add_sequence_converters(ConverterTable& t) {
    t["SequenceEmpty"] = sequence_empty;
    t["SequenceConstruct"] = sequence_construct;
    t["SequenceInsert"] = sequence_insert;
    t["SequenceErase"] = sequence_erase;
    t["SequenceAt"] = sequence_at;
    t["SequenceLength"] = sequence_length;
    t["ConcatFromSequence"] = concat_from_sequence;
    t["SplitToSequence"] = split_to_sequence;
    t["SequenceMap"] = sequence_map;
    t["Optional"] = optional_op;
    t["OptionalHasElement"] = optional_has_element;
    t["OptionalGetElement"] = optional_get_element;
}

} // namespace braid::onnx_import
