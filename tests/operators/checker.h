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

    // ---- gradient check (central finite differences, see check_gradient) ----
    bool check_grad = false;
    //! Which inputs to differentiate; empty: every float input.
    std::vector<size_t> grad_inputs;
    double grad_eps = 1e-3;
    double grad_rtol = 2e-2;
    double grad_atol = 2e-3;
    //! Why the gradient graph cannot follow another batch size (check_gradient_batch_sizes
    //! skips the case); empty: it must.
    std::string fixed_batch;
};

//! Runs the case; reports mismatches through gtest (EXPECT_*), naming the case.
void check_operator(const OprCase& c, uint32_t seed = 1);

//! Compares braid::grad of a random projection of the outputs, sum_k <out_k, w_k>, with
//! central finite differences (evaluated in float64 from float32 forward runs). Called by
//! check_operator when c.check_grad is set.
void check_gradient(const OprCase& c, uint32_t seed = 1);

/*!
 * The gradient graph of the case, built once at its shapes, compiled once and then fed inputs
 * whose dim 0 ("batch": every input whose dim 0 equals input 0's) is 1 and 3 larger, must give
 * the loss and gradients that graphs built at those shapes give. Catches gradient rules that
 * bake today's shapes into the graph. Cases that do not build at another batch size have no
 * free batch dim and are skipped. Called by check_gradient.
 */
void check_gradient_batch_sizes(const OprCase& c, uint32_t seed = 1);

//! A tensor of `shape` and `dtype` with uniform random values in [low, high).
Tensor random_tensor(const TensorShape& shape, DType dtype, std::mt19937& rng, double low = -2.0,
                     double high = 2.0);

//! A float32 tensor from a list of values (shape must match the count).
Tensor make_tensor(const TensorShape& shape, const std::vector<float>& values);

//! Asserts `actual` equals `expected` in shape, dtype and values within tolerance.
void expect_tensor_near(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                        const std::string& what);

} // namespace braid::test
