// ONNX's training ops (domain ai.onnx.preview.training: Adagrad, Momentum, Adam and Gradient)
// and the signal windows (Hann, Hamming, Blackman), as braid compositions. The optimizers follow
// the update rules of ONNX's operator definitions; Gradient is braid's autodiff.
#include "op_util.h"

#include "graph/grad.h"
#include "operators/elemwise.h"
#include "operators/reduce.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

namespace braid::onnx_import {

using namespace braid::opr;

namespace {

constexpr const char* TRAINING = "ai.onnx.preview.training.";

//! The number of tensors each optimizer input group holds: (inputs - 2) / groups.
size_t nr_tensors(const NodeCtx& c, size_t groups) {
    size_t n = c.nr_inputs() >= 2 ? (c.nr_inputs() - 2) / groups : 0;
    if (n == 0 || c.nr_inputs() != 2 + groups * n ||
        size_t(c.node().output_size()) != (groups - 1) * n)
        c.invalid(fmt::format("{} inputs and {} outputs do not fit R, T and {} groups of tensors",
                              c.nr_inputs(), c.node().output_size(), groups));
    return n;
}

SymbolVar scalar_f32(SymbolVar v) {
    v = v.reshape(std::vector<long>{});
    return v.dtype() == dtype::Float32() ? v : TypeCvt::make(v, dtype::Float32());
}

SymbolVarArray adagrad(const NodeCtx& c) {
    size_t n = nr_tensors(c, 3);
    SymbolVar r = scalar_f32(c.in(0)), t = scalar_f32(c.in(1));
    double decay = c.attr_float("decay_factor", 0.f), eps = c.attr_float("epsilon", 0.f),
           norm = c.attr_float("norm_coefficient", 0.f);
    SymbolVar rate = r / (t * decay + 1.0);
    SymbolVarArray xs, hs;
    for (size_t i = 0; i < n; ++i) {
        SymbolVar x = c.in(2 + i), g = c.in(2 + n + i), h = c.in(2 + 2 * n + i);
        SymbolVar gr = x * norm + g;
        SymbolVar h_new = h + square(gr);
        xs.push_back(x - rate * gr / (sqrt(h_new) + eps));
        hs.push_back(h_new);
    }
    xs.insert(xs.end(), hs.begin(), hs.end());
    return xs;
}

SymbolVarArray momentum(const NodeCtx& c) {
    size_t n = nr_tensors(c, 3);
    SymbolVar r = scalar_f32(c.in(0)), t = scalar_f32(c.in(1));
    double alpha = c.attr_float("alpha", 0.f), beta = c.attr_float("beta", 0.f),
           norm = c.attr_float("norm_coefficient", 0.f);
    std::string mode = c.attr_string("mode", "standard");
    if (mode != "standard" && mode != "nesterov") c.invalid("mode \"" + mode + "\"");
    // The first step (T = 0) takes the whole gradient.
    SymbolVar b = where(less(scalar_like(t, 0), t), scalar_like(t, beta), scalar_like(t, 1));
    SymbolVarArray xs, vs;
    for (size_t i = 0; i < n; ++i) {
        SymbolVar x = c.in(2 + i), g = c.in(2 + n + i), v = c.in(2 + 2 * n + i);
        SymbolVar gr = x * norm + g;
        SymbolVar v_new = v * alpha + b * gr;
        xs.push_back(mode == "standard" ? x - r * v_new : x - r * (gr + v_new * alpha));
        vs.push_back(v_new);
    }
    xs.insert(xs.end(), vs.begin(), vs.end());
    return xs;
}

SymbolVarArray adam(const NodeCtx& c) {
    size_t n = nr_tensors(c, 4);
    SymbolVar r = scalar_f32(c.in(0)), t = scalar_f32(c.in(1));
    double alpha = c.attr_float("alpha", 0.9f), beta = c.attr_float("beta", 0.999f),
           eps = c.attr_float("epsilon", 1e-6f), norm = c.attr_float("norm_coefficient", 0.f),
           post = c.attr_float("norm_coefficient_post", 0.f);
    // Bias correction from the second step on (T > 0).
    SymbolVar corrected =
        r * sqrt(1.0 - pow(scalar_like(t, beta), t)) / (1.0 - pow(scalar_like(t, alpha), t));
    SymbolVar rate = where(less(scalar_like(t, 0), t), corrected, r);
    SymbolVarArray xs, vs, hs;
    for (size_t i = 0; i < n; ++i) {
        SymbolVar x = c.in(2 + i), g = c.in(2 + n + i), v = c.in(2 + 2 * n + i),
                  h = c.in(2 + 3 * n + i);
        SymbolVar gr = x * norm + g;
        SymbolVar v_new = v * alpha + gr * (1 - alpha);
        SymbolVar h_new = h * beta + square(gr) * (1 - beta);
        SymbolVar x_new = x - rate * (v_new / (sqrt(h_new) + eps));
        xs.push_back(post != 0 ? x_new * (1 - post) : x_new);
        vs.push_back(v_new), hs.push_back(h_new);
    }
    xs.insert(xs.end(), vs.begin(), vs.end());
    xs.insert(xs.end(), hs.begin(), hs.end());
    return xs;
}

//! d y / d x for each x named by the attributes (y summed when it has several elements).
SymbolVarArray gradient(const NodeCtx& c) {
    auto* xs = c.attr("xs");
    if (!xs || !c.has_attr("y")) c.invalid("needs the xs and y attributes");
    SymbolVar y = c.value_of(c.attr_string("y", ""));
    SymbolVarArray wrt;
    for (auto& name : xs->strings()) wrt.push_back(c.value_of(name));
    if (y.shape().ndim() != 0 || y.shape().total_nr_elems() != 1) {
        std::vector<int> all;
        for (size_t i = 0; i < y.shape().ndim(); ++i) all.push_back(int(i));
        y = reduce_sum(y, all, false);
    }
    return grad(y, wrt);
}

//! A window of `size` points: sum_k a_k cos(2 pi k n / N) with N = size (periodic) or size - 1.
Converter window(std::vector<double> a) {
    return [a](const NodeCtx& c) {
        int64_t size = c.ints_input(0).at(0);
        if (size < 0) c.invalid(fmt::format("negative size {}", size));
        DType dt = dtype_of(int32_t(c.attr_int("output_datatype", 1)), c.where());
        double period = c.attr_int("periodic", 1) ? double(size) : double(size - 1);
        std::vector<float> w(static_cast<size_t>(size));
        for (int64_t i = 0; i < size; ++i) {
            double v = 0;
            for (size_t k = 0; k < a.size(); ++k)
                v += a[k] * std::cos(2 * std::numbers::pi * double(k) * double(i) / period);
            w[size_t(i)] = float(v);
        }
        Tensor t(TensorShape{size_t(size)}, dt);
        convert_elements(dtype::Float32(), w.data(), dt, t.raw_ptr(), w.size());
        return one(c.known_output(0, t));
    };
}

} // namespace

void add_training_and_signal_converters(ConverterTable& t) {
    t[std::string(TRAINING) + "Adagrad"] = adagrad;
    t[std::string(TRAINING) + "Momentum"] = momentum;
    t[std::string(TRAINING) + "Adam"] = adam;
    t[std::string(TRAINING) + "Gradient"] = gradient;
    t["HannWindow"] = window({0.5, -0.5});
    t["HammingWindow"] = window({25.0 / 46.0, -21.0 / 46.0});
    t["BlackmanWindow"] = window({0.42, -0.5, 0.08});
}

} // namespace braid::onnx_import
