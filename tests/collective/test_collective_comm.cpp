// CollectiveComm on the local backend: every mode forward (one graph per rank on threads,
// and one graph with N comp nodes), gradients against finite differences, and the errors.
#include "checker.h"
#include "collective_reference.h"

#include "comm/group_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <thread>

using namespace braid;
using namespace braid::test;
using opr::CollectiveMode;

namespace {

std::shared_ptr<comm::GroupClient> fresh_client() {
    return std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
}

} // namespace

class CollectiveComm : public ::testing::Test {
protected:
    void SetUp() override { register_all_operators(); }
};

TEST_F(CollectiveComm, EveryModeOneGraphPerRankOnThreads) {
    for (uint32_t n : {1u, 2u, 3u, 4u})
        for (auto mode : all_collective_modes()) {
            SCOPED_TRACE(fmt::format("{} with {} ranks", opr::collective_mode_name(mode), n));
            auto client = fresh_client();
            uint32_t root = n - 1;
            std::mt19937 rng(n * 31 + uint32_t(mode));
            std::vector<Tensor> inputs(n);
            for (uint32_t r = 0; r < n; ++r)
                if (collective_has_input(mode, r == root))
                    inputs[r] = random_tensor({n * 2, 3}, dtype::Float32(), rng);
            std::vector<Tensor> results(n);
            std::vector<TensorShape> static_shapes(n);
            std::vector<std::string> errors(n);
            std::vector<std::thread> threads;
            for (uint32_t r = 0; r < n; ++r)
                threads.emplace_back([&, r] {
                    try {
                        GraphOptions opt;
                        opt.default_comp_node = fmt::format("cpu{}", r);
                        auto g = ComputingGraph::make(opt);
                        SymbolVar x;
                        if (!inputs[r].empty())
                            x = opr::Input::make(*g, "x", dtype::Float32(), inputs[r].shape());
                        auto y = opr::CollectiveComm::make(
                            x, *g, collective_param(mode, "fwd", n, r, root, client));
                        auto exec = g->compile({y});
                        static_shapes[r] = y.shape(); // known before execution
                        if (x.valid()) exec->feed("x", inputs[r]);
                        exec->run();
                        results[r] = exec->output(0).copy();
                    } catch (const std::exception& e) {
                        errors[r] = e.what();
                    }
                });
            for (auto& t : threads) t.join();
            for (uint32_t r = 0; r < n; ++r) {
                ASSERT_EQ(errors[r], "") << "rank " << r;
                Tensor expect = collective_reference(mode, inputs, r, root);
                EXPECT_EQ(static_shapes[r], expect.shape()) << "rank " << r;
                expect_tensor_near(results[r], expect, 1e-6, 1e-6, fmt::format("rank {}", r));
            }
        }
}

TEST_F(CollectiveComm, EveryModeOneGraphWithNCompNodes) {
    for (uint32_t n : {1u, 2u, 3u, 4u})
        for (auto mode : all_collective_modes()) {
            SCOPED_TRACE(fmt::format("{} with {} comp nodes", opr::collective_mode_name(mode), n));
            auto client = fresh_client();
            uint32_t root = 0;
            std::mt19937 rng(n * 17 + uint32_t(mode));
            auto g = ComputingGraph::make();
            std::vector<Tensor> inputs(n);
            std::vector<OutputSpec> outs;
            SymbolVarArray xs;
            for (uint32_t r = 0; r < n; ++r) {
                auto cn = CompNode::load(fmt::format("cpu{}", r));
                SymbolVar x;
                if (collective_has_input(mode, r == root)) {
                    inputs[r] = random_tensor({n * 2, 2}, dtype::Float32(), rng);
                    x = opr::Input::make(*g, fmt::format("x{}", r), dtype::Float32(),
                                         inputs[r].shape(), cn);
                }
                xs.push_back(x);
                outs.push_back(opr::CollectiveComm::make(
                    x, *g, collective_param(mode, "single", n, r, root, client),
                    OperatorConfig::on(cn)));
            }
            auto exec = g->compile(outs);
            for (uint32_t r = 0; r < n; ++r)
                if (xs[r].valid()) exec->feed(xs[r], inputs[r]);
            for (int iter = 0; iter < 2; ++iter) {
                exec->run();
                for (uint32_t r = 0; r < n; ++r)
                    expect_tensor_near(exec->output(r), collective_reference(mode, inputs, r, root),
                                       1e-6, 1e-6, fmt::format("rank {}", r));
            }
        }
}

