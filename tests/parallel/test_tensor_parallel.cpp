// Tensor parallelism: the Megatron MLP and attention blocks on 2 and 4 ranks (graphs of this
// process through Pmap, the local backend), forward and every gradient, against the same
// block on one device built from plain operators; within 1e-5 relative.
#include "parallel/tensor_parallel.h"

#include "checker.h"
#include "parallel/pmap.h"
#include "tensor_parallel_blocks.h"

#include "braid.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

using namespace braid;
using namespace braid::parallel;
using braid::test::expect_tensor_near;
using braid::test::random_tensor;

namespace {

constexpr double RTOL = 1e-5, ATOL = 1e-6;

//! One argument of a block: its name, global shape and layout over the "tp" axis.
struct Arg {
    std::string name;
    TensorShape shape;
    enum Layout { REPLICATED, COLUMNS, ROWS } layout;
};

ShardingSpec spec_of(const Mesh& mesh, const Arg& a) {
    switch (a.layout) {
    case Arg::COLUMNS:
        return column_parallel_spec(mesh, "tp", a.shape.ndim());
    case Arg::ROWS:
        return row_parallel_spec(mesh, "tp", a.shape.ndim());
    default:
        return replicated_spec(mesh, a.shape.ndim());
    }
}

/*!
 * Runs `tp_block` on `n` ranks and `reference` on one device with the same random values of
 * `args` (args[0] is the block input x, args[1] the output-gradient weights g), and compares
 * the output y, the loss sum(y * g)'s gradient w.r.t. x (psum'd over tp) and w.r.t. every
 * other argument after g (assembled from their shards).
 */
void check_block(uint32_t n, const std::vector<Arg>& args,
                 const std::function<SymbolVar(MeshGroups&, const SymbolVarArray&)>& tp_block,
                 const std::function<SymbolVar(const SymbolVarArray&)>& reference) {
    Mesh mesh({n}, {"tp"});
    std::vector<PmapArg> pargs;
    std::vector<ShardingSpec> out_specs = {replicated_spec(mesh, args[0].shape.ndim()),
                                           replicated_spec(mesh, args[0].shape.ndim())};
    for (auto& a : args) pargs.push_back({a.name, a.shape, dtype::Float32(), spec_of(mesh, a)});
    for (size_t i = 2; i < args.size(); ++i) out_specs.push_back(spec_of(mesh, args[i]));
    auto with_grads = [&](SymbolVar y, const SymbolVarArray& in) {
        auto loss = opr::reduce_sum(y * in[1]);
        SymbolVarArray wrt = {in[0]};
        for (size_t i = 2; i < in.size(); ++i) wrt.push_back(in[i]);
        auto grads = grad(loss, wrt);
        SymbolVarArray outs = {y};
        for (auto& g : grads) outs.push_back(g);
        return outs;
    };
    Pmap f(
        [&](SpmdContext& ctx, const SymbolVarArray& in) {
            auto outs = with_grads(tp_block(ctx.groups(), in), in);
            outs[1] = ctx.psum(outs[1], "tp"); // each rank's input gradient is a part of it
            return outs;
        },
        mesh, pargs, out_specs);

    auto g = ComputingGraph::make();
    SymbolVarArray in;
    for (auto& a : args) in.push_back(opr::Input::make(*g, a.name, dtype::Float32(), a.shape));
    auto ref_outs = with_grads(reference(in), in);
    auto exec = g->compile(std::vector<OutputSpec>(ref_outs.begin(), ref_outs.end()));

    std::mt19937 rng(1000 + n);
    std::vector<Tensor> values;
    for (auto& a : args) {
        values.push_back(random_tensor(a.shape, dtype::Float32(), rng, -1.0, 1.0));
        exec->feed(a.name, values.back());
    }
    exec->run();
    auto got = f(values);
    ASSERT_EQ(got.size(), ref_outs.size());
    for (size_t i = 0; i < got.size(); ++i) {
        std::string what = i == 0 ? "y" : i == 1 ? "d loss / d x" : "d loss / d " + args[i].name;
        // d loss / d bk is zero in exact arithmetic (softmax ignores a shift that every key of a
        // query shares), so both sides are rounding noise of terms of order 1, whose size
        // depends on the kernel path (ISA, thread split): compared against 0 within 1e-5.
        // Elsewhere the absolute part scales with the tensor's largest magnitude: the ranks sum
        // their partial results in another order than the single device does.
        double largest = 0;
        const Tensor& want = exec->output(i);
        for (size_t e = 0; e < want.shape().total_nr_elems(); ++e)
            largest = std::max(largest, std::abs(double(want.at(e))));
        double atol = i >= 2 && args[i].name == "bk" ? 1e-5 : std::max(ATOL, 1e-5 * largest);
        expect_tensor_near(got[i], exec->output(i), RTOL, atol,
                           fmt::format("{} ranks: {}", n, what));
    }
}

} // namespace

