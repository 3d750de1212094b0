// CollectiveComm (and, last, RemoteSend / RemoteRecv and ring attention) on the "mpi" backend: one
// graph per process under mpirun. Every process draws every rank's inputs from a seed all ranks
// share, so each can compute what any rank must get (tests/collective/collective_reference.h).
// Checked: every mode forward with two roots, the static output shapes of non-roots before any rank
// executes, and the gradients of a loss summed over ranks for the modes whose backward pass is
// itself a collective.
#include "checker.h"
#include "collective/remote_send_recv.h"
#include "collective/ring_attention.h"
#include "collective_reference.h"
#include "comm/mpi_communicator.h"
#include "mpi_test_main.h"
#include "parallel/context_parallel.h"

#include <gtest/gtest.h>

using namespace braid;
using namespace braid::test;
using opr::CollectiveMode;

namespace {

uint32_t world_rank() {
    return uint32_t(comm::mpi_world_rank());
}
uint32_t world_size() {
    return uint32_t(comm::mpi_world_size());
}

//! A key no earlier test used, equal on every rank (all run the same tests in order).
std::string fresh_key(const std::string& what) {
    static int counter = 0;
    return fmt::format("mpi-cc-{}-{}", what, counter++);
}

//! Every rank's input of `shape` for `mode` (empty for ranks without one), from `seed`.
std::vector<Tensor> inputs_of_all_ranks(CollectiveMode mode, const TensorShape& shape,
                                        uint32_t root, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<Tensor> inputs(world_size());
    for (uint32_t r = 0; r < world_size(); ++r)
        if (collective_has_input(mode, r == root))
            inputs[r] = random_tensor(shape, dtype::Float32(), rng);
    return inputs;
}

//! This process's collective of `mode` in `graph`, on input `x` (invalid for non-roots of
//! BROADCAST and SCATTER).
SymbolVar collective(ComputingGraph& graph, SymbolVar x, CollectiveMode mode,
                     const std::string& key, uint32_t root) {
    return opr::CollectiveComm::make(x, graph,
                                     collective_param(mode, key, world_size(), world_rank(), root,
                                                      comm::test::mpi_test_client(), "mpi"));
}

void barrier() {
    BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

TEST(MpiCollectiveComm, EveryModeForwardMatchesReference) {
    register_all_operators();
    uint32_t n = world_size(), rank = world_rank();
    for (uint32_t root : {0u, n - 1})
        for (auto mode : all_collective_modes()) {
            SCOPED_TRACE(
                fmt::format("{}, {} ranks, root {}", opr::collective_mode_name(mode), n, root));
            auto inputs = inputs_of_all_ranks(mode, {n * 2, 3}, root, 7 * n + uint32_t(mode));
            Tensor expect = collective_reference(mode, inputs, rank, root);
            auto graph = ComputingGraph::make();
            SymbolVar x;
            if (!inputs[rank].empty())
                x = opr::Input::make(*graph, "x", dtype::Float32(), inputs[rank].shape());
            auto y = collective(*graph, x, mode, fresh_key("fwd"), root);
            auto exec = graph->compile({y});
            EXPECT_EQ(y.shape(), expect.shape()); // static: known before execution
            if (x.valid()) exec->feed("x", inputs[rank]);
            for (int run = 0; run < 2; ++run) { // the second run reuses the communicator
                exec->run();
                expect_tensor_near(exec->output(0), expect, 1e-6, 1e-6,
                                   fmt::format("rank {} run {}", rank, run));
            }
        }
}

TEST(MpiCollectiveComm, NonRootShapesAreKnownBeforeAnyRankExecutes) {
    register_all_operators();
    uint32_t n = world_size(), rank = world_rank(), root = n - 1;
    for (auto mode : {CollectiveMode::BROADCAST, CollectiveMode::SCATTER}) {
        SCOPED_TRACE(opr::collective_mode_name(mode));
        TensorShape root_shape{n * 3, 5};
        auto graph = ComputingGraph::make();
        SymbolVar x;
        if (rank == root) x = opr::Input::make(*graph, "x", dtype::Float32(), root_shape);
        auto y = collective(*graph, x, mode, fresh_key("static"), root);
        auto exec = graph->compile({y});
        // compile() waited for the root's shape; nobody has executed yet.
        ASSERT_TRUE(y.node()->shape_known());
        TensorShape expect = mode == CollectiveMode::BROADCAST ? root_shape : TensorShape{3, 5};
        EXPECT_EQ(y.shape(), expect) << "rank " << rank;
        barrier();
        std::mt19937 rng(11);
        Tensor value = random_tensor(root_shape, dtype::Float32(), rng);
        if (x.valid()) exec->feed("x", value);
        exec->run();
        std::vector<Tensor> inputs(n);
        inputs[root] = value;
        expect_tensor_near(exec->output(0), collective_reference(mode, inputs, rank, root), 1e-6,
                           1e-6, fmt::format("rank {}", rank));
    }
}

//! d(sum over ranks k of <y_k, w_k>) / d x_rank, for y_k the output of `mode` on rank k.
Tensor expected_input_grad(CollectiveMode mode, const std::vector<Tensor>& w,
                           const TensorShape& input_shape, uint32_t rank) {
    size_t n = w.size(), e = input_shape.total_nr_elems();
    Tensor g(input_shape, dtype::Float32());
    float* out = g.ptr<float>();
    for (size_t i = 0; i < e; ++i) {
        double v = 0;
        switch (mode) {
        case CollectiveMode::ALL_REDUCE_SUM: // y_k = sum_j x_j
        case CollectiveMode::BROADCAST:      // y_k = x_root
            for (size_t k = 0; k < n; ++k) v += w[k].at(i);
            break;
        case CollectiveMode::ALL_GATHER: // block `rank` of every y_k is x_rank
            for (size_t k = 0; k < n; ++k) v += w[k].at(rank * e + i);
            break;
        case CollectiveMode::REDUCE_SCATTER_SUM: // y_k = block k of sum_j x_j
            v = w[i / (e / n)].at(i % (e / n));
            break;
        default:
            ADD_FAILURE() << "no expected gradient for " << opr::collective_mode_name(mode);
        }
        out[i] = float(v);
    }
    return g;
}

TEST(MpiCollectiveComm, GradientsOfALossSummedOverRanks) {
    // Rank k's loss is <y_k, w_k>; the gradient each rank gets for its input is that of the
    // sum over ranks, which the backward collective assembles. Rank k also differentiates
    // w.r.t. w_k (= y_k): a BROADCAST non-root has no input, yet must join the backward
    // collective the root waits for.
    register_all_operators();
    uint32_t n = world_size(), rank = world_rank(), root = n - 1;
    for (auto mode : {CollectiveMode::ALL_REDUCE_SUM, CollectiveMode::ALL_GATHER,
                      CollectiveMode::REDUCE_SCATTER_SUM, CollectiveMode::BROADCAST}) {
        SCOPED_TRACE(fmt::format("{}, {} ranks", opr::collective_mode_name(mode), n));
        TensorShape in_shape{n * 2, 3};
        auto inputs = inputs_of_all_ranks(mode, in_shape, root, 31 * n + uint32_t(mode));
        std::vector<Tensor> forward(n), weights(n);
        std::mt19937 rng(97);
        for (uint32_t k = 0; k < n; ++k) {
            forward[k] = collective_reference(mode, inputs, k, root);
            weights[k] = random_tensor(forward[k].shape(), dtype::Float32(), rng, -1, 1);
        }
        auto graph = ComputingGraph::make();
        SymbolVar x;
        if (!inputs[rank].empty()) x = opr::Input::make(*graph, "x", dtype::Float32(), in_shape);
        auto y = collective(*graph, x, mode, fresh_key("grad"), root);
        auto w = opr::Input::make(*graph, "w", dtype::Float32(), weights[rank].shape());
        auto loss = opr::reduce_sum(y * w);
        SymbolVarArray wrt{w};
        if (x.valid()) wrt.push_back(x);
        auto grads = grad(loss, wrt);
        std::vector<OutputSpec> outputs(grads.begin(), grads.end());
        auto exec = graph->compile(outputs);
        exec->feed("w", weights[rank]);
        if (x.valid()) exec->feed("x", inputs[rank]);
        exec->run();
        expect_tensor_near(exec->output(0), forward[rank], 1e-6, 1e-6,
                           fmt::format("d loss / d w on rank {}", rank));
        if (x.valid())
            expect_tensor_near(exec->output(1), expected_input_grad(mode, weights, in_shape, rank),
                               1e-5, 1e-5, fmt::format("d loss / d x on rank {}", rank));
    }
}

TEST(MpiRemoteSendRecv, EveryDtypeAndTheGradientBetweenTwoProcesses) {
    // Rank 0 sends to the last rank; the other ranks take no part. Values of several dtypes,
    // then h = x * a sent, loss = sum(received * w) on the receiver, and both gradients.
    register_all_operators();
    uint32_t n = world_size(), rank = world_rank(), last = n - 1;
    if (n < 2) GTEST_SKIP() << "needs two processes";
    auto client = comm::test::mpi_test_client();
    std::mt19937 rng(11); // the same draws on every rank
    for (DType dt : {dtype::Float32(), dtype::BFloat16(), dtype::Int64(), dtype::Uint8()}) {
        Tensor value = random_tensor({3, 4}, dt, rng);
        std::string key = fresh_key("p2p");
        auto graph = ComputingGraph::make();
        if (rank == 0) {
            auto x = opr::Input::make(*graph, "x", dt, {3, 4});
            auto exec = graph->compile({opr::remote_send(x, key, int32_t(last), client, "mpi")});
            exec->feed("x", value);
            exec->run();
        } else if (rank == last) {
            auto y = opr::remote_recv(*graph, key, 0, dt, client, "mpi");
            auto exec = graph->compile({y});
            EXPECT_EQ(y.shape(), TensorShape({3, 4}));
            exec->run();
            expect_tensor_near(exec->output(0), value, 0, 0, dt.name());
        }
        barrier();
    }
    Tensor xv = random_tensor({5}, dtype::Float32(), rng),
           av = random_tensor({5}, dtype::Float32(), rng),
           wv = random_tensor({5}, dtype::Float32(), rng);
    std::string key = fresh_key("p2p-grad");
    auto graph = ComputingGraph::make();
    if (rank == 0) {
        auto x = opr::Input::make(*graph, "x", dtype::Float32(), {5});
        auto a = opr::Input::make(*graph, "a", dtype::Float32(), {5});
        auto sent = opr::remote_send(x * a, key, int32_t(last), client, "mpi");
        auto exec = graph->compile({sent, grad(sent, x)});
        exec->feed("x", xv);
        exec->feed("a", av);
        exec->run();
        for (size_t i = 0; i < 5; ++i)
            EXPECT_NEAR(exec->output(1).ptr<float>()[i], av.ptr<float>()[i] * wv.ptr<float>()[i],
                        1e-6);
    } else if (rank == last) {
        auto w = opr::Input::make(*graph, "w", dtype::Float32(), {5});
        auto r = opr::remote_recv(*graph, key, 0, dtype::Float32(), client, "mpi");
        auto exec = graph->compile({grad(opr::reduce_sum(r * w), w)});
        exec->feed("w", wv);
        exec->run();
        for (size_t i = 0; i < 5; ++i)
            EXPECT_NEAR(exec->output(0).ptr<float>()[i], xv.ptr<float>()[i] * av.ptr<float>()[i],
                        1e-6);
    }
    barrier();
}

TEST(MpiRingAttention, MatchesSingleRankAttentionForwardAndBackward) {
    // Every process is one rank of the ring; each also computes single-rank attention on the
    // whole sequence and compares its shard of out and of the gradients.
    register_all_operators();
    uint32_t n = world_size(), rank = world_rank();
    std::mt19937 rng(29);
    TensorShape qs{1, 2, 4 * n, 8};
    Tensor q = random_tensor(qs, dtype::Float32(), rng),
           k = random_tensor(qs, dtype::Float32(), rng),
           v = random_tensor(qs, dtype::Float32(), rng),
           w = random_tensor(qs, dtype::Float32(), rng);
    for (auto rotation : {opr::RingRotation::ALL_GATHER, opr::RingRotation::RING}) {
        SCOPED_TRACE(opr::ring_rotation_name(rotation));
        auto shard = [&](const Tensor& t) { return parallel::shard_sequence(t, 2, n, true)[rank]; };
        // Single rank, whole sequence: out and the gradients of sum(out * w), then this rank's
        // shards of them.
        auto ref = ComputingGraph::make();
        auto in = [&](ComputingGraph& g, const char* name, const TensorShape& shape) {
            return opr::Input::make(g, name, dtype::Float32(), shape);
        };
        auto rq = in(*ref, "q", qs), rk = in(*ref, "k", qs), rv = in(*ref, "v", qs),
             rw = in(*ref, "w", qs);
        auto rout = opr::Attention::make(rq, rk, rv, {true, std::nullopt})[0];
        auto rgrads = grad(opr::reduce_sum(rout * rw), {rq, rk, rv});
        auto rexec = ref->compile({rout, rgrads[0], rgrads[1], rgrads[2]});
        for (auto [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"w", &w}})
            rexec->feed(name, *t);
        rexec->run();
        // This process's rank of the ring.
        auto g = ComputingGraph::make();
        TensorShape ss = shard(q).shape();
        auto sq = in(*g, "q", ss), sk = in(*g, "k", ss), sv = in(*g, "v", ss), sw = in(*g, "w", ss);
        opr::RingGroup group{fresh_key("ring"), n, rank, comm::test::mpi_test_client(), "mpi"};
        auto out =
            opr::ring_attention(sq, sk, sv, group, {.causal = true, .rotation = rotation})[0];
        auto grads = grad(opr::reduce_sum(out * sw), {sq, sk, sv});
        auto exec = g->compile({out, grads[0], grads[1], grads[2]});
        for (auto [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"w", &w}})
            exec->feed(name, shard(*t));
        exec->run();
        const char* names[] = {"out", "dq", "dk", "dv"};
        for (size_t i = 0; i < 4; ++i)
            expect_tensor_near(exec->output(i), shard(rexec->output(i).copy()), 1e-5, 1e-5,
                               fmt::format("{} on rank {}", names[i], rank));
        barrier();
    }
}

} // namespace
