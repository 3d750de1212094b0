#include "cuda_checker.h"

#include <algorithm>

namespace braid::test {

OprCase make_case(std::string name, std::vector<TensorShape> shapes, std::vector<DType> dtypes,
                  std::function<SymbolVarArray(const SymbolVarArray&)> build) {
    OprCase c;
    c.name = std::move(name);
    c.shapes = std::move(shapes);
    c.dtypes = std::move(dtypes);
    c.build = std::move(build);
    return c;
}

void set_tolerance(OprCase& c, DType dt, double f32_rtol, double f32_atol) {
    if (dt == dtype::Float16()) {
        c.rtol = std::max(2e-3, f32_rtol);
        c.atol = std::max(1e-3, f32_atol);
    } else if (dt == dtype::BFloat16()) {
        c.rtol = std::max(1.6e-2, f32_rtol);
        c.atol = std::max(1e-2, f32_atol);
    } else if (dt.is_float()) {
        c.rtol = f32_rtol;
        c.atol = f32_atol;
    } else {
        c.rtol = c.atol = 0;
    }
}

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
    // An input whose shape alone is read (symshape) is not an input of the executable.
    for (size_t i = 0; i < values.size(); ++i)
        if (exec->takes(inputs[i])) exec->feed(inputs[i], values[i]);
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
