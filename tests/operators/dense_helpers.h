// Helpers shared by the dense operator tests (matmul, conv, pooling, batch norm, attention):
// references compute in double on the input values and store with the output dtype's rounding.
#pragma once

#include "checker.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace braid::test {

//! The float dtypes every dense operator supports, with a tolerance that suits each.
struct DenseDType {
    DType dtype;
    double rtol, atol;
};

inline std::vector<DenseDType> dense_dtypes() {
    return {{dtype::Float32(), 1e-4, 1e-5},
            {dtype::Float16(), 4e-3, 4e-3},
            {dtype::BFloat16(), 2e-2, 2e-2}};
}

//! Input i of a case as doubles (row-major).
inline std::vector<double> values_of(const Tensor& t) {
    std::vector<double> r(t.shape().total_nr_elems());
    for (size_t i = 0; i < r.size(); ++i) r[i] = t.at(i);
    return r;
}

//! A tensor of `shape` and `dtype` holding `values` (rounded as the dtype stores them).
inline Tensor tensor_of(const TensorShape& shape, DType dtype, const std::vector<double>& values) {
    Tensor t(shape, dtype);
    EXPECT_EQ(values.size(), shape.total_nr_elems());
    for (size_t i = 0; i < values.size(); ++i) store_from_double(dtype, t.raw_ptr(), i, values[i]);
    return t;
}

//! Runs `fn` and checks it throws E whose message contains every string of `parts`.
template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "expected an error mentioning " << (parts.empty() ? "" : parts[0]);
    } catch (const E& e) {
        std::string msg = e.what();
        for (auto& p : parts)
            EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
}

} // namespace braid::test
