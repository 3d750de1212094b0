// The worked example of docs/parallel.md, as a test: a matmul whose input is split over the
// "dp" axis of a 2 x 2 mesh and whose weight is split by columns over "tp"; the per-rank
// results assemble to the single-device product, and the weight gradient, all-reduced over
// "dp", is the single-device one.
#include "parallel/redistribute.h"
#include "parallel/sharded_tensor.h"

#include "checker.h"
#include "comm/group_client.h"

#include "braid.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

using namespace braid;
using namespace braid::parallel;

TEST(ParallelWorkedExample, ColumnShardedMatmulOnATwoByTwoMeshMatchesOneDevice) {
    register_all_operators();
    setenv("BRAID_COMM_TIMEOUT", "60", /*overwrite=*/0);
    std::mt19937 rng(5);
    Tensor X = test::random_tensor({4, 8}, dtype::Float32(), rng);
    Tensor W = test::random_tensor({8, 6}, dtype::Float32(), rng);

    // --- as in docs/parallel.md ---
    Mesh mesh({2, 2}, {"dp", "tp"});
    ShardingSpec x_spec = xmap_sharding_spec(mesh, 2, {{"dp", 0}}); // rows over dp
    ShardingSpec w_spec = xmap_sharding_spec(mesh, 2, {{"tp", 1}}); // columns over tp
    auto x_pieces = ShardedTensor::split(X, x_spec);                // 4 pieces of {2, 8}
    auto w_pieces = ShardedTensor::split(W, w_spec);                // 4 pieces of {8, 3}
    auto text = [](const ShardingSpec& spec, const TensorShape& shape) {
        std::string out;
        for (const auto& index : spec.indices(shape))
            out += (out.empty() ? "" : " ") + format_index(index);
        return out;
    };
    EXPECT_EQ(text(x_spec, {4, 8}), "[0:2,:] [0:2,:] [2:4,:] [2:4,:]");
    EXPECT_EQ(text(w_spec, {8, 6}), "[:,0:3] [:,3:6] [:,0:3] [:,3:6]");
    EXPECT_EQ(w_spec.to_string(),
              "ShardingSpec([NoSharding, Chunked([2])], [Replicated(2), ShardedAxis(0)])");

    auto client =
        std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
    std::vector<Tensor> y_pieces(4), w_grads(4);
    std::vector<std::string> errors(4);
    std::vector<std::thread> ranks;
    for (uint32_t rank = 0; rank < 4; ++rank)
        ranks.emplace_back([&, rank] {
            try {
                GraphOptions opt;
                opt.default_comp_node = fmt::format("cpu{}", rank);
                auto g = ComputingGraph::make(opt);
                MeshGroups groups(mesh, rank, client);
                auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 8});
                auto w = opr::Input::make(*g, "w", dtype::Float32(), {8, 3});
                auto y_cols = opr::matmul(x, w);                                    // {2, 3}
                auto y = redistribute(y_cols, Shard{1}, Replicate{}, groups, "tp"); // {2, 6}
                auto loss = opr::reduce_sum(opr::square(y));
                auto w_grad = redistribute(grad(loss, w), Partial{}, Replicate{}, groups, "dp");
                auto exec = g->compile({y, w_grad});
                exec->feed("x", x_pieces.shard_of(mesh, rank))
                    .feed("w", w_pieces.shard_of(mesh, rank))
                    .run();
                y_pieces[rank] = exec->output(0).copy();
                w_grads[rank] = exec->output(1).copy();
            } catch (const std::exception& e) {
                errors[rank] = e.what();
            }
        });
    for (auto& t : ranks) t.join();
    for (uint32_t r = 0; r < 4; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
    // y is split by rows over dp and replicated over tp: the spec of x, on a {4, 6} tensor.
    Tensor Y = ShardedTensor{x_spec, {4, 6}, y_pieces}.assemble();
    // --- end of the example ---

    // Single-device references by plain loops: Y = X W; the loss summed over the 4 ranks is
    // 2 sum(Y^2) (each row block is held by both tp ranks), so dW = 4 X^T Y, and each rank
    // holds the columns of its tp coordinate.
    Tensor expect_y({4, 6}, dtype::Float32());
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 6; ++j) {
            double s = 0;
            for (int k = 0; k < 8; ++k) s += X.at(i * 8 + k) * W.at(k * 6 + j);
            expect_y.ptr<float>()[i * 6 + j] = float(s);
        }
    test::expect_tensor_near(Y, expect_y, 1e-5, 1e-5, "Y");
    for (uint32_t rank = 0; rank < 4; ++rank) {
        uint32_t tp = mesh.coords_of(rank)[1];
        Tensor expect_grad({8, 3}, dtype::Float32());
        for (int k = 0; k < 8; ++k)
            for (int j = 0; j < 3; ++j) {
                double s = 0;
                for (int i = 0; i < 4; ++i) s += X.at(i * 8 + k) * expect_y.at(i * 6 + tp * 3 + j);
                expect_grad.ptr<float>()[k * 3 + j] = float(4 * s);
            }
        test::expect_tensor_near(w_grads[rank], expect_grad, 1e-5, 1e-4,
                                 fmt::format("weight gradient of rank {}", rank));
    }
}