class TensorParallel : public ::testing::Test {
protected:
    void SetUp() override {
        register_all_operators();
        setenv("BRAID_COMM_TIMEOUT", "60", /*overwrite=*/0);
    }
};

TEST_F(TensorParallel, MlpMatchesOneDeviceForwardAndGradientsOnTwoAndFourRanks) {
    // 8 tokens, d_model 16, d_ff 32: W1 split by columns, W2 by rows.
    std::vector<Arg> args = {{"x", {8, 16}, Arg::REPLICATED}, {"g", {8, 16}, Arg::REPLICATED},
                             {"w1", {16, 32}, Arg::COLUMNS},  {"b1", {32}, Arg::COLUMNS},
                             {"w2", {32, 16}, Arg::ROWS},     {"b2", {16}, Arg::REPLICATED}};
    for (uint32_t n : {2u, 4u})
        check_block(
            n, args,
            [](MeshGroups& groups, const SymbolVarArray& in) {
                return tensor_parallel_mlp(in[0], {in[2], in[3], in[4], in[5]}, groups, "tp");
            },
            [](const SymbolVarArray& in) {
                return opr::matmul(opr::gelu(opr::matmul(in[0], in[2]) + in[3]), in[4]) + in[5];
            });
}

TEST_F(TensorParallel, AttentionMatchesOneDeviceForwardAndGradientsOnTwoAndFourRanks) {
    // 8 tokens, d_model 16, 4 causal heads of 4: whole heads per rank (2 or 1).
    std::vector<Arg> args = {{"x", {8, 16}, Arg::REPLICATED}, {"g", {8, 16}, Arg::REPLICATED},
                             {"wq", {16, 16}, Arg::COLUMNS},  {"bq", {16}, Arg::COLUMNS},
                             {"wk", {16, 16}, Arg::COLUMNS},  {"bk", {16}, Arg::COLUMNS},
                             {"wv", {16, 16}, Arg::COLUMNS},  {"bv", {16}, Arg::COLUMNS},
                             {"wo", {16, 16}, Arg::ROWS},     {"bo", {16}, Arg::REPLICATED}};
    for (uint32_t n : {2u, 4u})
        check_block(
            n, args,
            [](MeshGroups& groups, const SymbolVarArray& in) {
                TensorParallelAttention w{in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9]};
                return tensor_parallel_attention(in[0], w, 4, /*causal=*/true, groups, "tp");
            },
            [](const SymbolVarArray& in) {
                auto split_heads = [](SymbolVar t) {
                    return opr::dimshuffle(t.reshape(std::vector<long>{1, -1, 4, 4}), {0, 2, 1, 3});
                };
                auto q = split_heads(opr::matmul(in[0], in[2]) + in[3]);
                auto k = split_heads(opr::matmul(in[0], in[4]) + in[5]);
                auto v = split_heads(opr::matmul(in[0], in[6]) + in[7]);
                auto ctx = opr::scaled_dot_product_attention(q, k, v, true)[0];
                auto merged = opr::dimshuffle(ctx, {0, 2, 1, 3}).reshape(std::vector<long>{-1, 16});
                return opr::matmul(merged, in[8]) + in[9];
            });
}

TEST_F(TensorParallel, AttentionRefusesHeadsThatDoNotSplitOverTheRanks) {
    Mesh mesh({4}, {"tp"});
    auto g = ComputingGraph::make();
    MeshGroups groups(mesh, 0, std::make_shared<comm::InProcessGroupClient>());
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {8, 12});
    TensorParallelAttention w;
    try {
        tensor_parallel_attention(x, w, 6, false, groups, "tp");
        FAIL() << "6 heads over 4 ranks were accepted";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("6 heads over 4 ranks"), std::string::npos)
            << e.what();
    }
}

// Deterministic mode (docs/determinism.md): a column-parallel product computes each element
// of its slice as one rank's whole ordered chain, attention computes each head's rows alone,
// and the row-parallel product's partial sums are added in rank order, so the MLP and the
// attention block on 1, 2 and 3 ranks give the same bits as one device that multiplies the
// same row blocks of the row-parallel weight and adds them in rank order.
TEST_F(TensorParallel, DeterministicBlocksAreTheSameBitsAsOneDeviceWithTheSameSplit) {
    DeterministicScope mode(true);
    for (uint32_t n : {1u, 2u, 3u}) {
        for (auto make :
             {braid::test::deterministic_tp_mlp, braid::test::deterministic_tp_attention}) {
            auto block = make(n);
            auto values = braid::test::tp_block_values(block, 77 + n);
            Mesh mesh({n}, {"tp"});
            Pmap tp(block.fn, mesh, block.args, {replicated_spec(mesh, 2)});
            EXPECT_EQ(braid::test::bitwise_difference(
                          tp(values)[0], braid::test::tp_block_same_split(block, values)),
                      "")
                << block.name << " on " << n << " ranks";
        }
    }
}
