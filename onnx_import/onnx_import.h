// Importing ONNX models: an ONNX file (or its bytes) becomes a braid graph with named inputs
// and outputs, the same LoadedModel that serialization/ gives for braid's own files.
//
//     auto model = braid::onnx_import::import_file("resnet.onnx");
//     auto exec = model.compile();
//
// Parsing, checking and the upgrade of old opsets are the ONNX library's (onnx::checker,
// onnx::version_conversion); shapes are braid's own static inference. Models below opset 13 are
// upgraded to 13 where the ONNX converter can; each ONNX node then becomes one braid operator or a
// composition of them (onnx_import/ops.cpp; docs/onnx.md lists them). Initializers become
// constants, symbolic dims ("N", "batch") dims fixed when the model runs.
//
// Errors are SerializationErrors naming the file and, for a node, its name, op type and
// opset; an op or dtype braid does not support is an UnsupportedOnnxError.
#pragma once

#include "serialization/serializer.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>

namespace onnx {
class ModelProto;
}

namespace braid::onnx_import {

//! A file's model as its first import checked and upgraded it, without its initializers' data
//! or its top-level Constant nodes' values (those are in ImportOptions::initializers). Later
//! imports of the file start from it: no parsing, checking or version conversion again (the
//! converter runs in a child process).
struct PreparedModel {
    std::mutex mutex;
    std::shared_ptr<const onnx::ModelProto> model; //!< null until an import fills it
    int64_t opset = 0;                             //!< the opset `model` is imported at
};

//! An ONNX op, attribute or dtype that braid does not support (yet).
class UnsupportedOnnxError : public SerializationError {
public:
    using SerializationError::SerializationError;
};

//! A node that cannot be built from its inputs and attributes (a shape, dtype or size its op
//! does not fit). When the shapes came from placeholder sizes of symbolic dims, the fed shapes
//! may still fit.
class NodeError : public SerializationError {
public:
    using SerializationError::SerializationError;
};

//! A graph input that an op reads as a shape, axes, sizes or scales argument (a *shape input*).
//! braid infers shapes before it runs, so such an input's value must be known when the model is
//! imported: bind it with ImportOptions::input_values (`--bind NAME=V,...` on the command line).
//! The bound input is then a constant, no longer an input of the graph.
class ShapeInputError : public UnsupportedOnnxError {
public:
    ShapeInputError(const std::string& msg, std::vector<std::string> inputs)
        : UnsupportedOnnxError(msg), m_inputs(std::move(inputs)) {}
    //! The graph inputs whose values are needed.
    const std::vector<std::string>& inputs() const { return m_inputs; }

private:
    std::vector<std::string> m_inputs;
};

//! How a model is imported.
struct ImportOptions {
    //! Options of the new graph.
    GraphOptions graph_options;
    //! Every operator runs on this comp node (default: the graph's default).
    std::string comp_node;
    //! Concrete shapes for inputs, by name (symbolic dims otherwise become 1 until fed).
    std::map<std::string, TensorShape> input_shapes;
    //! Values bound to inputs at import (shape inputs, see ShapeInputError); a bound input
    //! becomes a constant of the graph and is not listed among the model's inputs.
    std::map<std::string, Tensor> input_values;
    //! Sequence inputs (ONNX `sequence(tensor)`), by name: the shapes of their elements. A
    //! sequence input of k elements becomes the k graph inputs element_name(name, 0..k-1); one
    //! not named here is an error naming it (its length is fixed when the model runs).
    std::map<std::string, std::vector<TensorShape>> sequence_inputs;
    //! Optional inputs bound to no value; an optional input not named here is given its value.
    std::set<std::string> none_inputs;
    //! A sequence output of the graph becomes one output per element, element_name(name, i),
    //! and an optional output without a value none (the embedding API gathers them back).
    //! Otherwise the model's outputs must be tensors.
    bool sequence_outputs = false;
    //! Run ONNX's version converter in a child process (a crash on a hostile file is then an
    //! error of that file). The ONNX fuzzer turns it off, to find such crashes (and to fork
    //! less), so that the importer's own checks steer around them.
    bool isolate_version_converter = true;
    //! The decoded initializers (and top-level Constant nodes' values, where `prepared` is set)
    //! of one file, shared by its imports: the first import fills it,
    //! later ones take their weights from it instead of decoding them again, so that imports of
    //! one model at several shapes or shape-input values hold one copy of the weights.
    std::shared_ptr<std::map<std::string, Tensor>> initializers;
    //! The checked and upgraded model of one file, shared by its imports (with `initializers`,
    //! which must then be set too): the first import fills it, later ones start from it.
    std::shared_ptr<PreparedModel> prepared;
};

//! The graph input or output that stands for element `i` of the sequence `name`: "name[i]".
std::string element_name(const std::string& name, size_t i);

//! What an ONNX file declares without importing its nodes: its inputs (not initializers, not
//! bound in `input_values`) and outputs, each with its kind, dtype and dims (-1 for a symbolic
//! or unknown dim; any_shape when the file gives no shape). The vars are invalid.
struct DeclaredIO {
    std::vector<ModelIO> inputs, outputs;
};
DeclaredIO declared_io(const std::string& path, const ImportOptions& options = {});

//! Imports the ONNX model file at `path` (external data files are read from its folder). With
//! `declared`, what the file declares (declared_io) is written there first, from the same
//! parse, also when the import then fails.
LoadedModel import_file(const std::string& path, const ImportOptions& options = {},
                        DeclaredIO* declared = nullptr);
//! Imports an ONNX model from memory; `source` names it in messages.
LoadedModel import_bytes(std::span<const uint8_t> bytes, const ImportOptions& options = {},
                         const std::string& source = "<buffer>");
//! Whether `path` names an ONNX file (by its extension, ".onnx").
bool is_onnx_path(const std::string& path);
//! The ONNX ops the importer maps, sorted.
std::vector<std::string> supported_ops();

} // namespace braid::onnx_import