TEST_F(CollectiveComm, LocalGradientsFollowTheirDefinitions) {
    // local grad of all-gather = own slice of g; of reduce-scatter and all-to-all = own block
    // placed in zeros; of all-reduce = identity.
    const uint32_t n = 2;
    for (auto mode : {CollectiveMode::ALL_REDUCE_SUM, CollectiveMode::ALL_GATHER,
                      CollectiveMode::REDUCE_SCATTER_SUM, CollectiveMode::ALL_TO_ALL}) {
        SCOPED_TRACE(opr::collective_mode_name(mode));
        auto client = fresh_client();
        auto g = ComputingGraph::make();
        std::vector<Tensor> w(n);
        std::mt19937 rng(5);
        SymbolVarArray xs, dxs;
        for (uint32_t r = 0; r < n; ++r) {
            auto cn = CompNode::load(fmt::format("cpu{}", r));
            auto x = opr::Input::make(*g, fmt::format("x{}", r), dtype::Float32(), {4, 1}, cn);
            auto p = collective_param(mode, "local", n, r, 0, client);
            p.local_grad = true;
            auto y = opr::CollectiveComm::make(x, *g, p, OperatorConfig::on(cn));
            w[r] = random_tensor(y.shape(), dtype::Float32(), rng);
            auto loss = opr::reduce_sum(y * opr::ImmutableTensor::make(*g, w[r]));
            xs.push_back(x);
            dxs.push_back(grad(loss, x));
        }
        std::vector<OutputSpec> outs(dxs.begin(), dxs.end());
        for (auto& x : xs) outs.push_back(x); // an identity local gradient does not read x
        auto exec = g->compile(outs);
        for (uint32_t r = 0; r < n; ++r)
            exec->feed(xs[r], random_tensor({4, 1}, dtype::Float32(), rng));
        exec->run();
        for (uint32_t r = 0; r < n; ++r) {
            Tensor expect(TensorShape{4, 1}, dtype::Float32());
            for (size_t i = 0; i < 4; ++i) {
                float v = 0;
                if (mode == CollectiveMode::ALL_REDUCE_SUM) v = float(w[r].at(i));
                if (mode == CollectiveMode::ALL_GATHER) v = float(w[r].at(r * 4 + i));
                if (mode == CollectiveMode::REDUCE_SCATTER_SUM)
                    v = i / 2 == r ? float(w[r].at(i % 2)) : 0.f;
                if (mode == CollectiveMode::ALL_TO_ALL) v = i / 2 == r ? float(w[r].at(i)) : 0.f;
                expect.ptr<float>()[i] = v;
            }
            expect_tensor_near(exec->output(r), expect, 1e-6, 1e-6, fmt::format("rank {}", r));
        }
    }
}

TEST_F(CollectiveComm, ShapeAndDtypeErrorsAtBuildTime) {
    auto client = fresh_client();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {10, 2});
    try {
        opr::CollectiveComm::make(
            x, *g, collective_param(CollectiveMode::REDUCE_SCATTER_SUM, "rs", 3, 0, 0, client));
        FAIL() << "expected ShapeError";
    } catch (const ShapeError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("10"), std::string::npos) << msg;
        EXPECT_NE(msg.find("nr_devices 3"), std::string::npos) << msg;
    }
    auto p = collective_param(CollectiveMode::ALL_REDUCE_SUM, "dt", 1, 0, 0, client);
    p.dtype = dtype::Int32();
    try {
        opr::CollectiveComm::make(x, *g, p);
        FAIL() << "expected DTypeError";
    } catch (const DTypeError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
        EXPECT_NE(msg.find("int32"), std::string::npos) << msg;
    }
}

TEST_F(CollectiveComm, PeersDisagreeingOnShapeOrModeFailOnEveryRank) {
    for (bool mode_differs : {false, true}) {
        auto client = fresh_client();
        std::vector<std::string> errors(2);
        std::vector<std::thread> threads;
        for (uint32_t r = 0; r < 2; ++r)
            threads.emplace_back([&, r] {
                try {
                    GraphOptions opt; // peers need queues of their own
                    opt.default_comp_node = fmt::format("cpu{}", r);
                    auto g = ComputingGraph::make(opt);
                    TensorShape s =
                        !mode_differs && r == 1 ? TensorShape{64, 64} : TensorShape{128, 64};
                    auto mode = mode_differs && r == 1 ? CollectiveMode::ALL_REDUCE_MAX
                                                       : CollectiveMode::ALL_REDUCE_SUM;
                    auto x = opr::Input::make(*g, "x", dtype::Float32(), s);
                    auto y = opr::CollectiveComm::make(
                        x, *g, collective_param(mode, "mm", 2, r, 0, client));
                    auto exec = g->compile({y});
                    exec->feed("x", Tensor(s, dtype::Float32())).run();
                } catch (const CommError& e) {
                    errors[r] = e.what();
                }
            });
        for (auto& t : threads) t.join();
        for (uint32_t r = 0; r < 2; ++r) {
            EXPECT_NE(errors[r].find("\"mm\""), std::string::npos) << errors[r];
            EXPECT_NE(errors[r].find("rank 1"), std::string::npos) << errors[r];
            EXPECT_NE(errors[r].find(mode_differs ? "ALL_REDUCE_MAX" : "{64,64}"),
                      std::string::npos)
                << errors[r];
        }
    }
}

