// redistribute(): every placement pair of the table over 1 to 5 ranks (threads of this
// process, one graph each, the local backend, an in-process group manager), forward and
// gradient, against a single-device graph that computes the same thing without collectives.
// Also over one axis of 2-D meshes, and the errors.
#include "parallel/redistribute.h"

#include "checker.h"
#include "comm/group_client.h"
#include "parallel/sharded_tensor.h"

#include "braid.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

using namespace braid;
using namespace braid::parallel;
using braid::test::expect_tensor_near;
using braid::test::random_tensor;
using opr::CollectiveMode;

namespace {

std::shared_ptr<comm::GroupClient> fresh_client() {
    return std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
}

//! What one rank computed: its output, the gradient of the summed loss w.r.t. its input, the
//! collective modes in its graph (in schedule order), or the error it threw.
struct RankResult {
    Tensor output, grad;
    std::vector<CollectiveMode> collectives;
    std::string error;
};

/*!
 * Every rank of `mesh` on its own thread and graph: x (its input) redistributed over `axis`
 * from `from` to `to`, the loss sum(y * w) with its weight, and d loss / d x. Collectives wait
 * at most BRAID_COMM_TIMEOUT (set by the fixture), so a rank that never arrives fails the test
 * instead of hanging it.
 */
std::vector<RankResult> run_ranks(const Mesh& mesh, const std::string& axis, Placement from,
                                  Placement to, const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& weights) {
    auto client = fresh_client();
    std::vector<RankResult> results(mesh.size());
    std::vector<std::thread> threads;
    for (uint32_t rank = 0; rank < mesh.size(); ++rank)
        threads.emplace_back([&, rank] {
            auto& res = results[rank];
            try {
                GraphOptions opt;
                opt.default_comp_node = fmt::format("cpu{}", rank);
                auto g = ComputingGraph::make(opt);
                MeshGroups groups(mesh, rank, client);
                auto x = opr::Input::make(*g, "x", dtype::Float32(), inputs[rank].shape());
                auto y = redistribute(x, from, to, groups, axis);
                auto w = opr::ImmutableTensor::make(*g, weights[rank]);
                auto loss = opr::reduce_sum(y * w);
                auto gx = grad(loss, x);
                auto exec = g->compile({y, gx});
                for (const auto& [cn, oprs] : exec->sequences())
                    for (auto* o : oprs)
                        if (std::string(o->type_name()) == "CollectiveComm")
                            res.collectives.push_back(
                                static_cast<opr::CollectiveComm*>(o)->param().mode);
                exec->feed("x", inputs[rank]).run();
                res.output = exec->output(0).copy();
                res.grad = exec->output(1).copy();
            } catch (const std::exception& e) {
                res.error = e.what();
            }
        });
    for (auto& t : threads) t.join();
    return results;
}

/*!
 * The same on one device, without collectives, for one sub-group (its ranks' inputs and
 * weights in axis order): the logical tensor from the ranks' pieces (sum/max/min of Partial
 * pieces, concatenation of Shards, each rank's own copy for Replicate), each rank's output
 * from it, the loss summed over the ranks, and its gradient w.r.t. every rank's input.
 */
std::vector<RankResult> reference(Placement from, Placement to, const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& weights) {
    size_t n = inputs.size();
    auto g = ComputingGraph::make();
    SymbolVarArray xs;
    for (size_t k = 0; k < n; ++k)
        xs.push_back(
            opr::Input::make(*g, fmt::format("x{}", k), dtype::Float32(), inputs[k].shape()));
    SymbolVar logical;
    if (auto* p = std::get_if<Partial>(&from)) {
        logical = xs[0];
        for (size_t k = 1; k < n; ++k) {
            if (p->op == ReduceOp::SUM) logical = logical + xs[k];
            if (p->op == ReduceOp::MAX) logical = opr::maximum(logical, xs[k]);
            if (p->op == ReduceOp::MIN) logical = opr::minimum(logical, xs[k]);
        }
    } else if (auto* s = std::get_if<Shard>(&from)) {
        logical = n == 1 ? xs[0] : opr::concat(xs, s->dim);
    }
    SymbolVarArray ys;
    for (size_t k = 0; k < n; ++k) {
        SymbolVar full = std::holds_alternative<Replicate>(from) ? xs[k] : logical;
        if (from == to) {
            ys.push_back(xs[k]);
        } else if (auto* s = std::get_if<Shard>(&to)) {
            long len = long(full.shape()[s->dim] / n);
            ys.push_back(opr::subtensor(
                full, {opr::AxisIndex::slice(s->dim, long(k) * len, long(k + 1) * len)}));
        } else {
            ys.push_back(full);
        }
    }
    SymbolVar loss;
    for (size_t k = 0; k < n; ++k) {
        auto term = opr::reduce_sum(ys[k] * opr::ImmutableTensor::make(*g, weights[k]));
        loss = k == 0 ? term : loss + term;
    }
    auto grads = grad(loss, xs);
    std::vector<OutputSpec> outs(ys.begin(), ys.end());
    outs.insert(outs.end(), grads.begin(), grads.end());
    auto exec = g->compile(outs);
    for (size_t k = 0; k < n; ++k) exec->feed(xs[k], inputs[k]);
    exec->run();
    std::vector<RankResult> results(n);
    for (size_t k = 0; k < n; ++k) {
        results[k].output = exec->output(k).copy();
        results[k].grad = exec->output(n + k).copy();
    }
    return results;
}

/*!
 * Runs `from` -> `to` over `axis` of `mesh` for a logical tensor of `global` shape: random
 * per-rank inputs of the local shape (different on every rank, replicas included), checks
 * every rank's output and gradient against the single-device reference of its sub-group, and
 * that the graph holds `expected` collectives (and as many gradient collectives).
 */
void check_pair(const Mesh& mesh, const std::string& axis, Placement from, Placement to,
                const TensorShape& global, const std::vector<CollectiveMode>& expected,
                uint32_t seed) {
    SCOPED_TRACE(fmt::format("{} -> {} over \"{}\" of {}, logical shape {}", placement_name(from),
                             placement_name(to), axis, mesh.to_string(), global.to_string()));
    uint32_t n = mesh.axis_size(axis);
    TensorShape in_shape = local_shape(global, from, n), out_shape = local_shape(global, to, n);
    std::mt19937 rng(seed);
    std::vector<Tensor> inputs, weights;
    for (uint32_t r = 0; r < mesh.size(); ++r) {
        inputs.push_back(random_tensor(in_shape, dtype::Float32(), rng));
        weights.push_back(random_tensor(out_shape, dtype::Float32(), rng));
    }
    auto results = run_ranks(mesh, axis, from, to, inputs, weights);
    for (uint32_t r = 0; r < mesh.size(); ++r) ASSERT_EQ(results[r].error, "") << "rank " << r;
    for (const auto& group : mesh.axis_groups(axis)) {
        std::vector<Tensor> group_inputs, group_weights;
        for (uint32_t r : group) {
            group_inputs.push_back(inputs[r]);
            group_weights.push_back(weights[r]);
        }
        auto expect = reference(from, to, group_inputs, group_weights);
        for (size_t k = 0; k < group.size(); ++k) {
            uint32_t r = group[k];
            expect_tensor_near(results[r].output, expect[k].output, 1e-5, 1e-5,
                               fmt::format("output of rank {}", r));
            expect_tensor_near(results[r].grad, expect[k].grad, 1e-5, 1e-5,
                               fmt::format("gradient of rank {}", r));
            // Forward collectives first, then the gradient's (their gradient modes).
            std::vector<CollectiveMode> forward(
                results[r].collectives.begin(),
                results[r].collectives.begin() +
                    std::min(results[r].collectives.size(), expected.size()));
            EXPECT_EQ(forward, expected) << "rank " << r;
            EXPECT_EQ(results[r].collectives.size(), 2 * expected.size()) << "rank " << r;
        }
    }
}

//! Logical shapes whose three dims all split over n ranks.
TensorShape global_shape(uint32_t n) {
    return {n, 2 * n, 3 * n};
}

const std::vector<Partial>& partials() {
    static const std::vector<Partial> all{{ReduceOp::SUM}, {ReduceOp::MAX}, {ReduceOp::MIN}};
    return all;
}

CollectiveMode all_reduce_mode(ReduceOp op) {
    return op == ReduceOp::SUM   ? CollectiveMode::ALL_REDUCE_SUM
           : op == ReduceOp::MAX ? CollectiveMode::ALL_REDUCE_MAX
                                 : CollectiveMode::ALL_REDUCE_MIN;
}

} // namespace

