// Helpers shared by the dense operator tests (matmul, conv, pooling, batch norm, attention):
// the float dtypes with their tolerances; the references (reference.h) compute in double on the
// input values and store with the output dtype's rounding.
#pragma once

#include "checker.h"
#include "reference.h"

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

} // namespace braid::test