// The consistency check runs again whenever a rank's input shape changes after the first run:
// a change on every rank goes through; a change on one rank alone is an error on that rank that
// names the peers and the shapes they still run with, never a result from mismatched buffers.
TEST_F(CollectiveComm, ShapesChangedOnALaterRunAreCheckedAgain) {
    setenv("BRAID_COMM_TIMEOUT", "2", 1);
    constexpr uint32_t n = 3;
    auto client = fresh_client();
    // Per run, each rank's input rows: the same everywhere, then rank 1 alone differs.
    const std::vector<std::array<size_t, n>> rows = {{4, 4, 4}, {6, 6, 6}, {6, 5, 6}};
    std::vector<std::vector<Tensor>> results(rows.size(), std::vector<Tensor>(n));
    std::vector<std::vector<std::string>> errors(rows.size(), std::vector<std::string>(n));
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            GraphOptions opt;
            opt.default_comp_node = fmt::format("cpu{}", r);
            auto g = ComputingGraph::make(opt);
            auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 16});
            auto y = opr::CollectiveComm::make(
                x, *g, collective_param(CollectiveMode::ALL_REDUCE_SUM, "later", n, r, 0, client));
            auto exec = g->compile({y});
            for (size_t run = 0; run < rows.size(); ++run) {
                try {
                    Tensor xv(TensorShape{rows[run][r], 16}, dtype::Float32());
                    std::fill(xv.ptr<float>(), xv.ptr<float>() + rows[run][r] * 16, float(r + 1));
                    exec->feed("x", xv);
                    exec->run();
                    results[run][r] = exec->output(0).copy();
                } catch (const std::exception& e) {
                    errors[run][r] = e.what();
                    return;
                }
            }
        });
    for (auto& t : threads) t.join();
    unsetenv("BRAID_COMM_TIMEOUT");
    for (size_t run = 0; run < 2; ++run)
        for (uint32_t r = 0; r < n; ++r) {
            ASSERT_EQ(errors[run][r], "") << "run " << run << " rank " << r;
            EXPECT_EQ(results[run][r].shape(), (TensorShape{rows[run][r], 16}));
            EXPECT_EQ(float(results[run][r].at(0)), 6.f); // 1 + 2 + 3
        }
    const std::string& changed = errors[2][1];
    EXPECT_NE(changed.find("\"later\""), std::string::npos) << changed;
    EXPECT_NE(changed.find("rank 1's input changed to {5,16}"), std::string::npos) << changed;
    EXPECT_NE(changed.find("rank 0 (still at check 2: input {6,16})"), std::string::npos)
        << changed;
    EXPECT_NE(changed.find("rank 2 (still at check 2: input {6,16})"), std::string::npos)
        << changed;
    // The others do not get a result computed with rank 1's mismatched buffer: they time out
    // waiting for it.
    for (uint32_t r : {0u, 2u}) {
        EXPECT_TRUE(results[2][r].empty()) << "rank " << r << " got a result";
        EXPECT_NE(errors[2][r], "") << "rank " << r;
    }
}

TEST_F(CollectiveComm, MissingRankTimesOutNamingIt) {
    setenv("BRAID_COMM_TIMEOUT", "1", 1);
    auto client = fresh_client();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    auto y = opr::CollectiveComm::make(
        x, *g, collective_param(CollectiveMode::ALL_REDUCE_SUM, "lonely", 2, 0, 0, client));
    auto exec = g->compile({y});
    exec->feed("x", Tensor(TensorShape{4}, dtype::Float32()));
    exec->execute();
    try {
        exec->wait();
        FAIL() << "expected TimeoutError";
    } catch (const TimeoutError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("lonely"), std::string::npos) << msg;
        EXPECT_NE(msg.find("1"), std::string::npos) << msg; // the missing rank
    }
    unsetenv("BRAID_COMM_TIMEOUT");
}

TEST_F(CollectiveComm, DisableFlagZeroRunsOneSkipsOtherValuesAreErrors) {
    auto client = fresh_client();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto p = collective_param(CollectiveMode::ALL_REDUCE_SUM, "dis", 1, 0, 0, client);
    p.disable = std::make_shared<std::atomic<int>>(0);
    auto y = opr::CollectiveComm::make(x, *g, p) * 1.0;
    auto exec = g->compile({y});
    Tensor v(TensorShape{3}, dtype::Float32());
    for (int i = 0; i < 3; ++i) v.ptr<float>()[i] = float(i + 1);
    exec->feed("x", v).run();
    EXPECT_FLOAT_EQ(float(exec->output(0).at(2)), 3.f);
    p.disable->store(1);
    exec->run(); // skipped: no communication, no error
    p.disable->store(7);
    exec->execute();
    try {
        exec->wait();
        FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("7"), std::string::npos) << e.what();
    }
}
