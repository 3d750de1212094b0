// pmap: one function built on every rank of a mesh (graphs of this process, one comp node per
// rank, the local backend), collectives named by mesh axis, against a single-device reference
// computed on the host; on 2 and 4 ranks and on a 2x2 mesh.
#include "parallel/pmap.h"

#include "checker.h"
#include "comm/group_client.h"

#include "braid.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>

using namespace braid;
using namespace braid::parallel;
using braid::test::expect_tensor_near;
using braid::test::random_tensor;

namespace {

float at(const Tensor& t, size_t i, size_t j) {
    return t.ptr<float>()[i * t.shape()[1] + j];
}

} // namespace

class PmapTest : public ::testing::Test {
protected:
    void SetUp() override {
        register_all_operators();
        // A rank that never arrives fails its peers within a minute, inside the ctest timeout.
        setenv("BRAID_COMM_TIMEOUT", "60", /*overwrite=*/0);
    }
};

TEST_F(PmapTest, PsumOverAnUnstackedAxisMatchesTheSumOfRowsOnTwoAndFourRanks) {
    for (uint32_t n : {2u, 4u}) {
        SCOPED_TRACE(fmt::format("{} ranks", n));
        Mesh mesh({n}, {"i"});
        // x {n, 3}, one row per rank (JAX's pmap over dim 0); the result is replicated.
        std::vector<PmapArg> args = {{"x", {n, 3}, dtype::Float32(), pmap_sharding_spec(n, 1, 0)}};
        Pmap f(
            [](SpmdContext& ctx, const SymbolVarArray& a) -> SymbolVarArray {
                EXPECT_EQ(a[0].node()->shape(), TensorShape({3}));
                return {ctx.psum(a[0] * a[0], "i")};
            },
            mesh, args, {pmap_sharding_spec(n, 1, std::nullopt)});
        std::mt19937 rng(n);
        Tensor x = random_tensor({n, 3}, dtype::Float32(), rng);
        auto out = f({x});
        ASSERT_EQ(out.size(), 1u);
        Tensor expected({3}, dtype::Float32());
        for (size_t j = 0; j < 3; ++j) {
            float s = 0;
            for (size_t i = 0; i < n; ++i) s += at(x, i, j) * at(x, i, j);
            expected.ptr<float>()[j] = s;
        }
        expect_tensor_near(out[0], expected, 1e-5, 1e-6, "out[0]");
        // It runs again with the same executables.
        Tensor x2 = random_tensor({n, 3}, dtype::Float32(), rng);
        auto out2 = f({x2});
        float s0 = 0;
        for (size_t i = 0; i < n; ++i) s0 += at(x2, i, 0) * at(x2, i, 0);
        EXPECT_NEAR(out2[0].ptr<float>()[0], s0, 1e-5 * std::abs(s0) + 1e-6);
    }
}

TEST_F(PmapTest, NamedAxesOfATwoByTwoMeshResolveToTheirSubGroups) {
    // X {4, 8}: rows over "x", columns over "y"; every rank holds a {2, 4} block.
    Mesh mesh({2, 2}, {"x", "y"});
    std::vector<PmapArg> args = {
        {"X", {4, 8}, dtype::Float32(), xmap_sharding_spec(mesh, 2, {{"x", 0}, {"y", 1}})}};
    Pmap f(
        [](SpmdContext& ctx, const SymbolVarArray& a) -> SymbolVarArray {
            auto x = a[0];
            return {ctx.psum(x, "y"),                // {2,4}: the column blocks summed
                    ctx.all_gather(x, "x", 0),       // {4,4}: this rank's column block
                    ctx.pmax(ctx.pmax(x, "x"), "y"), // {2,4}: the max of all four blocks
                    opr::full_like(x, double(ctx.axis_index("x") * 10 + ctx.axis_index("y")))};
        },
        mesh, args,
        {xmap_sharding_spec(mesh, 2, {{"x", 0}}), xmap_sharding_spec(mesh, 2, {{"y", 1}}),
         xmap_sharding_spec(mesh, 2, {}), xmap_sharding_spec(mesh, 2, {{"x", 0}, {"y", 1}})});
    std::mt19937 rng(7);
    Tensor X = random_tensor({4, 8}, dtype::Float32(), rng);
    auto out = f({X});
    ASSERT_EQ(out.size(), 4u);
    ASSERT_EQ(out[0].shape(), TensorShape({4, 4}));
    ASSERT_EQ(out[1].shape(), TensorShape({4, 8}));
    ASSERT_EQ(out[2].shape(), TensorShape({2, 4}));
    Tensor sum_y({4, 4}, dtype::Float32()), max_all({2, 4}, dtype::Float32());
    for (size_t i = 0; i < 4; ++i)
        for (size_t j = 0; j < 4; ++j)
            sum_y.ptr<float>()[i * 4 + j] = at(X, i, j) + at(X, i, j + 4);
    for (size_t i = 0; i < 2; ++i)
        for (size_t j = 0; j < 4; ++j)
            max_all.ptr<float>()[i * 4 + j] =
                std::max(std::max(at(X, i, j), at(X, i, j + 4)),
                         std::max(at(X, i + 2, j), at(X, i + 2, j + 4)));
    expect_tensor_near(out[0], sum_y, 1e-5, 1e-6, "out[0]");
    expect_tensor_near(out[1], X, 0, 1e-6, "out[1]");
    expect_tensor_near(out[2], max_all, 0, 1e-6, "out[2]");
    // axis_index: block (bx, by) holds 10 bx + by.
    for (size_t i = 0; i < 4; ++i)
        for (size_t j = 0; j < 8; ++j)
            EXPECT_EQ(at(out[3], i, j), float((i / 2) * 10 + j / 4)) << i << "," << j;
    // The plan names the sub-groups: psum over y pairs ranks {0,1}, all-gather over x {0,2}.
    auto plan = f.plan();
    EXPECT_TRUE(plan.problems.empty()) << plan.to_string();
    ASSERT_GE(plan.ranks[0].collectives.size(), 2u);
    EXPECT_EQ(plan.ranks[0].collectives[0].group_ranks, (std::vector<uint32_t>{0, 1}));
    EXPECT_EQ(plan.ranks[0].collectives[1].group_ranks, (std::vector<uint32_t>{0, 2}));
}

