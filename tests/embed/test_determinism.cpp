// Deterministic mode (docs/determinism.md) through the embedding API: a row's output is the same
// bits alone or in a batch of 3, 7 or 64, with 1 or 3 kernel threads, on cpu:default or cpu0;
// and a causal transformer block's first positions are the same bits for any sequence length.
// Bitwise, not to a tolerance: that is the promise.
#include "base/thread_pool.h"
#include "braid.h"
#include "braid/embed.h"
#include "embed/embed_internal.h"
#include "helpers.h"
#include "tests/support/random_floats.h"
#include "tools/example_models.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

using namespace braid;
using braid::testing::random_floats;
namespace em = braid::embed;

namespace {

//! A model file in a fresh temporary folder, removed at the end of the test.
struct ModelFile {
    std::filesystem::path dir, path;
    ModelFile(const std::function<SymbolVarArray(ComputingGraph&)>& build, const DumpOptions& opt) {
        dir = std::filesystem::temp_directory_path() /
              ("braid_determinism_" + std::to_string(getpid()) + "_" +
               std::to_string(reinterpret_cast<uintptr_t>(this)));
        std::filesystem::create_directories(dir);
        path = dir / "model.braid";
        auto g = ComputingGraph::make();
        std::vector<uint8_t> bytes;
        dump(build(*g), bytes, opt);
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
    ~ModelFile() { std::filesystem::remove_all(dir); }
};

//! A small conv net: convolution, relu, a strided depthwise convolution, the spatial mean, layer
//! norm, a matmul with bias and softmax; input "x" {N, 3, 12, 12}, output "y" {N, 10}.
SymbolVarArray build_cnn(ComputingGraph& g) {
    auto param = [&](TensorShape shape, uint32_t seed, const char* name) {
        return opr::SharedParam::make(g, std::make_shared<Tensor>(test::random_input(shape, seed)),
                                      name);
    };
    auto x = opr::Input::make(g, "x", dtype::Float32(), {4, 3, 12, 12});
    opr::Conv2dParam same;
    same.pad_h = same.pad_w = 1;
    auto h = opr::relu(opr::Conv2d::make(x, param({16, 3, 3, 3}, 1, "w1"), same));
    opr::Conv2dParam depthwise = same;
    depthwise.groups = 16;
    depthwise.stride_h = depthwise.stride_w = 2;
    h = opr::Conv2d::make(h, param({16, 1, 3, 3}, 2, "w2"), depthwise);
    h = opr::layer_norm(opr::reduce_mean(h, {2, 3}));
    auto y = opr::softmax(opr::matmul(h, param({16, 10}, 3, "w3")) + param({10}, 4, "b3"));
    return {y.rename("y")};
}

//! Runs rows [first, first + batch) of `x` (rows of `row` floats) and returns the output.
std::vector<float> run_rows(em::Context& ctx, const std::string& in, const std::string& out,
                            const std::vector<float>& x, std::vector<int64_t> row_shape,
                            size_t first, size_t batch, const em::RunOptions& opt) {
    size_t row = 1;
    for (auto d : row_shape) row *= size_t(d);
    row_shape.insert(row_shape.begin(), int64_t(batch));
    ctx.set_input(in, x.data() + first * row, em::DType::FLOAT32, row_shape);
    ctx.run(opt);
    auto o = ctx.output(out);
    auto* p = static_cast<const float*>(o.data);
    return {p, p + o.bytes / sizeof(float)};
}

//! Every row of batches of 1, 3, 7 and 64, at 1 and 3 kernel threads, on cpu:default and cpu0,
//! in deterministic mode, equals (bitwise) that row run alone.
void expect_rows_invariant(const ModelFile& file, const std::string& in, const std::string& out,
                           const std::vector<int64_t>& row_shape) {
    size_t saved = kernel_threads();
    set_kernel_threads(3); // splits work three ways even on a machine of two cores
    size_t row = 1;
    for (auto d : row_shape) row *= size_t(d);
    auto x = random_floats(64 * row, 7);
    em::RunOptions det;
    det.deterministic = true;
    det.max_threads = 1;
    // Each row alone, one thread: the reference.
    auto solo = em::open_model(file.path.string(), em::load_options({}))->create_context();
    std::vector<std::vector<float>> alone;
    for (size_t r = 0; r < 64; ++r)
        alone.push_back(run_rows(*solo, in, out, x, row_shape, r, 1, det));
    size_t out_row = alone[0].size();
    for (std::string comp_node : {"cpu:default", "cpu0"}) {
        LoadOptions lopt = em::load_options({});
        lopt.comp_node = comp_node;
        auto ctx = em::open_model(file.path.string(), lopt)->create_context();
        for (size_t threads : {1, 3})
            for (size_t batch : {1, 3, 7, 64}) {
                det.max_threads = threads;
                size_t first = batch == 64 ? 0 : 5;
                auto y = run_rows(*ctx, in, out, x, row_shape, first, batch, det);
                ASSERT_EQ(y.size(), batch * out_row);
                for (size_t r = 0; r < batch; ++r)
                    EXPECT_EQ(std::memcmp(y.data() + r * out_row, alone[first + r].data(),
                                          out_row * sizeof(float)),
                              0)
                        << comp_node << ", " << threads << " threads, batch " << batch << ", row "
                        << first + r;
            }
    }
    set_kernel_threads(saved);
}

TEST(Determinism, AnMlpRowIsTheSameBitsInEveryBatchThreadCountAndCompNode) {
    DumpOptions opt;
    opt.input_shapes["x"] = {-1, 784};
    ModelFile file([](ComputingGraph& g) { return examples::build_mlp(g, 4, 784, 256, 10); }, opt);
    expect_rows_invariant(file, "x", "logits", {784});
}

TEST(Determinism, AConvNetRowIsTheSameBitsInEveryBatchThreadCountAndCompNode) {
    DumpOptions opt;
    opt.input_shapes["x"] = {-1, 3, 12, 12};
    ModelFile file(build_cnn, opt);
    expect_rows_invariant(file, "x", "y", {3, 12, 12});
}

TEST(Determinism, ACausalBlocksFirstPositionsAreTheSameBitsForAnySequenceLength) {
    // Position i of a causal block sees positions 0..i only; the masked ones add exact zeros.
    DumpOptions opt;
    opt.input_shapes["x"] = {-1, 64};
    ModelFile file(
        [](ComputingGraph& g) { return examples::build_transformer_block(g, 8, 64, 2, 128); }, opt);
    size_t saved = kernel_threads();
    set_kernel_threads(3);
    auto x = random_floats(96 * 64, 11);
    em::RunOptions det;
    det.deterministic = true;
    auto ctx = em::open_model(file.path.string(), em::load_options({}))->create_context();
    auto full = run_rows(*ctx, "x", "y", x, {64}, 0, 96, det);
    for (size_t threads : {1, 3})
        for (size_t seq : {1, 3, 7, 64}) {
            det.max_threads = threads;
            auto y = run_rows(*ctx, "x", "y", x, {64}, 0, seq, det);
            ASSERT_EQ(y.size(), seq * 64);
            for (size_t r = 0; r < seq; ++r)
                EXPECT_EQ(std::memcmp(y.data() + r * 64, full.data() + r * 64, 64 * 4), 0)
                    << threads << " threads, length " << seq << ", position " << r;
        }
    set_kernel_threads(saved);
}

} // namespace
