// Det against an independent reference (the Leibniz sum over permutations, in double): batched
// and single matrices, every float dtype, singular and empty matrices, the serialized form, and
// the error messages.
#include "checker.h"
#include "reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

using namespace braid;
using namespace braid::test;

namespace {

//! det of each m x m matrix as the sum over permutations of signed products.
Tensor ref_det(const Tensor& x) {
    const TensorShape& s = x.shape();
    size_t nd = s.ndim(), m = s[nd - 1];
    std::vector<size_t> dims;
    for (size_t d = 0; d + 2 < nd; ++d) dims.push_back(s[d]);
    TensorShape out(dims);
    Tensor r(out, x.dtype());
    for (size_t b = 0; b < out.total_nr_elems(); ++b) {
        std::vector<size_t> perm(m);
        std::iota(perm.begin(), perm.end(), 0);
        double sum = 0;
        do {
            size_t inversions = 0;
            for (size_t i = 0; i < m; ++i)
                for (size_t j = i + 1; j < m; ++j) inversions += perm[i] > perm[j];
            double prod = inversions % 2 ? -1 : 1;
            for (size_t i = 0; i < m; ++i) prod *= x.at(b * m * m + i * m + perm[i]);
            sum += prod;
        } while (std::next_permutation(perm.begin(), perm.end()));
        store_from_double(x.dtype(), r.raw_ptr(), b, sum);
    }
    return r;
}

} // namespace

TEST(DetOpr, BatchedAndSingleMatricesOfEveryFloatDtype) {
    std::vector<TensorShape> shapes = {{1, 1},    {2, 2},       {3, 3},   {5, 5},
                                       {4, 3, 3}, {2, 3, 4, 4}, {0, 2, 2}};
    for (DType dt : {dtype::Float32(), dtype::Float64(), dtype::Float16(), dtype::BFloat16()})
        for (auto& shape : shapes) {
            OprCase c;
            c.name = fmt::format("det {} {}", shape.to_string(), dt.name());
            c.shapes = {shape};
            c.dtypes = {dt};
            c.build = [](const SymbolVarArray& in) -> SymbolVarArray { return {opr::det(in[0])}; };
            c.reference = [](const std::vector<Tensor>& in) {
                return std::vector<Tensor>{ref_det(in[0])};
            };
            bool half = dt == dtype::Float16() || dt == dtype::BFloat16();
            c.rtol = dt == dtype::Float64() ? 1e-12 : half ? 2e-2 : 1e-5;
            c.atol = dt == dtype::Float64() ? 1e-12 : half ? 2e-2 : 1e-5;
            check_operator(c);
        }
}

TEST(DetOpr, SingularAndPermutedMatrices) {
    auto g = ComputingGraph::make();
    // A singular matrix (row 2 = row 0 + row 1), a permutation with det -1, and one that needs
    // a row exchange at the first step (a zero pivot).
    Tensor x(TensorShape{3, 3, 3}, dtype::Float64());
    double v[] = {1, 2, 3, 4, 5, 6, 5, 7, 9, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 2, 1, 3, 1, 0, 1, 0, 4};
    std::copy(std::begin(v), std::end(v), x.ptr<double>());
    auto y = opr::det(opr::ImmutableTensor::make(*g, x));
    auto exec = g->compile({y});
    exec->run();
    const double* r = exec->output(0).ptr<double>();
    EXPECT_NEAR(r[0], 0.0, 1e-12);
    EXPECT_EQ(r[1], -1.0);
    EXPECT_NEAR(r[2], ref_det(x).ptr<double>()[2], 1e-12);
    EXPECT_NEAR(r[2], -25.0, 1e-12); // 0*(4-0) - 2*(12-0) + 1*(0-1)
}

TEST(DetOpr, EmptyMatricesHaveDeterminantOne) {
    auto g = ComputingGraph::make();
    auto y =
        opr::det(opr::ImmutableTensor::make(*g, Tensor(TensorShape{2, 0, 0}, dtype::Float32())));
    auto exec = g->compile({y});
    exec->run();
    ASSERT_EQ(exec->output(0).shape(), (TensorShape{2}));
    EXPECT_EQ(exec->output(0).ptr<float>()[0], 1.f);
    EXPECT_EQ(exec->output(0).ptr<float>()[1], 1.f);
}

TEST(DetOpr, ErrorsNameShapeAndDtype) {
    auto g = ComputingGraph::make();
    auto v = opr::Input::make(*g, "v", dtype::Float32(), {3});
    expect_error<ShapeError>([&] { opr::det(v); }, {"Det", "\"v\" has shape {3}", "rank >= 2"});
    auto r = opr::Input::make(*g, "r", dtype::Float32(), {2, 3});
    expect_error<ShapeError>([&] { opr::det(r); }, {"Det", "2x3, not square"});
    auto i = opr::Input::make(*g, "i", dtype::Int32(), {2, 2});
    expect_error<DTypeError>([&] { opr::det(i); }, {"Det", "\"i\" has dtype int32", "float32"});
}
