// Shared pieces of the gradient tests (test_grad_*.cpp): one-output cases for
// check_gradient and input generators that keep finite differences away from kinks.
#pragma once

#include "checker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace braid::test {

//! A check_gradient case whose graph has one output.
inline OprCase grad_case(const std::string& name, std::vector<TensorShape> shapes,
                         std::function<SymbolVar(const SymbolVarArray&)> build) {
    OprCase c;
    c.name = name;
    c.shapes = std::move(shapes);
    c.build = [build](const SymbolVarArray& in) -> SymbolVarArray { return {build(in)}; };
    return c;
}

//! Uniform values in ±[lo, hi]: never within `lo` of zero (relu, abs, sign kinks).
inline std::function<void(std::mt19937&, Tensor&, size_t)> away_from_zero(double lo = 0.1,
                                                                          double hi = 2.0) {
    return [=](std::mt19937& rng, Tensor& t, size_t) {
        std::uniform_real_distribution<double> mag(lo, hi);
        std::bernoulli_distribution neg(0.5);
        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
            t.ptr<float>()[i] = float(neg(rng) ? -mag(rng) : mag(rng));
    };
}

//! Input k gets values on the grid offset_k + 0.5·j, j random in [-4, 4): inputs with
//! different offsets never tie and never come closer than their offset difference.
inline std::function<void(std::mt19937&, Tensor&, size_t)>
grid_values(std::vector<double> offsets) {
    return [=](std::mt19937& rng, Tensor& t, size_t idx) {
        std::uniform_int_distribution<int> step(-4, 3);
        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
            t.ptr<float>()[i] = float(offsets.at(idx) + 0.5 * step(rng));
    };
}

//! Distinct values 0.1·(a random permutation of 0..n-1) − shift: no ties within a tensor, every
//! pair at least 0.1 apart (max / min reductions and max pooling).
inline std::function<void(std::mt19937&, Tensor&, size_t)> distinct_values(double shift = 1.0) {
    return [=](std::mt19937& rng, Tensor& t, size_t) {
        std::vector<int> perm(t.shape().total_nr_elems());
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (size_t i = 0; i < perm.size(); ++i) t.ptr<float>()[i] = float(0.1 * perm[i] - shift);
    };
}

//! Runs d sum(f(x) · w) / dx for one fed x (w = 1 unless given) and returns it.
inline Tensor eval_grad(const Tensor& x, const std::function<SymbolVar(SymbolVar)>& f) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto in = opr::Input::make(*g, "x", x.dtype(), x.shape());
    auto loss = opr::reduce_sum(f(in));
    auto dx = grad(loss, in);
    auto exec = g->compile({dx, loss}); // the loss keeps x an input when dx is a constant
    exec->feed("x", x).run();
    return exec->output(0).copy();
}

} // namespace braid::test
