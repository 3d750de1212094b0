// Models with CollectiveComm: one file, dumped from one rank's graph, loaded by every rank with
// its CollectiveBinding (rank, world size, group manager), gives the outputs of the graphs
// built rank by rank; and the loader's rules for ranks, roots and world sizes.
#include "helpers.h"
#include "tools/example_models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <thread>

using namespace braid;
using namespace braid::test;
using opr::CollectiveMode;
using ::testing::HasSubstr;

namespace {

std::shared_ptr<comm::GroupClient> fresh_client() {
    return std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
}

//! Runs fn(rank) on `n` threads at once (collectives need every rank running) and returns
//! each rank's outputs; rethrows the first failure.
std::vector<std::vector<Tensor>> on_threads(size_t n,
                                            const std::function<std::vector<Tensor>(int)>& fn) {
    std::vector<std::vector<Tensor>> res(n);
    std::vector<std::exception_ptr> errors(n);
    std::vector<std::thread> threads;
    for (size_t r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            try {
                res[r] = fn(int(r));
            } catch (...) {
                errors[r] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    return res;
}

//! Rank `group.rank`'s graph: x {6,4} through a matmul, then one collective of each kind that
//! gives every rank a defined output, and the gradient of a loss through an ALL_GATHER (whose
//! backward is a REDUCE_SCATTER_SUM of key "<key>:grad"). Rank 0 is the root.
SymbolVarArray build_rank_graph(ComputingGraph& g, const opr::Group& group) {
    bool root = group.rank == 0;
    Tensor wv(TensorShape{4, 4}, dtype::Float32());
    for (int i = 0; i < 16; ++i) wv.ptr<float>()[i] = 0.125f * float(i % 5) - 0.25f;
    auto w = opr::SharedParam::make(g, std::make_shared<Tensor>(wv), "w");
    auto x = opr::Input::make(g, "x", dtype::Float32(), {6, 4});
    auto h = opr::matmul(x, w);
    SymbolVarArray outs = {
        opr::all_reduce_sum(h, group, "sum").rename("sum"),
        opr::all_reduce_max(x, group, "max").rename("max"),
        opr::reduce_scatter_sum(h, group, "reduce_scatter").rename("reduce_scatter"),
        opr::all_to_all(x, group, "all_to_all").rename("all_to_all"),
        opr::reduce_sum_to_root(h, group, "reduce").rename("reduce"),
    };
    // Non-roots take no input; their output shape comes from the root through the manager.
    auto sent = root ? h * 2.0 : SymbolVar{};
    auto received = opr::broadcast_from_root(sent, g, group, dtype::Float32(), "broadcast");
    outs.push_back((received + 1.0).rename("broadcast"));
    auto gathered = opr::all_gather(h, group, "gather");
    outs.push_back(gathered.rename("gathered"));
    auto loss = opr::reduce_sum(gathered * gathered);
    outs.push_back(grad(loss, w).rename("grad_w"));
    return outs;
}

Tensor rank_input(int rank) {
    return random_input({6, 4}, 100 + uint32_t(rank));
}

void expect_loaded_ranks_match_built_ranks(size_t n, bool explicit_client) {
    SCOPED_TRACE(fmt::format("{} ranks", n));
    register_all_operators();
    auto built_client = fresh_client();
    std::vector<uint8_t> bytes;
    std::vector<std::string> names;
    auto expected = on_threads(n, [&](int rank) {
        GraphOptions gopt;
        gopt.default_comp_node = fmt::format("cpu{}", rank);
        auto g = ComputingGraph::make(gopt);
        opr::Group group;
        group.key_prefix = "serial";
        group.size = uint32_t(n);
        group.rank = rank;
        group.client = built_client;
        auto outs = build_rank_graph(*g, group);
        std::vector<OutputSpec> specs(outs.begin(), outs.end());
        auto exec = g->compile(specs);
        auto res = run_copy(*exec, {{"x", rank_input(rank)}}, outs.size());
        if (rank == 0) { // rank 0's graph is the model every rank loads
            dump(outs, bytes);
            for (auto& o : outs) names.push_back(o.name());
        }
        return res;
    });

    auto loaded_client = explicit_client ? fresh_client() : nullptr;
    auto actual = on_threads(n, [&](int rank) {
        LoadOptions opt;
        opt.comp_node = fmt::format("cpu{}", rank);
        opt.collective.rank = rank;
        opt.collective.world_size = int(n);
        opt.collective.group_client = loaded_client; // null: the process-wide manager
        auto model = load(bytes, opt);
        auto exec = model.compile();
        return run_copy(*exec, {{"x", rank_input(rank)}}, model.outputs.size());
    });
    for (size_t r = 0; r < n; ++r) {
        ASSERT_EQ(actual[r].size(), expected[r].size());
        for (size_t i = 0; i < expected[r].size(); ++i)
            EXPECT_TRUE(bit_identical(actual[r][i], expected[r][i]))
                << "rank " << r << " output " << names[i];
    }
    // The gathered output really holds every rank's rows.
    EXPECT_EQ(actual[n - 1][6].shape(), (TensorShape{6 * n, 4}));
}

//! The CollectiveComm operators of a loaded model, in order.
std::vector<const opr::CollectiveComm*> collectives(const LoadedModel& m) {
    std::vector<const opr::CollectiveComm*> res;
    for (auto& o : m.graph->operators())
        if (auto* c = dynamic_cast<const opr::CollectiveComm*>(o.get())) res.push_back(c);
    return res;
}

std::vector<uint8_t> dp_model_bytes() {
    register_all_operators();
    auto g = ComputingGraph::make();
    opr::Group solo;
    solo.key_prefix = "dp";
    solo.rank = 0;
    solo.client = fresh_client();
    std::vector<uint8_t> bytes;
    dump(examples::build_dp_allreduce(*g, solo), bytes);
    return bytes;
}

} // namespace

TEST(CollectiveModel, OneFileLoadedByTwoRanksGivesTheBuiltGraphsOutputs) {
    expect_loaded_ranks_match_built_ranks(2, false);
}

TEST(CollectiveModel, OneFileLoadedByThreeRanksGivesTheBuiltGraphsOutputs) {
    expect_loaded_ranks_match_built_ranks(3, true);
}

TEST(CollectiveModel, BindingSetsRankWorldSizeRootAndBackend) {
    auto bytes = dp_model_bytes();
    // As recorded: one rank, rank 0, root (the group's root), local backend.
    auto plain = load(bytes);
    auto recorded = collectives(plain);
    ASSERT_EQ(recorded.size(), 5u);
    EXPECT_EQ(recorded[0]->param().key, "dp:loss");
    EXPECT_EQ(recorded[0]->param().nr_devices, 1u);
    EXPECT_EQ(recorded[0]->param().rank, 0);
    EXPECT_TRUE(recorded[0]->param().is_root);
    EXPECT_EQ(recorded[0]->param().backend, "local");
    EXPECT_EQ(recorded[0]->param().mode, CollectiveMode::ALL_REDUCE_SUM);

    // The binding's world size replaces the recorded one; only the recorded root stays root.
    auto client = fresh_client();
    for (int rank : {0, 2}) {
        LoadOptions opt;
        opt.collective.rank = rank;
        opt.collective.world_size = 3;
        opt.collective.backend = "mpi";
        opt.collective.group_client = client;
        auto m = load(bytes, opt);
        for (auto* c : collectives(m)) {
            EXPECT_EQ(c->param().nr_devices, 3u);
            EXPECT_EQ(c->param().rank, rank);
            EXPECT_EQ(c->param().is_root, rank == 0);
            EXPECT_EQ(c->param().backend, "mpi");
            EXPECT_EQ(c->param().group_client, client);
        }
    }
    // Without a client the binding's server gets a TCP client (connected on first use).
    LoadOptions tcp;
    tcp.collective.rank = 1;
    tcp.collective.world_size = 2;
    tcp.collective.server = "127.0.0.1:29999";
    auto m = load(bytes, tcp);
    EXPECT_EQ(collectives(m)[0]->param().group_client->address(), "tcp://127.0.0.1:29999");
}

TEST(CollectiveModel, LoaderRefusesRanksOutsideTheWorldAndUnknownRoots) {
    auto bytes = dp_model_bytes();
    LoadOptions opt;
    opt.collective.rank = 3;
    opt.collective.world_size = 3;
    try {
        load(bytes, opt);
        FAIL() << "rank 3 of 3 loaded";
    } catch (const SerializationError& e) {
        EXPECT_THAT(e.what(), HasSubstr("CollectiveComm \"dp:loss\": rank 3 is out of range for "
                                        "a world size of 3"));
    }
    LoadOptions server;
    server.collective.rank = 0;
    server.collective.world_size = 1;
    server.collective.server = "no-port";
    EXPECT_THROW(load(bytes, server), SerializationError);

    // A rooted collective dumped from a non-root rank does not say which rank is the root.
    auto client = fresh_client();
    std::vector<uint8_t> from_rank1;
    on_threads(2, [&](int rank) {
        GraphOptions gopt;
        gopt.default_comp_node = fmt::format("cpu{}", rank);
        auto g = ComputingGraph::make(gopt);
        opr::Group group;
        group.key_prefix = "rooted";
        group.size = 2;
        group.rank = rank;
        group.client = client;
        auto x = opr::Input::make(*g, "x", dtype::Float32(), {2});
        auto y = opr::reduce_sum_to_root(x, group, "r").rename("y");
        if (rank == 1) dump({y}, from_rank1);
        return std::vector<Tensor>{};
    });
    opt.collective.rank = 0;
    opt.collective.world_size = 2;
    try {
        load(from_rank1, opt);
        FAIL() << "a root chosen for a model dumped from a non-root";
    } catch (const SerializationError& e) {
        EXPECT_THAT(e.what(), HasSubstr("REDUCE_SUM was dumped from non-root rank 1, so rank 0 "
                                        "cannot tell which rank is its root"));
    }
    opt.collective.rank = 1; // the rank it was dumped from loads as recorded
    EXPECT_NO_THROW(load(from_rank1, opt));
}

TEST(CollectiveModel, ModelDumpedFromOneRankRunsOnTwo) {
    // ALL_GATHER's output shape follows the world size: recorded {3}, loaded on two ranks {6}.
    register_all_operators();
    auto g = ComputingGraph::make();
    opr::Group solo;
    solo.key_prefix = "grow";
    solo.rank = 0;
    solo.client = fresh_client();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto y = (opr::all_gather(x, solo, "gather") * 2.0).rename("y");
    std::vector<uint8_t> bytes;
    dump({y}, bytes);

    auto client = fresh_client();
    auto outs = on_threads(2, [&](int rank) {
        LoadOptions opt;
        opt.comp_node = fmt::format("cpu{}", rank);
        opt.collective = {rank, 2, "", "", client};
        auto model = load(bytes, opt);
        auto exec = model.compile();
        return run_copy(*exec, {{"x", random_input({3}, 7 + uint32_t(rank))}}, 1);
    });
    for (int rank = 0; rank < 2; ++rank) {
        ASSERT_EQ(outs[rank][0].shape(), (TensorShape{6}));
        for (size_t i = 0; i < 6; ++i) {
            Tensor in = random_input({3}, 7 + uint32_t(i / 3));
            EXPECT_EQ(outs[rank][0].ptr<float>()[i], 2.f * in.ptr<float>()[i % 3]);
        }
    }
}
