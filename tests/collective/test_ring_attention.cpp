// RingAttention against single-rank Attention: one graph holds every rank (rank r on comp
// node cpu<r>), shards q, k and v of a whole sequence into the context-parallel layout, runs
// ring attention and restores out and lse; forward and the gradients of q, k and v (through a
// loss on out and lse) must match Attention's within 1e-5 relative, for 1-5 ranks, causal or
// not, both rotations, balanced or not. Also: finite differences on a few cases, the merge's
// worked values, two graphs on threads, and the errors.
#include "checker.h"

#include "collective/ring_attention.h"
#include "comm/group_client.h"
#include "graph/grad.h"
#include "operators/attention_kernels.h"
#include "parallel/context_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

using namespace braid;
using namespace braid::test;
using opr::RingRotation;

namespace {

struct RingCase {
    uint32_t ranks;
    bool causal;
    RingRotation rotation;
    bool balanced;
    std::string name() const {
        return fmt::format("{} ranks, {}, {}, {}", ranks, causal ? "causal" : "not causal",
                           opr::ring_rotation_name(rotation), balanced ? "balanced" : "unbalanced");
    }
};

CompNode cpu(uint32_t r) {
    return CompNode::load(fmt::format("cpu{}", r));
}

//! {out, lse} over the whole sequence, computed by every rank's RingAttention on its shard
//! and restored to sequence order (sequence on dim 2 of q, k, v and out, dim 2 of lse).
SymbolVarArray ring_over_ranks(SymbolVar q, SymbolVar k, SymbolVar v, const RingCase& c,
                               std::shared_ptr<comm::GroupClient> client, const std::string& key) {
    SymbolVarArray outs, lses;
    for (uint32_t r = 0; r < c.ranks; ++r) {
        auto shard = [&](SymbolVar x) {
            return parallel::sequence_shard(x, 2, c.ranks, r, c.balanced);
        };
        auto qr = shard(q), kr = shard(k), vr = shard(v);
        // Each rank's operator runs on its own comp node, as ranks do.
        opr::RingAttentionParam p;
        p.key = key;
        p.nr_devices = c.ranks;
        p.rank = int32_t(r);
        p.group_client = client;
        p.causal = c.causal;
        p.rotation = c.rotation;
        p.load_balance = c.balanced;
        auto res = opr::RingAttention::make(qr, kr, vr, p, OperatorConfig::on(cpu(r)));
        outs.push_back(res[0]);
        lses.push_back(res[1]);
    }
    return {parallel::sequence_restore(opr::concat(outs, 2), 2, c.ranks, c.balanced),
            parallel::sequence_restore(opr::concat(lses, 2), 2, c.ranks, c.balanced)};
}

std::shared_ptr<comm::GroupClient> fresh_client() {
    return std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
}

//! Relative comparison: |a − b| <= rtol · max|b| (+ a tiny floor) element-wise.
void expect_close(const Tensor& a, const Tensor& b, double rtol, const std::string& what) {
    ASSERT_EQ(a.shape(), b.shape()) << what;
    const float *ap = a.ptr<float>(), *bp = b.ptr<float>();
    size_t n = a.shape().total_nr_elems();
    double scale = 0;
    for (size_t i = 0; i < n; ++i) scale = std::max(scale, double(std::fabs(bp[i])));
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
        double diff = std::fabs(double(ap[i]) - double(bp[i]));
        if (diff > rtol * scale + 1e-7 && bad++ < 3)
            ADD_FAILURE() << what << " [" << i << "]: " << ap[i] << " vs " << bp[i];
    }
}

} // namespace

class RingAttentionTest : public ::testing::Test {
protected:
    void SetUp() override { register_all_operators(); }
};

