#include "helpers.h"

#include "serialization/npy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

namespace braid::test {

TempDir::TempDir() {
    static std::atomic<int> counter{0};
    m_path = std::filesystem::temp_directory_path() /
             ("braid_serial_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(m_path);
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
}

Tensor random_input(const TensorShape& shape, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    Tensor t(shape, dtype::Float32());
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t.ptr<float>()[i] = dist(rng);
    return t;
}

std::vector<Tensor> run_copy(Executable& exec,
                             const std::vector<std::pair<std::string, Tensor>>& inputs,
                             size_t nr_outputs) {
    for (auto& [name, value] : inputs) exec.feed(name, value);
    exec.run();
    std::vector<Tensor> res;
    for (size_t i = 0; i < nr_outputs; ++i) res.push_back(exec.output(i).copy());
    return res;
}

bool bit_identical(const Tensor& a, const Tensor& b) {
    if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
    Tensor ca = a.contiguous(), cb = b.contiguous();
    return ca.nr_bytes() == 0 || std::memcmp(ca.raw_ptr(), cb.raw_ptr(), ca.nr_bytes()) == 0;
}

size_t ToolResult::err_lines() const {
    return size_t(std::count(err.begin(), err.end(), '\n'));
}

std::string shell_quote(const std::string& s) {
    std::string r = "'";
    for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return r + "'";
}

ToolResult run_tool(const std::string& binary, const std::vector<std::string>& args,
                    const std::vector<std::string>& env) {
    TempDir scratch;
    std::string cmd = env.empty() ? "" : "env ";
    for (auto& e : env) cmd += shell_quote(e) + " ";
    cmd += shell_quote(binary);
    for (auto& a : args) cmd += " " + shell_quote(a);
    std::string out = scratch.file("stdout"), err = scratch.file("stderr");
    cmd += " > " + shell_quote(out) + " 2> " + shell_quote(err);
    int raw = std::system(cmd.c_str());
    ToolResult r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    auto o = read_file(out), e = read_file(err);
    r.out.assign(o.begin(), o.end());
    r.err.assign(e.begin(), e.end());
    return r;
}

const std::vector<std::string> DP_OUTPUTS = {"loss", "grad_w1", "grad_b1", "grad_w2", "grad_b2"};

std::vector<std::string> write_dp_inputs(const TempDir& dir) {
    write_npy(dir.file("x.npy"), random_input({8, 16}, 31));
    Tensor label(TensorShape{8}, dtype::Int32());
    for (int i = 0; i < 8; ++i) label.ptr<int32_t>()[i] = (i * 3) % 10;
    write_npy(dir.file("label.npy"), label);
    return {"--input", "x=" + dir.file("x.npy"), "--input", "label=" + dir.file("label.npy")};
}

void expect_scaled_outputs(const std::string& base_dir, const std::string& dir, float factor) {
    for (auto& name : DP_OUTPUTS) {
        SCOPED_TRACE(name);
        Tensor base = read_npy(base_dir + "/" + name + ".npy");
        Tensor scaled = read_npy(dir + "/" + name + ".npy");
        ASSERT_EQ(scaled.shape(), base.shape());
        ASSERT_EQ(scaled.dtype(), dtype::Float32());
        size_t n = base.shape().total_nr_elems(), nonzero = 0;
        for (size_t i = 0; i < n; ++i) {
            float b = base.ptr<float>()[i];
            nonzero += b != 0.f;
            ASSERT_EQ(scaled.ptr<float>()[i], factor * b) << "element " << i;
        }
        EXPECT_GT(nonzero, 0u); // a zero output would pass for any factor
    }
}

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

} // namespace braid::test
