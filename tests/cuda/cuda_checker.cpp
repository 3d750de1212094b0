#include "cuda_checker.h"

namespace braid::test {

std::vector<Tensor> run_case_on(const OprCase& c, const std::string& cn,
                                const std::vector<Tensor>& values) {
    GraphOptions options;
    options.default_comp_node = cn;
    auto graph = ComputingGraph::make(options);
    SymbolVarArray inputs;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
        DType dt = c.dtypes.empty() ? dtype::Float32() : c.dtypes[i];
        inputs.push_back(opr::Input::make(*graph, "in" + std::to_string(i), dt, c.shapes[i]));
    }
    SymbolVarArray outputs = c.build(inputs);
    std::vector<OutputSpec> specs(outputs.begin(), outputs.end());
    auto exec = graph->compile(specs);
    for (size_t i = 0; i < values.size(); ++i) exec->feed(inputs[i], values[i]);
    exec->run();
    std::vector<Tensor> res;
    for (size_t k = 0; k < outputs.size(); ++k) res.push_back(exec->output(k).copy());
    return res;
}

void check_cuda_matches_cpu(const OprCase& c, uint32_t seed) {
    register_all_operators();
    OprCase on_cuda = c;
    on_cuda.comp_node = "cuda0";
    on_cuda.check_grad = false;
    on_cuda.reference = [c](const std::vector<Tensor>& values) {
        return run_case_on(c, "cpu0", values);
    };
    check_operator(on_cuda, seed);
}

} // namespace braid::test
