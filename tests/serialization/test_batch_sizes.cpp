// Example models fed other sizes of their free dims: the model file (saved at its build size),
// and the graph it was saved from, must compute what a graph built at the fed size computes.
// Training graphs (grad()) included: no gradient rule may bake the build-time shapes.
#include "helpers.h"
#include "tools/example_models.h"

#include <gtest/gtest.h>

using namespace braid;
using namespace braid::test;

namespace {

//! A builder of one example model at free-dim size `n`.
using SizedBuilder = std::function<SymbolVarArray(ComputingGraph&, size_t n)>;

opr::Group solo_group() {
    opr::Group solo;
    solo.key_prefix = "dp";
    solo.rank = 0;
    solo.client =
        std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
    return solo;
}

//! The example models with a free dim, each with a builder at another size of it.
std::vector<std::pair<std::string, SizedBuilder>> sized_builders() {
    return {
        {"mlp", [](ComputingGraph& g, size_t n) { return examples::build_mlp(g, n); }},
        {"mlp_wide",
         [](ComputingGraph& g, size_t n) { return examples::build_mlp(g, n, 784, 4096); }},
        {"transformer_block",
         [](ComputingGraph& g, size_t n) { return examples::build_transformer_block(g, n); }},
        {"dp_allreduce", [](ComputingGraph& g,
                            size_t n) { return examples::build_dp_allreduce(g, solo_group(), n); }},
    };
}

//! Inputs of `model` with every free dim (-1) set to `n`: floats in [-1, 1), int32 class
//! labels in [0, 10).
std::vector<std::pair<std::string, Tensor>> inputs_at(const LoadedModel& model, size_t n) {
    std::vector<std::pair<std::string, Tensor>> inputs;
    for (size_t i = 0; i < model.inputs.size(); ++i) {
        auto& io = model.inputs[i];
        std::vector<size_t> dims;
        for (long d : io.shape) dims.push_back(d < 0 ? n : size_t(d));
        TensorShape shape(dims);
        Tensor value = random_input(shape, uint32_t(100 + n + i));
        if (io.dtype == dtype::Int32()) {
            value = Tensor(shape, dtype::Int32());
            for (size_t k = 0; k < shape.total_nr_elems(); ++k)
                value.ptr<int32_t>()[k] = int32_t((k * 7 + n) % 10);
        }
        inputs.emplace_back(io.name, value);
    }
    return inputs;
}

void expect_close(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected,
                  const std::string& what) {
    ASSERT_EQ(actual.size(), expected.size()) << what;
    for (size_t k = 0; k < actual.size(); ++k) {
        ASSERT_EQ(actual[k].shape(), expected[k].shape()) << what << " output " << k;
        size_t bad = 0;
        for (size_t e = 0; e < expected[k].shape().total_nr_elems(); ++e) {
            double a = actual[k].at(e), x = expected[k].at(e);
            if (std::abs(a - x) > 1e-5 + 1e-4 * std::abs(x) && bad++ < 3)
                ADD_FAILURE() << what << " output " << k << " element " << e << ": " << a
                              << ", expected " << x;
        }
        EXPECT_EQ(bad, 0u) << what << " output " << k;
    }
}

} // namespace

TEST(FreeDims, ExampleModelsFollowThreeOtherSizesLikeGraphsBuiltAtThem) {
    register_all_operators();
    auto builders = sized_builders();
    size_t checked = 0;
    for (auto& m : examples::example_models()) {
        if (!m.build) continue;
        bool free_dim = false;
        for (auto& [name, dims] : m.dump_options.input_shapes)
            for (long d : dims) free_dim |= d < 0;
        if (!free_dim) continue;
        SCOPED_TRACE(m.name);
        auto it = std::find_if(builders.begin(), builders.end(),
                               [&](auto& b) { return b.first == m.name; });
        ASSERT_NE(it, builders.end())
            << "example model " << m.name << " has a free dim but no sized builder in this test";
        auto g = ComputingGraph::make();
        auto outputs = m.build(*g);
        std::vector<uint8_t> bytes;
        dump(outputs, bytes, m.dump_options);
        auto loaded = load(bytes);
        auto from_file = loaded.compile();
        std::vector<OutputSpec> specs(outputs.begin(), outputs.end());
        auto in_memory = g->compile(specs);
        for (size_t n : {1, 7, 13}) {
            std::string what = m.name + " at size " + std::to_string(n);
            auto inputs = inputs_at(loaded, n);
            auto fresh_graph = ComputingGraph::make();
            auto fresh_outputs = it->second(*fresh_graph, n);
            std::vector<OutputSpec> fresh_specs(fresh_outputs.begin(), fresh_outputs.end());
            auto fresh = fresh_graph->compile(fresh_specs);
            auto expected = run_copy(*fresh, inputs, fresh_outputs.size());
            expect_close(run_copy(*from_file, inputs, outputs.size()), expected,
                         what + " (model file)");
            expect_close(run_copy(*in_memory, inputs, outputs.size()), expected,
                         what + " (graph it was saved from)");
        }
        ++checked;
    }
    EXPECT_EQ(checked, builders.size());
}
