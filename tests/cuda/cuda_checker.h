// Device comparison for the CUDA tests: run an operator case on cuda0 and on cpu0 with the same
// inputs and compare the outputs. Every test skips itself when no CUDA device is present.
#pragma once

#include "../operators/checker.h"

#include <gtest/gtest.h>

//! Skips the current test when braid has no usable CUDA device.
#define BRAID_REQUIRE_CUDA()                                                                       \
    do {                                                                                           \
        if (::braid::CompNode::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found";   \
    } while (0)

namespace braid::test {

//! A case named `name` on inputs of `shapes` and `dtypes` whose outputs `build` makes.
OprCase make_case(std::string name, std::vector<TensorShape> shapes, std::vector<DType> dtypes,
                  std::function<SymbolVarArray(const SymbolVarArray&)> build);

//! The CUDA-vs-CPU tolerance of results in `dt`: float16 and bfloat16 (computed in float32,
//! rounded once) may differ by one rounding step; float32 by `f32_rtol` / `f32_atol`
//! (summation order differs between the devices); integers not at all.
void set_tolerance(OprCase& c, DType dt, double f32_rtol = 1e-5, double f32_atol = 1e-6);

//! Builds `c`'s graph on comp node `cn`, feeds `values`, runs it and returns host copies of
//! the outputs.
std::vector<Tensor> run_case_on(const OprCase& c, const std::string& cn,
                                const std::vector<Tensor>& values);

//! Runs `c` on cuda0 and compares every output with the same graph run on cpu0 (the case's
//! own reference is ignored), within the case's tolerance.
void check_cuda_matches_cpu(const OprCase& c, uint32_t seed = 1);

} // namespace braid::test
