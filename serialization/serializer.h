// Dumping a graph to a model file and loading it back (format: serialization/model.fbs).
//
//     braid::dump({y}, "mlp.braid");                       // any graph built with the C++ API
//     auto model = braid::load("mlp.braid");               // graph + named inputs and outputs
//     auto exec = model.compile();
//     exec->feed("x", x).run();
//
// Loading checks the file before it trusts it: identifier, format version, size, checksum,
// then the flatbuffers structure, then every index, shape, dtype and size it reads. Anything
// wrong is a SerializationError that says what ("<file>: truncated: ..."), never a crash.
// Parameter tensors of a file loaded by path are used in place from a private memory mapping
// (no second copy); the mapping lives as long as any tensor that uses it.
#pragma once

#include "graph/computing_graph.h"
#include "graph/executable.h"
#include "graph/loaded_model.h"
#include "graph/param_io.h"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace braid {

//! The format version this build writes; it reads every version with the same major.
constexpr uint16_t MODEL_FORMAT_MAJOR = 1;
constexpr uint16_t MODEL_FORMAT_MINOR = 0;
//! Alignment of every parameter tensor in a model file (and of the data section).
constexpr size_t MODEL_DATA_ALIGNMENT = 64;

//! How dump() writes a model.
struct DumpOptions {
    //! Who wrote the model; stored as is.
    std::string producer = "braid";
    //! User key-values stored in the model (e.g. "source", "license").
    std::vector<std::pair<std::string, std::string>> metadata;
    //! Input shapes to record, by input name, with -1 for a dim fixed at run time (e.g.
    //! {-1, 784}); the other dims must equal the input's current shape. Inputs not named here
    //! are recorded with their current shape.
    std::map<std::string, std::vector<long>> input_shapes;
};

//! One operator of a model file, as recorded.
struct ModelOperator {
    std::string type_name;
    std::string name;
    std::string comp_node;
    uint32_t version = 0;
    std::vector<uint32_t> inputs, outputs; //!< var indices
    //! Params as display text, in the recorded order: ("mode", "ADD"), ("value", "tensor #0").
    std::vector<std::pair<std::string, std::string>> params;
};

//! One var of a model file, as recorded.
struct ModelVar {
    std::string name;
    DType dtype;
    bool shape_known = false;
    TensorShape shape;
};

//! One stored parameter tensor.
struct ModelTensor {
    DType dtype;
    TensorShape shape;
    uint64_t offset = 0; //!< from the data section's start
    uint64_t size = 0;
    uint64_t content_hash = 0;
};

//! The structure of a model file, read without building a graph (operators of types this
//! build does not know are fine here).
struct ModelDescription {
    ModelInfo info;
    std::vector<ModelVar> vars;
    std::vector<ModelOperator> operators;
    std::vector<ModelTensor> tensors;
    std::vector<ModelIO> inputs, outputs;
};

namespace fbs {
struct Model;
}
namespace serial {
struct ModelBytes;
}

/*!
 * A model's bytes, verified once, with its parameter tensors made on first use and shared by
 * every graph loaded from it. Many graphs of one model (one per request context of a service)
 * then cost one verification and one copy of the weights. Thread-safe.
 */
class ModelImage {
public:
    //! Maps the file at `path` (private, copy-on-write) and verifies it; throws
    //! SerializationError like load().
    static std::shared_ptr<ModelImage> open(const std::string& path, bool verify_integrity = true,
                                            size_t map_min_bytes = 4096);
    //! Verifies a model in memory. With `borrow`, a 64-byte aligned buffer is used in place
    //! (its tensors are read, never written): keep it alive and unchanged while the image or a
    //! graph loaded from it lives. Otherwise (or when unaligned) the bytes are copied.
    static std::shared_ptr<ModelImage> from_buffer(std::span<const uint8_t> buffer,
                                                   bool borrow = false,
                                                   bool verify_integrity = true,
                                                   size_t map_min_bytes = 4096);
    ~ModelImage();
    ModelImage(const ModelImage&) = delete;
    ModelImage& operator=(const ModelImage&) = delete;

    const ModelDescription& description() const;
    //! The file's path, or "<buffer>".
    const std::string& source() const;
    //! Bytes of the parameter tensors made so far (all of them once a graph was loaded).
    size_t weight_bytes() const;
    //! Of those, the bytes used in place from the file or buffer.
    size_t mapped_bytes() const;
    //! Parameter tensor `idx`, made on first use and shared afterwards.
    std::shared_ptr<Tensor> tensor(uint32_t idx) const;
    //! The verified flatbuffers root (for the loader).
    const fbs::Model* root() const;

private:
    ModelImage(serial::ModelBytes bytes, bool verify_integrity, size_t map_min_bytes);
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

//! Writes the graph computing `outputs` to the file at `path` (replaced atomically).
//! Throws SerializationError for an operator type without a params dumper, duplicate output
//! names, or a bad DumpOptions::input_shapes entry; Error subclasses for I/O failures.
void dump(const SymbolVarArray& outputs, const std::string& path, const DumpOptions& options = {});
//! The same, into `buffer` (replaced).
void dump(const SymbolVarArray& outputs, std::vector<uint8_t>& buffer,
          const DumpOptions& options = {});

//! Loads the model file at `path` (memory-mapped). Throws SerializationError for a file
//! that cannot be read, is not a braid model, is truncated, corrupt or tampered with, has a
//! newer major format version, or names an operator type this build does not know.
LoadedModel load(const std::string& path, const LoadOptions& options = {});
//! Loads a model from memory; the bytes are copied where needed and may be freed afterwards.
LoadedModel load(std::span<const uint8_t> buffer, const LoadOptions& options = {});
//! Builds a new graph of an image's model; its parameter tensors are the image's (shared with
//! every other graph loaded from it). LoadOptions::verify_integrity and map_min_bytes are the
//! image's.
LoadedModel load(const ModelImage& image, const LoadOptions& options = {});

//! Reads a model file's structure (verified like load(), no graph built).
ModelDescription describe_model(const std::string& path);
//! The same, from memory.
ModelDescription describe_model(std::span<const uint8_t> buffer);

} // namespace braid