class Redistribute : public ::testing::Test {
protected:
    void SetUp() override {
        register_all_operators();
        // A rank that never arrives fails its peers within a minute, well inside the ctest
        // timeout (unless the caller set a limit of its own).
        setenv("BRAID_COMM_TIMEOUT", "60", /*overwrite=*/0);
    }
};

TEST_F(Redistribute, PartialToReplicateIsAnAllReduceOnOneToFiveRanks) {
    for (uint32_t n = 1; n <= 5; ++n)
        for (const auto& p : partials())
            check_pair(Mesh({n}, {"x"}), "x", p, Replicate{}, {2, 3}, {all_reduce_mode(p.op)},
                       n * 10 + uint32_t(p.op));
}

TEST_F(Redistribute, ShardToReplicateIsAnAllGatherOnOneToFiveRanks) {
    for (uint32_t n = 1; n <= 5; ++n)
        for (int dim : {0, 1, 2})
            check_pair(Mesh({n}, {"x"}), "x", Shard{dim}, Replicate{}, global_shape(n),
                       {CollectiveMode::ALL_GATHER}, n * 10 + uint32_t(dim));
}

TEST_F(Redistribute, PartialSumToShardIsAReduceScatterOnOneToFiveRanks) {
    for (uint32_t n = 1; n <= 5; ++n)
        for (int dim : {0, 1, 2})
            check_pair(Mesh({n}, {"x"}), "x", Partial{ReduceOp::SUM}, Shard{dim}, global_shape(n),
                       {CollectiveMode::REDUCE_SCATTER_SUM}, n * 10 + uint32_t(dim));
}

