#include "helpers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
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
    return std::memcmp(ca.raw_ptr(), cb.raw_ptr(), ca.nr_bytes()) == 0;
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
