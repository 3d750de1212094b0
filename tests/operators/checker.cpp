#include "checker.h"

#include <gtest/gtest.h>

#include <algorithm>
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
    for (size_t i = 0; i < values.size(); ++i) // inputs read only for their shape are not taken
        if (exec->takes(inputs[i])) exec->feed(inputs[i], values[i]);
    exec->run();
    auto expected = c.reference(values);
    ASSERT_EQ(expected.size(), outputs.size());
    for (size_t k = 0; k < outputs.size(); ++k) {
        // Statically inferred shapes must match what the kernel produced.
        if (outputs[k].node()->shape_known()) {
            EXPECT_EQ(outputs[k].shape(), exec->output(k).shape())
                << "output " << k << ": static shape differs from the executed one";
        }
        expect_tensor_near(exec->output(k), expected[k], c.rtol, c.atol,
                           c.name + " output " + std::to_string(k));
    }
    if (c.check_grad) check_gradient(c, seed);
}

void check_gradient(const OprCase& c, uint32_t seed) {
    SCOPED_TRACE("gradient check: " + c.name);
    register_all_operators();
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
    // loss = sum_k sum(out_k * w_k) with fixed random weights w_k.
    std::vector<Tensor> weights;
    SymbolVar loss;
    for (auto& out : outputs) {
        if (!out.dtype().is_float()) continue;
        Tensor w = random_tensor(out.shape(), out.dtype(), rng, -1.0, 1.0);
        weights.push_back(w);
        SymbolVar term = opr::reduce_sum(out * opr::ImmutableTensor::make(*graph, w));
        loss = loss.valid() ? loss + term : term;
    }
    ASSERT_TRUE(loss.valid()) << "no float output to differentiate";
    std::vector<size_t> wrt_idx = c.grad_inputs;
    if (wrt_idx.empty())
        for (size_t i = 0; i < inputs.size(); ++i)
            if (inputs[i].dtype().is_float()) wrt_idx.push_back(i);
    SymbolVarArray wrt;
    for (size_t i : wrt_idx) wrt.push_back(inputs[i]);
    SymbolVarArray grads = grad(loss, wrt);
    std::vector<OutputSpec> specs{loss};
    for (auto& g : grads) specs.push_back(g);
    auto exec = graph->compile(specs);
    auto run_loss = [&]() {
        for (size_t i = 0; i < values.size(); ++i) // inputs read only for their shape are not taken
            if (exec->takes(inputs[i])) exec->feed(inputs[i], values[i]);
        exec->run();
        return exec->output(0).at(0);
    };
    run_loss();
    std::vector<Tensor> analytic;
    for (size_t k = 0; k < grads.size(); ++k) analytic.push_back(exec->output(k + 1).copy());
    for (size_t k = 0; k < wrt_idx.size(); ++k) {
        size_t i = wrt_idx[k];
        Tensor& v = values[i];
        ASSERT_EQ(analytic[k].shape(), v.shape()) << "gradient of input " << i;
        for (size_t e = 0; e < v.shape().total_nr_elems(); ++e) {
            double x0 = v.at(e);
            double h = c.grad_eps * std::max(1.0, std::abs(x0));
            store_from_double(v.dtype(), v.raw_ptr(), e, x0 + h);
            double up = run_loss();
            store_from_double(v.dtype(), v.raw_ptr(), e, x0 - h);
            double down = run_loss();
            store_from_double(v.dtype(), v.raw_ptr(), e, x0);
            double numeric = (up - down) / (2 * h);
            double got = analytic[k].at(e);
            EXPECT_NEAR(got, numeric, c.grad_atol + c.grad_rtol * std::abs(numeric))
                << c.name << ": d loss / d input " << i << " element " << e;
        }
    }
    check_gradient_batch_sizes(c, seed);
}

namespace {

//! The case's graph with loss = sum_k sum(out_k^2) / 2 (a loss with no shape of its own) and
//! the gradients of every float input, compiled; outputs: loss, then the gradients.
struct BatchGradGraph {
    SymbolVarArray inputs;
    std::unique_ptr<Executable> exec;

