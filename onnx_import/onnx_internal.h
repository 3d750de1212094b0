// What the importer's files share: the state of one import and the context a node's
// converter sees.
#pragma once

#include "onnx_import/onnx_import.h"

#include "graph/symbol_var.h"
#include "serialization/format.h"

#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <optional>
#include <set>

namespace braid::onnx_import {

//! The braid dtype of an ONNX TensorProto data type; UnsupportedOnnxError naming `where`.
DType dtype_of(int32_t onnx_type, const std::string& where);
//! External data files of one import, each mapped once (copy-on-write); a tensor of at least
//! 4 KiB at a 64-byte aligned offset is used in place, as braid's own files are.
struct ExternalData {
    std::map<std::string, serial::ModelBytes> files;
    size_t mapped_bytes = 0; //!< bytes used in place
};

//! A TensorProto's value as a host tensor (raw_data, typed fields or external data in `dir`,
//! through `external` when given, else read with a copy).
Tensor tensor_of(const onnx::TensorProto& t, const std::string& dir, const std::string& where,
                 ExternalData* external = nullptr);

class Importer;

//! One node being converted: its inputs, known constant values and attributes.
class NodeCtx {
public:
    NodeCtx(Importer& imp, const onnx::NodeProto& node, int64_t opset)
        : m_imp(imp), m_node(node), m_opset(opset) {}

    const onnx::NodeProto& node() const { return m_node; }
    int64_t opset() const { return m_opset; }
    ComputingGraph& graph() const;
    //! "model.onnx: node "n1" (Conv, opset 13)", for messages.
    std::string where() const;

    size_t nr_inputs() const { return size_t(m_node.input_size()); }
    //! Whether input i is given (optional inputs may be absent or named "").
    bool has_input(size_t i) const { return i < nr_inputs() && !m_node.input(int(i)).empty(); }
    SymbolVar in(size_t i) const;
    //! The var of the graph value named `name` (an input, initializer or earlier output).
    SymbolVar value_of(const std::string& name) const;
    //! Input i as a sequence of tensors, which import knows element by element (built inside
    //! the model, or a graph input of a length fixed when the model runs).
    const std::vector<SymbolVar>& sequence(size_t i) const;
    //! Records output i as a sequence.
    void set_sequence_output(size_t i, std::vector<SymbolVar> elements) const;
    //! Whether input i is a sequence.
    bool is_sequence(size_t i) const;
    //! Whether input i is an optional without a value (known at import: an optional input of
    //! the graph bound to none, or the output of an Optional node without an input).
    bool is_none(size_t i) const;
    //! Records output i as an optional without a value.
    void set_none_output(size_t i) const;
    //! Output `out` is input `in`, whatever it holds (a tensor, a sequence, no value).
    void forward(size_t in, size_t out) const;
    //! The value of input i when it is known at import time (an initializer or a constant).
    const Tensor* constant(size_t i) const;
    //! The same; when the value depends on graph inputs, their names are added to `inputs`.
    const Tensor* constant(size_t i, std::vector<std::string>& inputs) const;
    //! Input i's value, which must be known at import time: otherwise a ShapeInputError when
    //! it is computed from graph inputs, else an UnsupportedOnnxError.
    const Tensor& constant_input(size_t i) const;
    //! Input i's value as integers (floats are truncated); known at import time.
    std::vector<int64_t> ints_input(size_t i) const;
    //! Input i's value as floats; known at import time.
    std::vector<float> floats_input(size_t i) const;

    bool has_attr(const std::string& name) const { return attr(name) != nullptr; }
    int64_t attr_int(const std::string& name, int64_t def) const;
    float attr_float(const std::string& name, float def) const;
    std::string attr_string(const std::string& name, const std::string& def) const;
    std::vector<int64_t> attr_ints(const std::string& name) const;
    const onnx::AttributeProto* attr(const std::string& name) const;

    //! Records output `i`'s value as known at import time (later nodes may read it as a
    //! constant input) and returns its var.
    SymbolVar known_output(size_t i, Tensor value) const;

    //! Throws UnsupportedOnnxError naming the node and `what`.
    [[noreturn]] void unsupported(const std::string& what) const;
    //! Throws SerializationError naming the node and `what`.
    [[noreturn]] void invalid(const std::string& what) const;
    //! The import this node belongs to (control flow imports its branches from it).
    Importer& importer() const { return m_imp; }

private:
    Importer& m_imp;
    const onnx::NodeProto& m_node;
    int64_t m_opset;
};

//! Converts one node to the braid vars of its outputs (in order; a missing optional output
//! may be left out at the end).
using Converter = std::function<SymbolVarArray(const NodeCtx&)>;
//! The converter of `op_type`, or null.
const Converter* find_converter(const std::string& op_type);
//! Every op type with a converter, sorted.
std::vector<std::string> converter_names();

//! The state of one import.
class Importer {
public:
    ComputingGraph* graph = nullptr;
    std::string source; //!< the file's path, or "<buffer>", for messages
    std::string dir;    //!< folder of external data files
    ExternalData external;
    std::map<std::string, SymbolVar> values;
    std::map<std::string, Tensor> constants;
    //! Sequence values, element by element.
    std::map<std::string, std::vector<SymbolVar>> sequences;
    //! Optional values without a value.
    std::set<std::string> nones;
    //! Whatever one name holds: a var, a value known at import, a sequence, or no value.
    struct Value {
        std::optional<SymbolVar> var;
        std::optional<Tensor> constant;
        std::optional<std::vector<SymbolVar>> elements;
        bool none = false;
        bool defined() const { return var || constant || elements || none; }
    };
    Value value(const std::string& name) const;
    void set_value(const std::string& name, const Value& v);
    //! The value `from` under the name `to` as well.
    void alias(const std::string& from, const std::string& to) { set_value(to, value(from)); }
    //! An importer of a nested scope in the same graph (a subgraph inlined, once or per
    //! element or iteration): it sees every value of this one, and what it defines stays its
    //! own.
    std::unique_ptr<Importer> nested() const;
    //! Makes (or finds) the constant var of a known value.
    SymbolVar constant_var(const std::string& name);
    //! The value of `var` when it can be known at import: inferred statically by braid, or
    //! computed now because it depends on constants only (constant folding). Null when it
    //! depends on graph inputs; their names are added to `inputs`.
    std::optional<Tensor> fold(SymbolVar var, std::vector<std::string>& inputs);

    int64_t opset = 0;                       //!< of the default domain
    const onnx::ModelProto* model = nullptr; //!< for the operator sets it imports
    //! Converts the nodes of `g` (the model's graph or a branch) into `graph`, in order,
    //! recording their outputs in `values`, `constants` and `sequences`.
    void convert_nodes(const onnx::GraphProto& g);
    //! The var of the value `name` as a graph's output; `what` names it in errors.
    SymbolVar output_var(const std::string& name, const std::string& what);
};

} // namespace braid::onnx_import
