// Plain-loop references and error checks shared by the operator test files: an n-ary
// broadcasting reference computed in double, tensors from value lists, and a check that a
// call throws a given error type whose message contains given parts.
#pragma once

#include "checker.h"
#include "operators/conv.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace braid::test {

//! The numpy broadcast of the inputs' shapes (the test fails when they do not broadcast).
inline TensorShape broadcast_of(const std::vector<Tensor>& in) {
    std::vector<const TensorShape*> shapes;
    for (auto& t : in) shapes.push_back(&t.shape());
    TensorShape out;
    EXPECT_TRUE(broadcast_shapes(shapes.data(), shapes.size(), out));
    return out;
}

//! out[i] = f(inputs at i) over the broadcast shape, computed in double and stored in `dt`.
inline Tensor ref_nary(const std::vector<Tensor>& in, DType dt,
                       const std::function<double(const double*)>& f) {
    TensorShape shape = broadcast_of(in);
    std::vector<Tensor> views;
    for (auto& t : in) views.push_back(t.view(t.layout().broadcast(shape)));
    Tensor r(shape, dt);
    double args[3];
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) {
        for (size_t k = 0; k < views.size(); ++k) args[k] = views[k].at(i);
        store_from_double(dt, r.raw_ptr(), i, f(args));
    }
    return r;
}

/*!
 * Conv2d's definition as plain loops for x [N, C, H, W] and w [O, C/groups, KH, KW]: each
 * output [N, O, OH, OW] (row-major) is the sum, in T, of term(x index, w index, output channel)
 * over its window's positions inside x (padding contributes nothing).
 */
template <typename T, typename Term>
std::vector<T> conv2d_reference(const TensorShape& xs, const TensorShape& ws,
                                const opr::Conv2dParam& p, Term term) {
    size_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], o = ws[0], cg = ws[1], kh = ws[2],
           kw = ws[3];
    size_t og = o / size_t(p.groups);
    size_t oh = (h + 2 * p.pad_h - p.dilation_h * (kh - 1) - 1) / p.stride_h + 1;
    size_t ow = (wd + 2 * p.pad_w - p.dilation_w * (kw - 1) - 1) / p.stride_w + 1;
    std::vector<T> y(n * o * oh * ow);
    for (size_t b = 0; b < n; ++b)
        for (size_t oc = 0; oc < o; ++oc) {
            size_t g = oc / og;
            for (size_t i = 0; i < oh; ++i)
                for (size_t j = 0; j < ow; ++j) {
                    T s = 0;
                    for (size_t ic = 0; ic < cg; ++ic)
                        for (size_t a = 0; a < kh; ++a)
                            for (size_t bb = 0; bb < kw; ++bb) {
                                ptrdiff_t ih =
                                    ptrdiff_t(i * p.stride_h + a * p.dilation_h) - p.pad_h;
                                ptrdiff_t iw =
                                    ptrdiff_t(j * p.stride_w + bb * p.dilation_w) - p.pad_w;
                                if (ih < 0 || iw < 0 || ih >= ptrdiff_t(h) || iw >= ptrdiff_t(wd))
                                    continue;
                                size_t ch = g * cg + ic;
                                s += term(((b * c + ch) * h + size_t(ih)) * wd + size_t(iw),
                                          ((oc * cg + ic) * kh + a) * kw + bb, oc);
                            }
                    y[((b * o + oc) * oh + i) * ow + j] = s;
                }
        }
    return y;
}

//! A tensor of `shape` and `dt` holding `values` (converted with store_from_double).
inline Tensor tensor_of(const TensorShape& shape, DType dt, const std::vector<double>& values) {
    Tensor t(shape, dt);
    EXPECT_EQ(values.size(), shape.total_nr_elems());
    for (size_t i = 0; i < values.size() && i < shape.total_nr_elems(); ++i)
        store_from_double(dt, t.raw_ptr(), i, values[i]);
    return t;
}

//! The elements of `t` in row-major order, as doubles.
inline std::vector<double> values_of(const Tensor& t) {
    std::vector<double> v;
    for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) v.push_back(t.at(i));
    return v;
}

//! Runs `fn`, expecting error type E whose message contains every string of `parts`.
template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "expected an error containing \"" << (parts.empty() ? "" : parts[0])
                      << "\", got none";
    } catch (const E& e) {
        std::string msg = e.what();
        for (auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg;
    }
}

//! Builds a graph with one Input per value, compiles `build`'s outputs and runs it once.
inline std::vector<Tensor>
run_graph(const std::vector<Tensor>& values,
          const std::function<SymbolVarArray(ComputingGraph&, const SymbolVarArray&)>& build,
          const std::string& comp_node = "cpu0") {
    GraphOptions opt;
    opt.default_comp_node = comp_node;
    auto g = ComputingGraph::make(opt);
    SymbolVarArray inputs;
    for (size_t i = 0; i < values.size(); ++i)
        inputs.push_back(
            opr::Input::make(*g, "in" + std::to_string(i), values[i].dtype(), values[i].shape()));
    SymbolVarArray outs = build(*g, inputs);
    std::vector<OutputSpec> specs(outs.begin(), outs.end());
    auto exec = g->compile(specs);
    for (size_t i = 0; i < values.size(); ++i) exec->feed(inputs[i], values[i]);
    exec->run();
    std::vector<Tensor> res;
    for (size_t k = 0; k < outs.size(); ++k) res.push_back(exec->output(k).copy());
    return res;
}

} // namespace braid::test
