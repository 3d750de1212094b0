// Internal to serialization/: the model bytes (a file mapping or a copy) and the checks that
// run before anything in them is trusted. Includes the flatbuffers code generated from
// model.fbs; nothing outside serialization/ includes this header.
#pragma once

#include "serialization/model_generated.h"
#include "serialization/serializer.h"

#include <cstdint>
#include <memory>
#include <string>

namespace braid::serial {

//! The bytes of a model file and what keeps them alive.
struct ModelBytes {
    const uint8_t* data = nullptr;
    size_t size = 0;
    //! Owns the mapping or the copied bytes.
    std::shared_ptr<void> keep_alive;
    //! True when `data` is a private file mapping that tensors may use in place.
    bool mapped = false;
    //! The file's path, or "<buffer>", for messages.
    std::string source;
};

//! Maps the file at `path` (private, copy-on-write). Throws SerializationError when it
//! cannot be opened, is not a regular file, or is empty.
ModelBytes map_file(const std::string& path);
//! Copies `buffer` into 64-byte aligned memory.
ModelBytes copy_buffer(std::span<const uint8_t> buffer);

//! Runs every file-level check in order (size, identifier, header, version, file size,
//! checksum, flatbuffers structure, data section bounds) and returns the verified root.
//! Throws SerializationError naming `bytes.source` and what is wrong.
const fbs::Model* check_model(const ModelBytes& bytes, bool verify_integrity);

//! xxHash64 of `size` bytes with the 8 bytes at `checksum_at` (an offset) read as zero.
uint64_t model_checksum(const uint8_t* data, size_t size, size_t checksum_at);

//! The offset of the Model's checksum field within the buffer (header verified), SIZE_MAX
//! when the field is absent.
size_t checksum_field_offset(const uint8_t* data);

//! Throws SerializationError naming `what` unless the 8-byte elements of `vec` (may be null)
//! are 8-byte aligned: the flatbuffers verifier only checks the 4-byte length prefix. (An
//! empty list may sit anywhere: the builder does not align what it never reads.)
template <typename T>
void check_aligned(const flatbuffers::Vector<T>* vec, const std::string& what) {
    if (vec && vec->size() && reinterpret_cast<uintptr_t>(vec->data()) % alignof(T) != 0)
        BRAID_THROW(SerializationError, "{}: corrupt: a list of {}-byte values is misaligned", what,
                    sizeof(T));
}

//! Reads a DType stored as a byte; throws SerializationError naming `what` when invalid.
DType dtype_from_file(uint8_t value, const std::string& what);
//! Reads a stored shape (at most MAX_NDIM non-negative dims; -1 allowed when `allow_open`).
std::vector<long> dims_from_file(const flatbuffers::Vector<int64_t>* dims, bool allow_open,
                                 const std::string& what);
//! A concrete shape from stored dims (no -1), in bounds for `dtype` (TensorShape::packed_bytes);
//! throws SerializationError naming `what`.
TensorShape shape_from_file(const flatbuffers::Vector<int64_t>* dims, DType dtype,
                            const std::string& what);
//! A stored string, "" when absent.
inline std::string str(const flatbuffers::String* s) {
    return s ? s->str() : std::string();
}

//! Reads the structure of verified model bytes (shared by describe_model() and load()).
ModelDescription describe_verified(const ModelBytes& bytes, const fbs::Model* model);

} // namespace braid::serial