TEST_F(Redistribute, PartialMaxOrMinToShardIsAnAllReduceAndALocalSlice) {
    for (uint32_t n = 1; n <= 5; ++n)
        for (ReduceOp op : {ReduceOp::MAX, ReduceOp::MIN})
            for (int dim : {0, 2})
                check_pair(Mesh({n}, {"x"}), "x", Partial{op}, Shard{dim}, global_shape(n),
                           {all_reduce_mode(op)}, n * 10 + uint32_t(dim) + uint32_t(op));
}

TEST_F(Redistribute, ReplicateToShardIsALocalSliceWithoutCommunication) {
    for (uint32_t n = 1; n <= 5; ++n)
        for (int dim : {0, 1, 2})
            check_pair(Mesh({n}, {"x"}), "x", Replicate{}, Shard{dim}, global_shape(n), {},
                       n * 10 + uint32_t(dim));
}

TEST_F(Redistribute, ShardToAnotherShardIsAnAllToAllOnOneToFiveRanks) {
    for (uint32_t n = 1; n <= 5; ++n)
        for (int from : {0, 1, 2})
            for (int to : {0, 1, 2})
                if (from != to)
                    check_pair(Mesh({n}, {"x"}), "x", Shard{from}, Shard{to}, global_shape(n),
                               {CollectiveMode::ALL_TO_ALL}, n * 10 + uint32_t(from * 3 + to));
}

TEST_F(Redistribute, APlacementToItselfIsTheInput) {
    for (Placement p : {Placement{Replicate{}}, Placement{Shard{1}}, Placement{Partial{}}})
        check_pair(Mesh({3}, {"x"}), "x", p, p, global_shape(3), {}, 5);
}

