// The example models (examples/models/*.braid builders) on cuda0 give the cpu0 results within
// tolerance.
#include "cuda_checker.h"

#include "tools/example_models.h"

using namespace braid;
using namespace braid::test;

namespace {

std::vector<Tensor> run_model_on(const examples::ExampleModel& model, const std::string& cn,
                                 const Tensor& x) {
    register_all_operators();
    GraphOptions options;
    options.default_comp_node = cn;
    auto graph = ComputingGraph::make(options);
    SymbolVarArray outs = model.build(*graph);
    auto exec = graph->compile(std::vector<OutputSpec>(outs.begin(), outs.end()));
    exec->feed("x", x).run();
    std::vector<Tensor> values;
    for (size_t i = 0; i < outs.size(); ++i) values.push_back(exec->output(i).copy());
    return values;
}

} // namespace

TEST(CudaModels, ExampleModelsMatchTheCpu) {
    BRAID_REQUIRE_CUDA();
    for (auto& model : examples::example_models()) {
        if (model.name != "mlp" && model.name != "transformer_block") continue; // no collectives
        SCOPED_TRACE(model.name);
        ASSERT_TRUE(model.build) << model.pending;
        // The input shape the model was built with, from a CPU build of it.
        register_all_operators();
        auto probe = ComputingGraph::make();
        model.build(*probe);
        TensorShape shape;
        for (auto& opr : probe->operators())
            if (auto* in = dynamic_cast<InputNode*>(opr.get()); in && in->input_name() == "x")
                shape = in->output(0)->shape();
        ASSERT_GT(shape.ndim(), 0u);
        std::mt19937 rng(7);
        Tensor x = random_tensor(shape, dtype::Float32(), rng, -1.0, 1.0);
        auto cpu = run_model_on(model, "cpu0", x);
        auto gpu = run_model_on(model, "cuda0", x);
        ASSERT_EQ(cpu.size(), gpu.size());
        for (size_t i = 0; i < cpu.size(); ++i)
            expect_tensor_near(gpu[i], cpu[i], 1e-3, 1e-4,
                               model.name + " output " + std::to_string(i));
    }
}
