// The operator checker: one small OprCase per operator and shape set gives the graph, a
// plain-loop reference and a tolerance; check_operator() builds the graph with Input vars,
// feeds seeded random data, runs it and compares every output with the reference.
#pragma once

#include "braid.h"

#include <functional>
#include <random>
#include <string>
#include <vector>

namespace braid::test {

//! One operator check.
struct OprCase {
    std::string name;
    std::vector<TensorShape> shapes; //!< one per input
    std::vector<DType> dtypes;       //!< one per input; empty: all float32
    //! Builds the outputs from the inputs.
    std::function<SymbolVarArray(const SymbolVarArray&)> build;
    //! Computes the expected outputs from the input values with plain loops.
    std::function<std::vector<Tensor>(const std::vector<Tensor>&)> reference;
    double rtol = 1e-5;
    double atol = 1e-6;
    //! Range of the random inputs (uniform); integer dtypes round.
    double low = -2.0, high = 2.0;
    //! Optional custom input generator: fills input `idx`.
    std::function<void(std::mt19937&, Tensor&, size_t idx)> fill;
    std::string comp_node = "cpu0";
};

//! Runs the case; reports mismatches through gtest (EXPECT_*), naming the case.
void check_operator(const OprCase& c, uint32_t seed = 1);

//! A tensor of `shape` and `dtype` with uniform random values in [low, high).
Tensor random_tensor(const TensorShape& shape, DType dtype, std::mt19937& rng, double low = -2.0,
                     double high = 2.0);

//! A float32 tensor from a list of values (shape must match the count).
Tensor make_tensor(const TensorShape& shape, const std::vector<float>& values);

//! Asserts `actual` equals `expected` in shape, dtype and values within tolerance.
void expect_tensor_near(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                        const std::string& what);

} // namespace braid::test