TEST_F(RingAttentionTest, ForwardAndGradientsMatchSingleRankAttention) {
    std::mt19937 rng(17);
    for (uint32_t n : {1u, 2u, 3u, 4u, 5u})
        for (bool causal : {false, true})
            for (auto rotation : {RingRotation::ALL_GATHER, RingRotation::RING})
                for (bool balanced : {true, false}) {
                    RingCase c{n, causal, rotation, balanced};
                    SCOPED_TRACE(c.name());
                    size_t seq = 2 * n * 3; // 3 positions per chunk
                    TensorShape qs{2, 2, seq, 8}, vs{2, 2, seq, 5};
                    Tensor qv = random_tensor(qs, dtype::Float32(), rng);
                    Tensor kv = random_tensor(qs, dtype::Float32(), rng);
                    Tensor vv = random_tensor(vs, dtype::Float32(), rng);
                    Tensor wo = random_tensor({2, 2, seq, 5}, dtype::Float32(), rng);
                    Tensor wl = random_tensor({2, 2, seq}, dtype::Float32(), rng);
                    auto g = ComputingGraph::make();
                    auto q = opr::Input::make(*g, "q", dtype::Float32(), qs, cpu(0));
                    auto k = opr::Input::make(*g, "k", dtype::Float32(), qs, cpu(0));
                    auto v = opr::Input::make(*g, "v", dtype::Float32(), vs, cpu(0));
                    auto w1 = opr::Input::make(*g, "wo", dtype::Float32(), wo.shape(), cpu(0));
                    auto w2 = opr::Input::make(*g, "wl", dtype::Float32(), wl.shape(), cpu(0));
                    auto ring = ring_over_ranks(q, k, v, c, fresh_client(), "ring");
                    auto single = opr::Attention::make(q, k, v, {causal, std::nullopt});
                    auto loss_of = [&](const SymbolVarArray& r) {
                        return opr::reduce_sum(r[0] * w1) + opr::reduce_sum(r[1] * w2);
                    };
                    auto ring_grads = grad(loss_of(ring), {q, k, v});
                    auto single_grads = grad(loss_of(single), {q, k, v});
                    std::vector<OutputSpec> outs{ring[0], ring[1], single[0], single[1]};
                    for (auto& x : ring_grads) outs.emplace_back(x);
                    for (auto& x : single_grads) outs.emplace_back(x);
                    auto exec = g->compile(outs);
                    exec->feed("q", qv);
                    exec->feed("k", kv);
                    exec->feed("v", vv);
                    exec->feed("wo", wo);
                    exec->feed("wl", wl);
                    exec->run();
                    expect_close(exec->output(0), exec->output(2), 1e-5, "out");
                    expect_close(exec->output(1), exec->output(3), 1e-5, "lse");
                    const char* names[] = {"dq", "dk", "dv"};
                    for (size_t i = 0; i < 3; ++i)
                        expect_close(exec->output(4 + i), exec->output(7 + i), 1e-5, names[i]);
                }
}

TEST_F(RingAttentionTest, GradientsMatchFiniteDifferences) {
    for (RingCase c : {RingCase{2, true, RingRotation::RING, true},
                       RingCase{3, true, RingRotation::ALL_GATHER, false},
                       RingCase{3, false, RingRotation::RING, true}}) {
        OprCase oc;
        oc.name = c.name();
        size_t seq = 2 * c.ranks * 2;
        oc.shapes = {{1, 2, seq, 4}, {1, 2, seq, 4}, {1, 2, seq, 3}};
        auto client = fresh_client();
        int round = 0; // each graph the checker builds gets its own key
        oc.build = [c, client, round](const SymbolVarArray& in) mutable {
            return ring_over_ranks(in[0], in[1], in[2], c, client, fmt::format("fd{}", round++));
        };
        oc.check_grad = true;
        oc.fixed_batch = "the ranks' shards are sliced at the built shapes";
        check_gradient(oc);
    }
}

TEST_F(RingAttentionTest, MergeIsOverflowSafeAndExact) {
    // (out, lse) pairs merged: (1, 0) + (3, 0) = (2, ln 2); (1, 0) + (5, ln 3) = (4, ln 4);
    // (2, 100) + (7, −100) = (2, 100) with no overflow; a side with lse = −inf has no weight.
    struct Case {
        float out, lse, out_b, lse_b, want_out, want_lse;
    };
    const float ninf = -std::numeric_limits<float>::infinity();
    for (auto t :
         {Case{1, 0, 3, 0, 2, std::log(2.f)}, Case{1, 0, 5, std::log(3.f), 4, std::log(4.f)},
          Case{2, 100, 7, -100, 2, 100}, Case{2, 100, -7, 300, -7, 300}, Case{0, ninf, 3, 1, 3, 1},
          Case{3, 1, 0, ninf, 3, 1}}) {
        float out = t.out, lse = t.lse;
        opr::kern::attention_merge(1, 1, &out, &lse, &t.out_b, &t.lse_b);
        EXPECT_NEAR(out, t.want_out, 1e-6) << t.out << "," << t.lse << " + " << t.out_b;
        EXPECT_NEAR(lse, t.want_lse, 1e-6) << t.out << "," << t.lse << " + " << t.out_b;
    }
}