TEST_F(Redistribute, OverOneAxisOfTwoDimensionalMeshesEachSubGroupRunsOnItsOwn) {
    // 2 x 3: over "y", 2 groups of 3; over "x", 3 groups of 2; then 2 x 2, 1 x 3 and 3 x 1.
    // Every sub-group's result is its own (inputs differ between groups), so a collective
    // mixing groups would show.
    Mesh mesh({2, 3}, {"x", "y"});
    check_pair(mesh, "y", Shard{1}, Replicate{}, {2, 6}, {CollectiveMode::ALL_GATHER}, 1);
    check_pair(mesh, "x", Partial{ReduceOp::SUM}, Shard{0}, {4, 3},
               {CollectiveMode::REDUCE_SCATTER_SUM}, 2);
    check_pair(mesh, "y", Shard{0}, Shard{1}, {3, 6}, {CollectiveMode::ALL_TO_ALL}, 3);
    check_pair(mesh, "x", Partial{ReduceOp::MAX}, Replicate{}, {2, 2},
               {CollectiveMode::ALL_REDUCE_MAX}, 4);
    Mesh square({2, 2}, {"x", "y"});
    check_pair(square, "x", Shard{1}, Shard{0}, {2, 4}, {CollectiveMode::ALL_TO_ALL}, 7);
    check_pair(square, "y", Partial{ReduceOp::MIN}, Shard{1}, {2, 4},
               {CollectiveMode::ALL_REDUCE_MIN}, 8);
    Mesh row({1, 3}, {"x", "y"});
    check_pair(row, "y", Shard{0}, Replicate{}, {3, 2}, {CollectiveMode::ALL_GATHER}, 9);
    check_pair(row, "x", Replicate{}, Shard{1}, {3, 2}, {}, 10);
    Mesh column({3, 1}, {"x", "y"});
    check_pair(column, "x", Shard{0}, Replicate{}, {3, 2}, {CollectiveMode::ALL_GATHER}, 5);
    check_pair(column, "y", Partial{ReduceOp::SUM}, Replicate{}, {3, 2},
               {CollectiveMode::ALL_REDUCE_SUM}, 6);
}

