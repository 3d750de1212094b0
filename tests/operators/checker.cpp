#include "checker.h"

#include <gtest/gtest.h>

#include <cmath>

namespace braid::test {

Tensor random_tensor(const TensorShape& shape, DType dtype, std::mt19937& rng, double low,
                     double high) {
    Tensor t(shape, dtype);
    std::uniform_real_distribution<double> dist(low, high);
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) {
        double v = dist(rng);
        if (!dtype.is_float()) v = std::round(v);
        store_from_double(dtype, t.raw_ptr(), i, v);
    }
    return t;
}

Tensor make_tensor(const TensorShape& shape, const std::vector<float>& values) {
    Tensor t(shape, dtype::Float32());
    EXPECT_EQ(values.size(), shape.total_nr_elems());
    for (size_t i = 0; i < values.size() && i < shape.total_nr_elems(); ++i)
        t.ptr<float>()[i] = values[i];
    return t;
}

void expect_tensor_near(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                        const std::string& what) {
    ASSERT_EQ(actual.shape(), expected.shape()) << what << ": shape " << actual.shape().to_string()
                                                << " vs expected " << expected.shape().to_string();
    ASSERT_EQ(actual.dtype(), expected.dtype()) << what << ": dtype " << actual.dtype().name()
                                                << " vs expected " << expected.dtype().name();
    size_t n = actual.shape().total_nr_elems();
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
        double a = actual.at(i), e = expected.at(i);
        bool ok = (std::isnan(a) && std::isnan(e)) || a == e ||
                  std::abs(a - e) <= atol + rtol * std::abs(e);
        if (!ok && bad++ < 5)
            ADD_FAILURE() << what << ": element " << i << " is " << a << ", expected " << e;
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements differ";
}

void check_operator(const OprCase& c, uint32_t seed) {
    SCOPED_TRACE("operator case: " + c.name);
    std::mt19937 rng(seed);
    GraphOptions options;
    options.default_comp_node = c.comp_node;
    auto graph = ComputingGraph::make(options);
    SymbolVarArray inputs;
    std::vector<Tensor> values;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
        DType dt = c.dtypes.empty() ? dtype::Float32() : c.dtypes[i];
        inputs.push_back(opr::Input::make(*graph, "in" + std::to_string(i), dt, c.shapes[i]));
        Tensor v(c.shapes[i], dt);
        if (c.fill)
            c.fill(rng, v, i);
        else
            v = random_tensor(c.shapes[i], dt, rng, c.low, c.high);
        values.push_back(v);
    }
    SymbolVarArray outputs = c.build(inputs);
    std::vector<OutputSpec> specs(outputs.begin(), outputs.end());
    auto exec = graph->compile(specs);
    for (size_t i = 0; i < values.size(); ++i) exec->feed(inputs[i], values[i]);
    exec->run();
    auto expected = c.reference(values);
    ASSERT_EQ(expected.size(), outputs.size());
    for (size_t k = 0; k < outputs.size(); ++k) {
        // Statically inferred shapes must match what the kernel produced.
        if (outputs[k].node()->shape_known())
            EXPECT_EQ(outputs[k].shape(), exec->output(k).shape())
                << "output " << k << ": static shape differs from the executed one";
        expect_tensor_near(exec->output(k), expected[k], c.rtol, c.atol,
                           c.name + " output " + std::to_string(k));
    }
}

} // namespace braid::test