    BatchGradGraph(const OprCase& c, const std::vector<TensorShape>& shapes) {
        GraphOptions options;
        options.default_comp_node = c.comp_node;
        auto graph = ComputingGraph::make(options);
        for (size_t i = 0; i < shapes.size(); ++i) {
            DType dt = c.dtypes.empty() ? dtype::Float32() : c.dtypes[i];
            inputs.push_back(opr::Input::make(*graph, "in" + std::to_string(i), dt, shapes[i]));
        }
        SymbolVar loss;
        for (auto& out : c.build(inputs)) {
            if (!out.dtype().is_float()) continue;
            SymbolVar term = opr::reduce_sum(out * out) * 0.5;
            loss = loss.valid() ? loss + term : term;
        }
        SymbolVarArray wrt;
        for (size_t i = 0; i < inputs.size(); ++i)
            if (inputs[i].dtype().is_float() &&
                (c.grad_inputs.empty() ||
                 std::count(c.grad_inputs.begin(), c.grad_inputs.end(), i)))
                wrt.push_back(inputs[i]);
        std::vector<OutputSpec> specs{loss};
        for (auto& g : grad(loss, wrt)) specs.push_back(g);
        exec = graph->compile(specs);
    }

    std::vector<Tensor> run(const std::vector<Tensor>& values) {
        for (size_t i = 0; i < values.size(); ++i) // inputs read only for their shape are not taken
            if (exec->takes(inputs[i])) exec->feed(inputs[i], values[i]);
        exec->run();
        std::vector<Tensor> res;
        for (size_t k = 0; k < exec->nr_outputs(); ++k) res.push_back(exec->output(k).copy());
        return res;
    }
};

} // namespace

void check_gradient_batch_sizes(const OprCase& c, uint32_t seed) {
    if (!c.fixed_batch.empty() || c.shapes.empty() || c.shapes[0].ndim() == 0) return;
    SCOPED_TRACE("gradient at other batch sizes: " + c.name);
    size_t lead = c.shapes[0][0];
    if (lead == 1) return; // a dim of 1 broadcasts: it is not a free batch dim
    std::unique_ptr<BatchGradGraph> built;
    try {
        built = std::make_unique<BatchGradGraph>(c, c.shapes);
    } catch (const Error&) {
        return; // e.g. a graph whose loss has a non-float output only
    }
    for (size_t batch : {lead + 1, lead + 3}) {
        std::vector<TensorShape> shapes = c.shapes;
        for (auto& s : shapes)
            if (s.ndim() > 0 && s[0] == lead) s[0] = batch;
        std::unique_ptr<BatchGradGraph> fresh;
        try {
            fresh = std::make_unique<BatchGradGraph>(c, shapes);
        } catch (const Error&) {
            return; // the case's graph does not build at another batch size: no free batch dim
        }
        std::mt19937 rng(seed + uint32_t(batch));
        std::vector<Tensor> values;
        for (size_t i = 0; i < shapes.size(); ++i) {
            DType dt = c.dtypes.empty() ? dtype::Float32() : c.dtypes[i];
            Tensor v(shapes[i], dt);
            if (c.fill)
                c.fill(rng, v, i);
            else
                v = random_tensor(shapes[i], dt, rng, c.low, c.high);
            values.push_back(v);
        }
        auto expected = fresh->run(values);
        std::vector<Tensor> got;
        try {
            got = built->run(values);
        } catch (const std::exception& e) {
            ADD_FAILURE() << c.name << ": the graph built at batch " << lead
                          << " fails when fed batch " << batch << ": " << e.what();
            return;
        }
        ASSERT_EQ(got.size(), expected.size());
        for (size_t k = 0; k < got.size(); ++k)
            expect_tensor_near(got[k], expected[k], 1e-5, 1e-6,
                               c.name + (k ? " gradient " + std::to_string(k - 1) : " loss") +
                                   " at batch " + std::to_string(batch) + " (built at " +
                                   std::to_string(lead) + ")");
    }
}

} // namespace braid::test
