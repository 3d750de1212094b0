// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0; C order; little-
// endian): float64, float32, float16, int8, uint8, int32, int64 and bool.
//
// Errors are SerializationError naming the file and what is wrong: a Fortran-order array, an
// unsupported dtype (with the dtype seen), a malformed header, a short data section.
#pragma once

#include "memory/tensor.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace braid {

//! Reads the .npy file at `path` into a host tensor.
Tensor read_npy(const std::string& path);
//! Parses .npy bytes; `source` names them in messages.
Tensor parse_npy(std::span<const uint8_t> bytes, const std::string& source);

//! Writes `tensor` (host memory; any layout) as a .npy file (format 1.0, or 2.0 when the
//! header needs it). Throws SerializationError for bfloat16, which .npy cannot express.
void write_npy(const std::string& path, const Tensor& tensor);
//! The .npy bytes of `tensor`.
std::vector<uint8_t> encode_npy(const Tensor& tensor);

//! The .npy dtype descriptor of `dtype` ("<f4", "|b1", ...); empty when it has none.
std::string npy_descr(DType dtype);

} // namespace braid