TEST_F(Redistribute, SeveralRedistributionsInOneGraphGetTheirOwnKeys) {
    // Shard(0) -> Replicate -> Shard(1) -> Shard(0) on 3 ranks round-trips x; with the
    // gradient that is six collectives per rank, each under a key of its own.
    Mesh mesh({3}, {"x"});
    auto client = fresh_client();
    std::mt19937 rng(11);
    std::vector<Tensor> inputs;
    for (int r = 0; r < 3; ++r) inputs.push_back(random_tensor({2, 6}, dtype::Float32(), rng));
    std::vector<RankResult> results(3);
    std::vector<std::thread> threads;
    for (uint32_t rank = 0; rank < 3; ++rank)
        threads.emplace_back([&, rank] {
            try {
                GraphOptions opt;
                opt.default_comp_node = fmt::format("cpu{}", rank);
                auto g = ComputingGraph::make(opt);
                MeshGroups groups(mesh, rank, client);
                auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 6});
                auto full = redistribute(x, Shard{0}, Replicate{}, groups, "x");
                auto cols = redistribute(full, Replicate{}, Shard{1}, groups, "x");
                auto rows = redistribute(cols, Shard{1}, Shard{0}, groups, "x");
                auto loss = opr::reduce_sum(opr::square(rows));
                auto exec = g->compile({rows, grad(loss, x)});
                exec->feed("x", inputs[rank]).run();
                results[rank].output = exec->output(0).copy();
                results[rank].grad = exec->output(1).copy();
            } catch (const std::exception& e) {
                results[rank].error = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (uint32_t r = 0; r < 3; ++r) {
        ASSERT_EQ(results[r].error, "") << "rank " << r;
        expect_tensor_near(results[r].output, inputs[r], 0, 0, fmt::format("rank {}", r));
        // d/dx sum(x^2) = 2x: each rank's rows come back to it alone.
        Tensor twice = inputs[r].copy();
        for (size_t i = 0; i < 12; ++i) twice.ptr<float>()[i] *= 2.f;
        expect_tensor_near(results[r].grad, twice, 1e-6, 1e-6, fmt::format("rank {}", r));
    }
}

TEST_F(Redistribute, MatchesHostShardingOfTheLogicalTensor) {
    // Pieces made by ShardedTensor::split for Shard(1) all-gather back to the logical tensor,
    // and Replicate -> Shard(1) gives the split's pieces.
    Mesh mesh({4}, {"x"});
    ShardingSpec spec({NoSharding{}, Chunked(4)}, {ShardedAxis(0)});
    std::mt19937 rng(3);
    Tensor logical = random_tensor({3, 8}, dtype::Float32(), rng);
    auto pieces = ShardedTensor::split(logical, spec);
    std::vector<Tensor> weights(4, random_tensor({3, 8}, dtype::Float32(), rng));
    auto gathered = run_ranks(mesh, "x", Shard{1}, Replicate{}, pieces.shards, weights);
    std::vector<Tensor> copies(4, logical);
    std::vector<Tensor> piece_weights(4, random_tensor({3, 2}, dtype::Float32(), rng));
    auto sliced = run_ranks(mesh, "x", Replicate{}, Shard{1}, copies, piece_weights);
    for (uint32_t r = 0; r < 4; ++r) {
        ASSERT_EQ(gathered[r].error, "");
        ASSERT_EQ(sliced[r].error, "");
        expect_tensor_near(gathered[r].output, logical, 0, 0, fmt::format("rank {}", r));
        expect_tensor_near(sliced[r].output, pieces.shards[r], 0, 0, fmt::format("rank {}", r));
    }
}

TEST_F(Redistribute, UnevenDimsAndUnsupportedPairsAreClearErrors) {
    Mesh mesh({3}, {"x"});
    MeshGroups groups(mesh, 0, fresh_client());
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto error = [&](Placement from, Placement to, const std::string& axis = "x") -> std::string {
        try {
            redistribute(x, from, to, groups, axis);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    };
    auto msg = error(Replicate{}, Shard{0});
    EXPECT_NE(msg.find("redistribute Replicate -> Shard(0) over axis \"x\" (size 3)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("dim 0 of x (shape {4,6}) is 4, which does not split evenly over 3 ranks"),
              std::string::npos)
        << msg;
    msg = error(Partial{}, Shard{0});
    EXPECT_NE(msg.find("is 4, which does not split evenly over 3 ranks"), std::string::npos) << msg;
    msg = error(Shard{1}, Shard{0});
    EXPECT_NE(msg.find("dim 0 of x (shape {4,6}) is 4"), std::string::npos) << msg;
    msg = error(Replicate{}, Partial{});
    EXPECT_NE(msg.find("no redistribution from Replicate to Partial(sum)"), std::string::npos)
        << msg;
    msg = error(Shard{0}, Partial{ReduceOp::MAX});
    EXPECT_NE(msg.find("no redistribution from Shard(0) to Partial(max)"), std::string::npos)
        << msg;
    msg = error(Shard{2}, Replicate{});
    EXPECT_NE(msg.find("the source dim is 2; x has shape {4,6}, expected 0..1"), std::string::npos)
        << msg;
    msg = error(Replicate{}, Shard{-1});
    EXPECT_NE(msg.find("the target dim is -1"), std::string::npos) << msg;
    msg = error(Replicate{}, Shard{0}, "y");
    EXPECT_NE(msg.find("no axis named \"y\""), std::string::npos) << msg;
    // None of the failed calls inserted a collective: the key counter is untouched.
    EXPECT_EQ(groups.group("x").param(CollectiveMode::ALL_GATHER, dtype::Float32()).key,
              "mesh/x:0");
    msg = "";
    try {
        local_shape({4, 6}, Shard{1}, 4);
    } catch (const ValueError& e) {
        msg = e.what();
    }
    EXPECT_NE(msg.find("dim 1 of shape {4,6} is 6, which does not split evenly over 4 ranks"),
              std::string::npos)
        << msg;
}
