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

//! What a tool run by run_tool() did.
struct ToolResult {
    int status = -1; //!< exit status; -1 when killed by a signal
    std::string out, err;
    //! Lines on stderr.
    size_t err_lines() const;
};

//! `s` quoted for the shell.
std::string shell_quote(const std::string& s);
//! Runs `binary` with `args` through the shell and captures stdout and stderr; `env` holds
//! arguments of env(1) for that run only (NAME=VALUE, or -u NAME to unset one).
ToolResult run_tool(const std::string& binary, const std::vector<std::string>& args,
                    const std::vector<std::string>& env = {});

//! The outputs of examples/models/dp_allreduce.braid, in order.
extern const std::vector<std::string> DP_OUTPUTS;
//! Writes fixed inputs of dp_allreduce.braid into `dir` (x.npy float32 {8,16}, label.npy
//! int32 {8}) and returns braid-run's --input flags for them: every rank gets the same data.
std::vector<std::string> write_dp_inputs(const TempDir& dir);
//! Expects each output NAME.npy of DP_OUTPUTS in `dir` to be exactly `factor` times the same
//! file in `base_dir` (sums of equal values are exact).
void expect_scaled_outputs(const std::string& base_dir, const std::string& dir, float factor);

//! Reads a whole file.
std::vector<uint8_t> read_file(const std::string& path);
//! Writes a whole file.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);

} // namespace braid::test