TEST_F(PmapTest, GradientsThroughPsumMatchTheSingleDeviceGradient) {
    // The single-device loss is sum(X w) over all rows: its gradient w.r.t. w is the sum of
    // the rows of X. Per rank: the gradient of its own part, psum'd. Through the collective:
    // the gradient of psum(part) w.r.t. w is n x_r on rank r, as the all-reduce's gradient
    // rule sums the output gradients of the n ranks (each holds a copy of the total).
    for (uint32_t n : {2u, 4u}) {
        SCOPED_TRACE(fmt::format("{} ranks", n));
        Mesh mesh({n}, {"i"});
        std::vector<PmapArg> args = {{"x", {n, 5}, dtype::Float32(), pmap_sharding_spec(n, 1, 0)},
                                     {"w", {5}, dtype::Float32(), pmap_sharding_spec(n, 1, {})}};
        Pmap f(
            [](SpmdContext& ctx, const SymbolVarArray& a) -> SymbolVarArray {
                auto part = opr::reduce_sum(a[0] * a[1]);
                auto total = ctx.psum(part, "i");
                return {total, ctx.psum(grad(part, a[1]), "i"), grad(total, a[1])};
            },
            mesh, args,
            {pmap_sharding_spec(n, 0, std::nullopt), pmap_sharding_spec(n, 1, std::nullopt),
             pmap_sharding_spec(n, 1, 0)});
        std::mt19937 rng(100 + n);
        Tensor x = random_tensor({n, 5}, dtype::Float32(), rng);
        Tensor w = random_tensor({5}, dtype::Float32(), rng);
        auto out = f({x, w});
        float loss = 0;
        Tensor gw({5}, dtype::Float32()), through({n, 5}, dtype::Float32());
        for (size_t j = 0; j < 5; ++j) {
            float col = 0;
            for (size_t i = 0; i < n; ++i) {
                col += at(x, i, j);
                through.ptr<float>()[i * 5 + j] = float(n) * at(x, i, j);
            }
            gw.ptr<float>()[j] = col;
            loss += col * w.ptr<float>()[j];
        }
        EXPECT_NEAR(out[0].ptr<float>()[0], loss, 1e-5 * std::abs(loss) + 1e-5);
        expect_tensor_near(out[1], gw, 1e-5, 1e-6, "psum of the rank gradients");
        expect_tensor_near(out[2], through, 1e-5, 1e-6, "gradient through psum");
    }
}

TEST_F(PmapTest, ErrorsNameWhatWasSeenAndExpected) {
    Mesh mesh({2}, {"i"});
    auto one_row = pmap_sharding_spec(2, 1, 0);
    std::vector<PmapArg> args = {{"x", {2, 3}, dtype::Float32(), one_row}};
    auto identity = [](SpmdContext&, const SymbolVarArray& a) -> SymbolVarArray { return a; };
    try {
        Pmap f(identity, mesh, args, {one_row, one_row});
        FAIL() << "two result specs for one result were accepted";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("returned 1 results, but 2 result specs"),
                  std::string::npos)
            << e.what();
    }
    // A spec for 3 devices on a mesh of 2.
    EXPECT_THROW(Pmap(identity, mesh,
                      {{"x", {3, 3}, dtype::Float32(), pmap_sharding_spec(3, 1, 0)}}, {one_row}),
                 ValueError);
    Pmap f(identity, mesh, args, {one_row});
    try {
        f({Tensor({2, 4}, dtype::Float32())});
        FAIL() << "a {2,4} argument was accepted for a {2,3} one";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("is float32 {2,4}, expected float32 {2,3}"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_EQ(global_shape_of({3}, one_row), TensorShape({2, 3}));
    EXPECT_THROW(global_shape_of({2, 3}, one_row), ValueError);
}
