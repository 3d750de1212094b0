// Shared helpers of the serialization tests.
#pragma once

#include "braid.h"

#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace braid::test {

//! A fresh directory under the system temp dir, removed with the object.
class TempDir {
public:
    TempDir();
    ~TempDir();
    const std::filesystem::path& path() const { return m_path; }
    std::string file(const std::string& name) const { return (m_path / name).string(); }

private:
    std::filesystem::path m_path;
};

//! Uniform random float32 tensor in [-1, 1).
Tensor random_input(const TensorShape& shape, uint32_t seed);

//! Runs `exec` once after feeding `inputs` (by name) and returns copies of every output.
std::vector<Tensor> run_copy(Executable& exec,
                             const std::vector<std::pair<std::string, Tensor>>& inputs,
                             size_t nr_outputs);

//! True when both tensors have the same dtype, shape and bytes.
bool bit_identical(const Tensor& a, const Tensor& b);

//! Reads a whole file.
std::vector<uint8_t> read_file(const std::string& path);
//! Writes a whole file.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);

} // namespace braid::test
