// A model loaded into a graph, whichever format it came from (braid's own, serialization/; ONNX,
// onnx_import/): the graph, its named inputs and outputs, and facts about the file; and the
// options every loader takes. The embedding API (embed/) is the one place that picks the
// format and loads a model; everything above it runs models through it.
#pragma once

#include "graph/computing_graph.h"
#include "graph/executable.h"
#include "graph/param_io.h"

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace braid {

//! How a model is loaded (either format) into a graph.
struct LoadOptions {
    //! Options of the new graph.
    GraphOptions graph_options;
    //! When set, every operator runs on this comp node (e.g. "cpu:default"); otherwise on the
    //! comp node recorded in the model.
    std::string comp_node;
    //! Input shapes to build the graph with, by input name; each must agree with the shape the
    //! model records (-1 dims free). Inputs not named here take their recorded default shape.
    std::map<std::string, TensorShape> input_shapes;
    //! Rank, world size, server and backend of collective operators.
    CollectiveBinding collective;
    //! Further load-time values handed to every operator's loader.
    std::map<std::string, std::string> bindings;
    //! ONNX models only: values bound to shape inputs at import (onnx_import::ShapeInputError);
    //! a bound input becomes a constant and leaves the model's inputs.
    std::map<std::string, Tensor> input_values;
    //! Tensors of at least this many bytes are used in place from a mapped file; smaller ones
    //! are copied.
    size_t map_min_bytes = 4096;
    //! Check the file size and checksum. Turn off only to exercise the structural checks
    //! (fuzzing): a file with a bad checksum is then still verified, never trusted blindly.
    bool verify_integrity = true;
};

//! What a model input or output holds. braid's own models hold tensors; ONNX models may also
//! take and give sequences of tensors and optional values (docs/onnx.md).
enum class ValueKind { TENSOR, SEQUENCE, OPTIONAL, OPTIONAL_SEQUENCE };

//! "tensor", "sequence", "optional" or "optional sequence".
const char* value_kind_name(ValueKind kind);
//! Whether a value of `kind` is a sequence (maybe optional).
inline bool holds_sequence(ValueKind kind) {
    return kind == ValueKind::SEQUENCE || kind == ValueKind::OPTIONAL_SEQUENCE;
}
//! Whether a value of `kind` may be absent.
inline bool is_optional(ValueKind kind) {
    return kind == ValueKind::OPTIONAL || kind == ValueKind::OPTIONAL_SEQUENCE;
}

//! A named model input or output.
struct ModelIO {
    std::string name;
    DType dtype;
    //! The recorded shape; -1 marks a dim fixed at run time.
    std::vector<long> shape;
    //! A sequence's dtype and shape are those of its elements; an optional's, of its value.
    ValueKind kind = ValueKind::TENSOR;
    //! No shape is recorded (an ONNX sequence element or optional value without one): any
    //! shape fits.
    bool any_shape = false;
    //! Inputs: the concrete shape the model was built with. Outputs: the recorded shape.
    TensorShape default_shape;
    //! The var in the loaded graph (invalid in a ModelDescription).
    SymbolVar var;

    //! Whether `actual` fits `shape` (same rank, equal fixed dims; anything when any_shape).
    bool accepts(const TensorShape& actual) const;
    //! "{-1,784}" ("any" when any_shape).
    std::string shape_string() const;
};

//! Facts about a model file.
struct ModelInfo {
    uint16_t format_major = 0, format_minor = 0;
    std::string producer;
    std::vector<std::pair<std::string, std::string>> metadata;
    size_t file_size = 0;
    size_t nr_operators = 0;
    size_t nr_vars = 0;
    size_t nr_tensors = 0;   //!< distinct parameter tensors stored
    size_t tensor_bytes = 0; //!< their bytes
    size_t mapped_bytes = 0; //!< bytes used in place from the mapped file (load only)
    uint64_t checksum = 0;
};

//! A loaded model: the graph, its inputs and outputs by name, and facts about the file.
struct LoadedModel {
    std::shared_ptr<ComputingGraph> graph;
    std::vector<ModelIO> inputs;
    std::vector<ModelIO> outputs;
    //! ONNX models imported with onnx_import::ImportOptions::sequence_outputs: per sequence
    //! output of the model, by name, the indices in `outputs` of its elements; and the optional
    //! outputs without a value (no entry in `outputs`).
    std::map<std::string, std::vector<size_t>> sequence_outputs;
    std::set<std::string> none_outputs;
    ModelInfo info;

    //! The input named `name`; throws GraphError listing the inputs when there is none.
    const ModelIO& input(const std::string& name) const;
    //! The output named `name`; throws GraphError listing the outputs when there is none.
    const ModelIO& output(const std::string& name) const;
    //! Compiles every output, in the model's order.
    std::unique_ptr<Executable> compile() const;
};

} // namespace braid