TEST_F(RingAttentionTest, RanksAsGraphsOnThreads) {
    // Each rank builds its own graph with host-sharded inputs; the restored output matches
    // single-rank attention.
    const uint32_t n = 3;
    std::mt19937 rng(23);
    TensorShape qs{1, 2, 4 * n, 4};
    Tensor q = random_tensor(qs, dtype::Float32(), rng),
           k = random_tensor(qs, dtype::Float32(), rng),
           v = random_tensor(qs, dtype::Float32(), rng);
    auto qsh = parallel::shard_sequence(q, 2, n, true),
         ksh = parallel::shard_sequence(k, 2, n, true),
         vsh = parallel::shard_sequence(v, 2, n, true);
    auto client = fresh_client();
    std::vector<Tensor> outs(n);
    std::vector<std::string> errors(n);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            try {
                auto g = ComputingGraph::make();
                auto in = [&](const char* name, const Tensor& t) {
                    return opr::Input::make(*g, name, dtype::Float32(), t.shape(), cpu(r));
                };
                auto res = opr::ring_attention(in("q", qsh[r]), in("k", ksh[r]), in("v", vsh[r]),
                                               {"threads", n, r, client}, {.causal = true});
                auto exec = g->compile({res[0]});
                exec->feed("q", qsh[r]);
                exec->feed("k", ksh[r]);
                exec->feed("v", vsh[r]);
                exec->run();
                outs[r] = exec->output(0).copy();
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
    auto g = ComputingGraph::make();
    auto single =
        opr::Attention::make(opr::ImmutableTensor::make(*g, q), opr::ImmutableTensor::make(*g, k),
                             opr::ImmutableTensor::make(*g, v), {true, std::nullopt});
    auto exec = g->compile({single[0]});
    exec->run();
    expect_close(parallel::restore_sequence(outs, 2, true), exec->output(0), 1e-5, "out");
}

TEST_F(RingAttentionTest, ErrorsNameTheOperatorAndTheValues) {
    auto client = fresh_client();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {1, 2, 3, 4});
    auto message = [](auto&& body) -> std::string {
        try {
            body();
        } catch (const std::exception& e) {
            return e.what();
        }
        return "";
    };
    // An odd shard cannot hold the two chunks of the balanced layout.
    std::string e = message([&] {
        opr::ring_attention(x, x, x, {"odd", 2, 0, client}, {.causal = true});
    });
    EXPECT_NE(e.find("6 positions (3 per rank) into 2N = 4 chunks"), std::string::npos) << e;
    e = message([&] { opr::ring_attention(x, x, x, {"rank", 2, 2, client}); });
    EXPECT_NE(e.find("rank 2 is not in 0..1"), std::string::npos) << e;
    auto y = opr::Input::make(*g, "y", dtype::Float32(), {1, 2, 2, 4});
    e = message([&] { opr::ring_attention(x, y, y, {"kv", 2, 0, client}); });
    EXPECT_NE(e.find("as many keys as queries"), std::string::npos) << e;
    // A model built for 2 ranks refuses another world size at load.
    auto z = opr::Input::make(*g, "z", dtype::Float32(), {1, 2, 4, 4});
    std::vector<uint8_t> bytes;
    dump(opr::ring_attention(z, z, z, {"load", 2, 0, client}, {.causal = true}), bytes);
    LoadOptions lopt;
    lopt.collective.world_size = 3;
    lopt.collective.rank = 1;
    e = message([&] { load(bytes, lopt); });
    EXPECT_NE(e.find("was built for 2 ranks"), std::string::npos) << e;
    e = message([&] { parallel::sequence_positions(10, 3, 0, true); });
    EXPECT_NE(e.find("10 positions does not split into 6 equal chunks"), std::string::npos) << e;
}

TEST(ContextParallelLayout, ZigzagPositionsFollowTheHeadTailRule) {
    using V = std::vector<size_t>;
    EXPECT_EQ(parallel::sequence_positions(8, 2, 0, true), (V{0, 1, 6, 7}));
    EXPECT_EQ(parallel::sequence_positions(8, 2, 1, true), (V{2, 3, 4, 5}));
    EXPECT_EQ(parallel::sequence_positions(16, 4, 0, true), (V{0, 1, 14, 15}));
    EXPECT_EQ(parallel::sequence_positions(16, 4, 1, true), (V{2, 3, 12, 13}));
    EXPECT_EQ(parallel::sequence_positions(16, 4, 2, true), (V{4, 5, 10, 11}));
    EXPECT_EQ(parallel::sequence_positions(16, 4, 3, true), (V{6, 7, 8, 9}));
    EXPECT_EQ(parallel::sequence_positions(6, 3, 1, false), (V{2, 3}));
    // Host shards hold those positions, and restoring gives the sequence back.
    Tensor x({2, 16, 3}, dtype::Float32());
    for (size_t i = 0; i < x.shape().total_nr_elems(); ++i) x.ptr<float>()[i] = float(i);
    auto shards = parallel::shard_sequence(x, 1, 4, true);
    ASSERT_EQ(shards.size(), 4u);
    EXPECT_EQ(shards[1].shape(), TensorShape({2, 4, 3}));
    auto pos = parallel::sequence_positions(16, 4, 1, true);
    for (size_t b = 0; b < 2; ++b)
        for (size_t i = 0; i < 4; ++i)
            for (size_t c = 0; c < 3; ++c)
                EXPECT_EQ(shards[1].ptr<float>()[(b * 4 + i) * 3 + c],
                          x.ptr<float>()[(b * 16 + pos[i]) * 3 + c]);
    expect_tensor_near(parallel::restore_sequence(shards, 1, true), x, 0, 0, "restored");
    // In a graph: layout then shard r's block equals sequence_shard, and restore undoes layout.
    auto g = ComputingGraph::make();
    auto xs = opr::ImmutableTensor::make(*g, x);
    auto laid = parallel::sequence_layout(xs, 1, 4, true);
    auto exec = g->compile({parallel::sequence_shard(xs, 1, 4, 2, true),
                            parallel::sequence_restore(laid, 1, 4, true), laid});
    exec->run();
    expect_tensor_near(exec->output(0), shards[2], 0, 0, "graph shard");
    expect_tensor_near(exec->output(1), x, 0, 0, "graph restore");
}
