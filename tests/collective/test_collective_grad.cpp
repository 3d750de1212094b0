// CollectiveComm gradients against finite differences: one graph holds every rank (rank r's
// collective on comp node cpu<r>), the loss sums a random projection of every rank's output,
// and check_gradient compares braid::grad with central differences of that loss.
#include "checker.h"
#include "collective_reference.h"

#include "comm/group_client.h"

#include <gtest/gtest.h>

using namespace braid;
using namespace braid::test;
using opr::CollectiveMode;

namespace {

//! The case for `mode` over `n` ranks whose root is `root`: the inputs of the ranks that have
//! one, in rank order, each {2n, 2}.
OprCase collective_case(CollectiveMode mode, uint32_t n, uint32_t root) {
    OprCase c;
    c.name = fmt::format("{} over {} ranks", opr::collective_mode_name(mode), n);
    for (uint32_t r = 0; r < n; ++r)
        if (collective_has_input(mode, r == root)) c.shapes.push_back({n * 2, 2});
    auto client =
        std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
    c.build = [=](const SymbolVarArray& in) {
        // The root first: it publishes the shape its non-roots take while the graph is built.
        SymbolVarArray outs(n);
        for (uint32_t k = 0; k < n; ++k) {
            uint32_t r = (root + k) % n;
            auto p = collective_param(mode, "grad", n, r, root, client);
            // Inputs are in rank order, skipping the ranks that have none.
            SymbolVar x;
            if (collective_has_input(mode, r == root)) {
                size_t idx = 0;
                for (uint32_t q = 0; q < r; ++q) idx += collective_has_input(mode, q == root);
                x = in[idx];
            }
            outs[r] = opr::CollectiveComm::make(
                x, in[0].graph(), p, OperatorConfig::on(CompNode::load(fmt::format("cpu{}", r))));
        }
        return outs;
    };
    return c;
}

} // namespace

TEST(CollectiveCommGrad, EveryModeMatchesFiniteDifferencesAcrossRanks) {
    register_all_operators();
    for (uint32_t n : {1u, 2u, 3u, 4u})
        for (auto mode : all_collective_modes()) check_gradient(collective_case(mode, n, n - 1));
}

namespace {

//! rank r's all-reduce of `x` under `key`, on cpu<r>.
SymbolVar all_reduce_on(SymbolVar x, const std::string& key, uint32_t r,
                        const std::shared_ptr<comm::GroupClient>& client) {
    auto p = collective_param(CollectiveMode::ALL_REDUCE_SUM, key, 2, r, 0, client);
    return opr::CollectiveComm::make(x, x.graph(), p,
                                     OperatorConfig::on(CompNode::load(fmt::format("cpu{}", r))));
}

std::string compile_error(ComputingGraph& g, const std::vector<OutputSpec>& outs) {
    try {
        g.compile(outs);
    } catch (const GraphError& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST(CollectiveSchedule, PeersInOneGraphRunBeforeAnythingReadingTheirResults) {
    // cpu0 holds rank 1's consumer (it reads x0's comp node first) ahead of rank 0's own
    // collective in insertion order; the schedule must still start rank 0's part first.
    register_all_operators();
    auto client =
        std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
    auto g = ComputingGraph::make();
    auto x0 = opr::Input::make(*g, "x0", dtype::Float32(), {3});
    auto x1 = opr::Input::make(*g, "x1", dtype::Float32(), {3});
    auto y1 = all_reduce_on(x1, "ar", 1, client);
    auto z1 = x0 + y1; // on cpu0, reads rank 1's result
    auto y0 = all_reduce_on(x0, "ar", 0, client);
    auto exec = g->compile({z1, y0});
    Tensor a(TensorShape{3}, dtype::Float32()), b(TensorShape{3}, dtype::Float32());
    for (int i = 0; i < 3; ++i) {
        a.ptr<float>()[i] = float(i);
        b.ptr<float>()[i] = 10.f * float(i);
    }
    exec->feed("x0", a).feed("x1", b).run();
    for (int i = 0; i < 3; ++i) {
        EXPECT_FLOAT_EQ(float(exec->output(1).at(i)), 11.f * float(i));
        EXPECT_FLOAT_EQ(float(exec->output(0).at(i)), 12.f * float(i));
    }
}

TEST(CollectiveSchedule, CollectivesWaitingForEachOtherAreACompileError) {
    register_all_operators();
    auto client =
        std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
    {
        // Rank 0 runs "a" then "b", rank 1 "b" then "a": each needs the other's second step.
        auto g = ComputingGraph::make();
        auto x0 = opr::Input::make(*g, "x0", dtype::Float32(), {3});
        auto x1 = opr::Input::make(*g, "x1", dtype::Float32(), {3});
        auto b0 = all_reduce_on(all_reduce_on(x0, "a", 0, client), "b", 0, client);
        auto a1 = all_reduce_on(all_reduce_on(x1, "b", 1, client), "a", 1, client);
        std::string msg = compile_error(*g, {b0, a1});
        EXPECT_NE(msg.find("cycle"), std::string::npos) << msg;
        EXPECT_NE(msg.find("\"a\""), std::string::npos) << msg;
    }
    {
        // Rank 1's input is rank 0's result under the same key.
        auto g = ComputingGraph::make();
        auto x0 = opr::Input::make(*g, "x0", dtype::Float32(), {3});
        auto y0 = all_reduce_on(x0, "self", 0, client);
        auto y1 = all_reduce_on(y0, "self", 1, client);
        std::string msg = compile_error(*g, {y0, y1});
        EXPECT_NE(msg.find("\"self\""), std::string::npos) << msg;
        EXPECT_NE(msg.find("depend on one another"), std::string::npos) << msg;
    }
}
