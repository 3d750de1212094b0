// The "gloo" backend as processes. One binary, three roles:
//  - under braid-launch (BRAID_RANK, BRAID_WORLD_SIZE, BRAID_SERVER set), GlooCollectives.*
//    checks every collective against the plain-loop reference of the thread tests, each rank
//    in its own process (only rank 0 prints gtest's report);
//  - alone, GlooFaults.* start a rendezvous server in this process and spawn this binary as
//    workers (`--worker NAME`): a rank killed in the middle of an all-reduce, the server
//    stopped under waiting clients, and ranks listening on two loopback addresses;
//  - `--worker NAME`: one worker of those tests; its exit status is its verdict and it writes
//    what it saw to the file in BRAID_TEST_REPORT.
#include "base/error.h"
#include "base/host_port.h"
#include "checker.h"
#include "collective/registry.h"
#include "collective/remote_send_recv.h"
#include "collective/ring_attention.h"
#include "collective_checker.h"
#include "collective_reference.h"
#include "comm/gloo_communicator.h"
#include "comm/group_client.h"
#include "comm/rendezvous_server.h"
#include "comm/tcp_client.h"
#include "graph/grad.h"
#include "parallel/context_parallel.h"
#include "parallel/sharded_tensor.h"
#include "tensor_parallel_blocks.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace braid::comm::test {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<GroupClient> g_client;
int g_rank = -1, g_world_size = 0;
std::string g_self; //!< this binary, for spawning workers

int env_int(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::atoi(v) : -1;
}

//! A client of the group manager at BRAID_SERVER ("HOST:PORT").
std::shared_ptr<GroupClient> client_from_env() {
    auto server = host_port_or_throw(std::getenv("BRAID_SERVER"), "BRAID_SERVER");
    return std::make_shared<TcpGroupClient>(server.host, server.port);
}

// ------------------------------------------------------------ collectives under braid-launch

int g_test_counter = 0;

std::shared_ptr<Communicator> join_world() {
    std::string key = fmt::format("gloo-test-{}", g_test_counter++);
    auto member = join_group(g_client, "gloo", key, uint32_t(g_world_size), false, g_rank,
                             uint64_t(g_rank), {}, std::chrono::seconds(30));
    EXPECT_EQ(int(member.info.rank), g_rank);
    return member.communicator;
}

void check_sweep(Collective collective) {
    if (g_rank < 0) GTEST_SKIP() << "runs under braid-launch (BRAID_RANK is not set)";
    auto comm = join_world();
    EXPECT_STREQ(comm->backend(), "gloo");
    for (auto& c : sweep(collective, uint32_t(comm->nranks()))) {
        std::string error = run_and_check(*comm, c);
        ASSERT_EQ(error, "") << c.to_string();
    }
}

TEST(GlooCollectives, AllReduceMatchesReference) {
    check_sweep(Collective::ALL_REDUCE);
}
TEST(GlooCollectives, ReduceMatchesReference) {
    check_sweep(Collective::REDUCE);
}
TEST(GlooCollectives, BroadcastMatchesReference) {
    check_sweep(Collective::BROADCAST);
}
TEST(GlooCollectives, AllGatherMatchesReference) {
    check_sweep(Collective::ALL_GATHER);
}
TEST(GlooCollectives, ReduceScatterMatchesReference) {
    check_sweep(Collective::REDUCE_SCATTER);
}
TEST(GlooCollectives, GatherMatchesReference) {
    check_sweep(Collective::GATHER);
}
TEST(GlooCollectives, ScatterMatchesReference) {
    check_sweep(Collective::SCATTER);
}
TEST(GlooCollectives, AllToAllMatchesReference) {
    check_sweep(Collective::ALL_TO_ALL);
}
TEST(GlooCollectives, SendRecvMatchesReference) {
    check_sweep(Collective::SEND_RECV);
}

// Deterministic mode: gloo's ring sums each chunk starting from another rank; the ordered path
// adds the ranks in rank order, the same bits as the local backend.
TEST(GlooCollectives, DeterministicSumsAddTheRanksInRankOrder) {
    if (g_rank < 0) GTEST_SKIP() << "runs under braid-launch (BRAID_RANK is not set)";
    auto comm = join_world();
    ASSERT_EQ(check_rank_ordered_sums(*comm), "");
}

// Deterministic mode: the Megatron MLP and attention blocks with one rank per process give the
// same bits as one device with the same split (as on the local backend, tests/parallel).
TEST(GlooCollectives, DeterministicTensorParallelBlocksAreTheSameBitsAsOneDevice) {
    if (g_rank < 0) GTEST_SKIP() << "runs under braid-launch (BRAID_RANK is not set)";
    register_all_operators();
    DeterministicScope mode(true);
    uint32_t n = uint32_t(g_world_size), rank = uint32_t(g_rank);
    for (auto make : {braid::test::deterministic_tp_mlp, braid::test::deterministic_tp_attention}) {
        auto block = make(n);
        auto values = braid::test::tp_block_values(block, 77 + n);
        parallel::Mesh mesh({n}, {"tp"});
        parallel::SpmdOptions options;
        options.backend = "gloo";
        options.client = g_client;
        options.key_prefix = fmt::format("gloo-tp-{}", g_test_counter++);
        options.comp_node = [](uint32_t) { return std::string("cpu0"); };
        auto r = parallel::build_spmd_rank(block.fn, mesh, block.args, rank, options);
        auto exec = r.graph->compile({r.outputs[0]});
        for (size_t i = 0; i < values.size(); ++i)
            exec->feed(
                block.args[i].name,
                parallel::ShardedTensor::split(values[i], block.args[i].spec).shard_of(mesh, rank));
        exec->run();
        EXPECT_EQ(braid::test::bitwise_difference(exec->output(0),
                                                  braid::test::tp_block_same_split(block, values)),
                  "")
            << block.name << " on rank " << rank << " of " << n;
    }
}

// The ten CollectiveComm modes as operators of one graph per process, with the first and the
// last rank as root: the path `--backend gloo` takes in braid-run and in models.
TEST(GlooCollectives, EveryCollectiveCommModeMatchesReference) {
    if (g_rank < 0) GTEST_SKIP() << "runs under braid-launch (BRAID_RANK is not set)";
    register_all_operators();
    uint32_t n = uint32_t(g_world_size), rank = uint32_t(g_rank);
    for (uint32_t root : {0u, n - 1})
        for (auto mode : braid::test::all_collective_modes()) {
            SCOPED_TRACE(
                fmt::format("{}, {} ranks, root {}", opr::collective_mode_name(mode), n, root));
            std::mt19937 rng(7 * n + uint32_t(mode) + 100 * root);
            std::vector<Tensor> inputs(n);
            for (uint32_t r = 0; r < n; ++r)
                if (braid::test::collective_has_input(mode, r == root))
                    inputs[r] = braid::test::random_tensor({n * 2, 3}, dtype::Float32(), rng);
            Tensor expect = braid::test::collective_reference(mode, inputs, rank, root);
            auto graph = ComputingGraph::make();
            SymbolVar x;
            if (!inputs[rank].empty())
                x = opr::Input::make(*graph, "x", dtype::Float32(), inputs[rank].shape());
            auto y = opr::CollectiveComm::make(
                x, *graph,
                braid::test::collective_param(mode,
                                              fmt::format("gloo-cc-{}-{}", g_test_counter++, root),
                                              n, rank, root, g_client, "gloo"));
            auto exec = graph->compile({y});
            EXPECT_EQ(y.shape(), expect.shape()); // static: known before execution
            if (x.valid()) exec->feed("x", inputs[rank]);
            exec->run();
            braid::test::expect_tensor_near(exec->output(0), expect, 1e-6, 1e-6,
                                            fmt::format("rank {}", rank));
        }
}

// RemoteSend / RemoteRecv as operators: rank 0 sends to the last rank values of several
// dtypes, then h = x * a whose gradient the receiver sends back.
TEST(GlooCollectives, RemoteSendRecvOperatorsAndTheirGradients) {
    if (g_rank < 0) GTEST_SKIP() << "runs under braid-launch (BRAID_RANK is not set)";
    register_all_operators();
    int last = g_world_size - 1;
    std::mt19937 rng(13); // the same draws on every rank
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::Int32(), dtype::Int8()}) {
        Tensor value = braid::test::random_tensor({4, 3}, dt, rng);
        std::string key = fmt::format("gloo-p2p-{}", g_test_counter++);
        auto graph = ComputingGraph::make();
        if (g_rank == 0) {
            auto x = opr::Input::make(*graph, "x", dt, {4, 3});
            auto exec = graph->compile({opr::remote_send(x, key, last, g_client, "gloo")});
            exec->feed("x", value);
            exec->run();
        } else if (g_rank == last) {
            auto y = opr::remote_recv(*graph, key, 0, dt, g_client, "gloo");
            auto exec = graph->compile({y});
            EXPECT_EQ(y.shape(), TensorShape({4, 3}));
            exec->run();
            braid::test::expect_tensor_near(exec->output(0), value, 0, 0, dt.name());
        }
    }
    Tensor xv = braid::test::random_tensor({6}, dtype::Float32(), rng),
           av = braid::test::random_tensor({6}, dtype::Float32(), rng),
           wv = braid::test::random_tensor({6}, dtype::Float32(), rng);
    std::string key = fmt::format("gloo-p2p-grad-{}", g_test_counter++);
    auto graph = ComputingGraph::make();
    if (g_rank == 0) {
        auto x = opr::Input::make(*graph, "x", dtype::Float32(), {6});
        auto a = opr::Input::make(*graph, "a", dtype::Float32(), {6});
        auto sent = opr::remote_send(x * a, key, last, g_client, "gloo");
        auto exec = graph->compile({sent, grad(sent, x)});
        exec->feed("x", xv);
        exec->feed("a", av);
        exec->run();
        for (size_t i = 0; i < 6; ++i)
            EXPECT_NEAR(exec->output(1).ptr<float>()[i], av.ptr<float>()[i] * wv.ptr<float>()[i],
                        1e-6);
    } else if (g_rank == last) {
        auto w = opr::Input::make(*graph, "w", dtype::Float32(), {6});
        auto r = opr::remote_recv(*graph, key, 0, dtype::Float32(), g_client, "gloo");
        auto exec = graph->compile({grad(opr::reduce_sum(r * w), w)});
        exec->feed("w", wv);
        exec->run();
        for (size_t i = 0; i < 6; ++i)
            EXPECT_NEAR(exec->output(0).ptr<float>()[i], xv.ptr<float>()[i] * av.ptr<float>()[i],
                        1e-6);
    }
}

// Ring attention with one rank per process: each rank's out and gradients equal its shard of
// single-rank attention's.
TEST(GlooCollectives, RingAttentionMatchesSingleRankAttention) {
    if (g_rank < 0) GTEST_SKIP() << "runs under braid-launch (BRAID_RANK is not set)";
    register_all_operators();
    uint32_t n = uint32_t(g_world_size), rank = uint32_t(g_rank);
    std::mt19937 rng(31);
    TensorShape qs{1, 2, 4 * n, 4};
    auto rnd = [&] { return braid::test::random_tensor(qs, dtype::Float32(), rng); };
    Tensor q = rnd(), k = rnd(), v = rnd(), w = rnd();
    auto shard = [&](const Tensor& t) { return parallel::shard_sequence(t, 2, n, true)[rank]; };
    auto step = [&](ComputingGraph& g, const TensorShape& shape, bool ring,
                    opr::RingRotation rotation) {
        auto in = [&](const char* name) {
            return opr::Input::make(g, name, dtype::Float32(), shape);
        };
        auto sq = in("q"), sk = in("k"), sv = in("v"), sw = in("w");
        SymbolVar out = ring ? opr::ring_attention(sq, sk, sv,
                                                   {fmt::format("gloo-ring-{}", g_test_counter++),
                                                    n, rank, g_client, "gloo"},
                                                   {.causal = true, .rotation = rotation})[0]
                             : opr::Attention::make(sq, sk, sv, {true, std::nullopt})[0];
        auto grads = grad(opr::reduce_sum(out * sw), {sq, sk, sv});
        return g.compile({out, grads[0], grads[1], grads[2]});
    };
    auto ref_graph = ComputingGraph::make();
    auto ref = step(*ref_graph, qs, false, opr::RingRotation::RING);
    for (auto [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"w", &w}})
        ref->feed(name, *t);
    ref->run();
    for (auto rotation : {opr::RingRotation::ALL_GATHER, opr::RingRotation::RING}) {
        auto g = ComputingGraph::make();
        auto exec = step(*g, shard(q).shape(), true, rotation);
        for (auto [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"w", &w}})
            exec->feed(name, shard(*t));
        exec->run();
        for (size_t i = 0; i < 4; ++i)
            braid::test::expect_tensor_near(exec->output(i), shard(ref->output(i).copy()), 1e-5,
                                            1e-5,
                                            fmt::format("output {} on rank {} ({})", i, rank,
                                                        opr::ring_rotation_name(rotation)));
    }
}

TEST(GlooCollectives, RankThatNeverEntersIsNamedAfterTheDeadline) {
    if (g_rank < 0) GTEST_SKIP() << "runs under braid-launch (BRAID_RANK is not set)";
    auto comm = join_world();
    comm->set_timeout(std::chrono::milliseconds(1000));
    uint32_t absent = uint32_t(g_world_size - 1);
    if (uint32_t(g_rank) == absent) return; // stays away from the all-reduce
    std::vector<float> data(64, 1.f);
    auto start = Clock::now();
    try {
        comm->all_reduce(data.data(), data.data(), data.size(), dtype::Float32(), ReduceOp::SUM);
        FAIL() << "an all-reduce without rank " << absent << " completed";
    } catch (const CommError& e) {
        double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        std::string text = e.what();
        // The first rank to give up times out; the others see its connections close.
        EXPECT_NE(text.find(fmt::format("{} did not report this failure", absent)),
                  std::string::npos)
            << text;
        EXPECT_LT(seconds, 1.0 + 0.25 + 1.0) << text; // deadline + report wait + slack
    }
    EXPECT_TRUE(comm->broken());
}

TEST(GlooCollectives, RecvOfAnotherSizeNamesBothSizes) {
    if (g_rank < 0) GTEST_SKIP() << "runs under braid-launch (BRAID_RANK is not set)";
    auto comm = join_world();
    comm->set_timeout(std::chrono::seconds(5));
    std::vector<float> buf(8, 1.f);
    if (g_rank == 0) {
        try {
            comm->send(buf.data(), 8, dtype::Float32(), 1);
        } catch (const CommError&) {
            // the receiver refused the data and closed its connections
        }
    } else if (g_rank == 1) {
        try {
            comm->recv(buf.data(), 4, dtype::Float32(), 0);
            FAIL() << "a recv of 4 elements accepted 8";
        } catch (const CommError& e) {
            EXPECT_NE(std::string(e.what()).find("rank 0 sends 32 bytes, this rank expects 16"),
                      std::string::npos)
                << e.what();
        }
    }
}

// ------------------------------------------------------------ workers of the fault tests

void report(const std::string& text) {
    if (const char* path = std::getenv("BRAID_TEST_REPORT")) std::ofstream(path) << text;
}

//! Every rank all-reduces a few times; rank BRAID_TEST_VICTIM (when set) kills itself with
//! SIGKILL in the middle of a long series of large all-reduces. Survivors must fail within
//! their timeout with an error naming the victim.
int worker_allreduce(int rank, int size) {
    int victim = env_int("BRAID_TEST_VICTIM");
    auto client = client_from_env();
    auto timeout = std::chrono::milliseconds(4000);
    auto member = join_group(client, "gloo", "fault-job", uint32_t(size), false, rank,
                             uint64_t(rank), {}, timeout);
    auto& comm = *member.communicator;
    std::vector<float> data(size_t(1) << 20, 1.f);
    comm.all_reduce(data.data(), data.data(), 16, dtype::Float32(), ReduceOp::SUM);
    if (data[0] != float(size)) {
        report(fmt::format("rank {}: all_reduce gave {}, expected {}", rank, data[0], size));
        return 1;
    }
    std::thread killer;
    if (rank == victim)
        killer = std::thread([] {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            raise(SIGKILL);
        });
    auto start = Clock::now();
    try {
        for (int i = 0; i < (victim >= 0 ? 100000 : 3); ++i)
            comm.all_reduce(data.data(), data.data(), data.size(), dtype::Float32(), ReduceOp::MAX);
    } catch (const CommError& e) {
        double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        report(fmt::format("{:.3f}\n{}", seconds, e.what()));
        return 3; // the expected failure of a survivor
    }
    if (killer.joinable()) killer.join();
    report("ok");
    return 0;
}

//! Three ranks join two groups, "calls-a" and "calls-b"; then rank 0 all-reduces in "a",
//! rank 1 in "b", and rank 2 kills itself. Both survivors fail; each must name rank 2 as
//! missing and the other as alive in another call (not as missing).
int worker_two_calls(int rank, int size) {
    auto client = client_from_env();
    auto timeout = std::chrono::milliseconds(3000);
    auto a = join_group(client, "gloo", "calls-a", uint32_t(size), false, rank, uint64_t(rank), {},
                        timeout);
    auto b = join_group(client, "gloo", "calls-b", uint32_t(size), false, rank, uint64_t(rank), {},
                        timeout);
    if (rank == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        raise(SIGKILL);
    }
    std::vector<float> data(1024, 1.f);
    auto& comm = rank == 0 ? *a.communicator : *b.communicator;
    try {
        comm.all_reduce(data.data(), data.data(), data.size(), dtype::Float32(), ReduceOp::SUM);
    } catch (const Error& e) {
        report(e.what());
        return 3; // the expected failure of a survivor
    }
    report("the all_reduce returned");
    return 1;
}

//! Both ranks join, then wait for a key nobody sets while the test stops the server: they
//! must get a CommError about the server well before their 30 s deadline, and so must a
//! call made afterwards.
int worker_server_stop(int rank, int size) {
    auto client = client_from_env();
    auto member = join_group(client, "gloo", "server-stop", uint32_t(size), false, rank,
                             uint64_t(rank), {}, std::chrono::seconds(10));
    client->set(fmt::format("ready/{}", rank), "1");
    auto start = Clock::now();
    std::string seen;
    try {
        client->get("never-set", std::chrono::seconds(30));
        seen = "get returned";
    } catch (const TimeoutError& e) {
        seen = std::string("TimeoutError: ") + e.what();
    } catch (const CommError& e) {
        seen = std::string("CommError: ") + e.what();
    }
    double waited = std::chrono::duration<double>(Clock::now() - start).count();
    std::string after;
    try {
        client->opr_register("after-stop", uint32_t(size), false, rank, uint64_t(rank),
                             std::chrono::seconds(5));
        after = "registered";
    } catch (const Error& e) {
        after = e.what();
    }
    double total = std::chrono::duration<double>(Clock::now() - start).count();
    report(fmt::format("{:.3f} {:.3f}\n{}\n{}", waited, total, seen, after));
    return 0;
}

//! Ranks on different loopback addresses (BRAID_GLOO_HOST), as on two hosts.
int worker_two_addresses(int rank, int size) {
    auto client = client_from_env();
    auto member = join_group(client, "gloo", "two-hosts", uint32_t(size), false, rank,
                             uint64_t(rank), {}, std::chrono::seconds(10));
    std::vector<int32_t> mine(4, rank + 1), all(4 * size_t(size));
    member.communicator->all_gather(mine.data(), all.data(), 4, dtype::Int32());
    member.communicator->all_reduce(mine.data(), mine.data(), 4, dtype::Int32(), ReduceOp::SUM);
    std::string text;
    for (auto v : all) text += fmt::format("{} ", v);
    report(fmt::format("{}| {}", text, mine[0]));
    return 0;
}

int run_worker(const std::string& name) {
    int rank = env_int("BRAID_RANK"), size = env_int("BRAID_WORLD_SIZE");
    try {
        int status = name == "allreduce"       ? worker_allreduce(rank, size)
                     : name == "server-stop"   ? worker_server_stop(rank, size)
                     : name == "two-addresses" ? worker_two_addresses(rank, size)
                     : name == "two-calls"     ? worker_two_calls(rank, size)
                                               : -1;
        CommunicatorCache::instance().clear();
        if (status >= 0) return status;
        report("unknown worker " + name);
    } catch (const std::exception& e) {
        report(std::string("unexpected: ") + e.what());
    }
    return 1;
}

// ------------------------------------------------------------ the fault tests

//! A spawned worker process.
struct Worker {
    pid_t pid = -1;
    std::string report_path;
};

Worker spawn_worker(const std::string& name, int rank, int size, const std::string& server,
                    std::vector<std::string> extra_env = {}) {
    Worker w;
    w.report_path =
        fmt::format("{}/braid_gloo_test_{}_{}_{}.txt", ::testing::TempDir(), getpid(), name, rank);
    std::remove(w.report_path.c_str());
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.push_back(*e);
    env.push_back(fmt::format("BRAID_RANK={}", rank));
    env.push_back(fmt::format("BRAID_WORLD_SIZE={}", size));
    env.push_back("BRAID_SERVER=" + server);
    env.push_back("BRAID_TEST_REPORT=" + w.report_path);
    for (auto& e : extra_env) env.push_back(e);
    std::vector<std::string> args{g_self, "--worker", name};
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    int rc = posix_spawn(&w.pid, g_self.c_str(), nullptr, nullptr, argv.data(), envp.data());
    EXPECT_EQ(rc, 0) << "cannot spawn " << g_self;
    return w;
}

//! Waits (at most `limit`) for the worker; returns its exit status, or -1 after killing it.
int wait_worker(Worker& w, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    auto until = Clock::now() + limit;
    for (;;) {
        int status = 0;
        pid_t done = waitpid(w.pid, &status, WNOHANG);
        if (done == w.pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (Clock::now() >= until) {
            kill(w.pid, SIGKILL);
            waitpid(w.pid, &status, 0);
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

std::string read_report(const Worker& w) {
    std::ifstream in(w.report_path);
    std::stringstream text;
    text << in.rdbuf();
    std::remove(w.report_path.c_str());
    return text.str();
}

std::unique_ptr<RendezvousServer> start_server(std::string host = "127.0.0.1") {
    ServerOptions options;
    options.host = host;
    auto server = std::make_unique<RendezvousServer>(options);
    server->start();
    return server;
}

std::string address_of(const RendezvousServer& server, const std::string& host = "127.0.0.1") {
    return fmt::format("{}:{}", host, server.port());
}

TEST(GlooFaults, KilledRankIsNamedByEveryPeerAndTheNextJobRuns) {
    if (!gloo_available()) GTEST_SKIP() << "this build has no gloo backend";
    if (g_rank >= 0) GTEST_SKIP() << "runs alone, not under braid-launch";
    auto server = start_server();
    const int size = 3, victim = 2;
    std::vector<Worker> workers;
    for (int r = 0; r < size; ++r)
        workers.push_back(spawn_worker("allreduce", r, size, address_of(*server),
                                       {fmt::format("BRAID_TEST_VICTIM={}", victim)}));
    for (int r = 0; r < size; ++r) {
        int status = wait_worker(workers[r]);
        std::string text = read_report(workers[r]);
        if (r == victim) {
            EXPECT_EQ(status, 128 + SIGKILL) << text;
            continue;
        }
        ASSERT_EQ(status, 3) << "rank " << r << ": " << text;
        double seconds = std::stod(text);
        // Within the 4 s timeout plus the wait for the peers' failure reports (1 s).
        EXPECT_LT(seconds, 5.5) << text;
        // "peer rank 2 did not report ..." (or "peer ranks 1, 2 ..." on a very slow machine).
        EXPECT_NE(text.find("2 did not report this failure"), std::string::npos)
            << "rank " << r << ": " << text;
    }
    // The next job on the same server, same key and size, runs as if nothing happened.
    workers.clear();
    for (int r = 0; r < size; ++r)
        workers.push_back(spawn_worker("allreduce", r, size, address_of(*server)));
    for (int r = 0; r < size; ++r) {
        int status = wait_worker(workers[r]);
        EXPECT_EQ(status, 0) << "rank " << r << ": " << read_report(workers[r]);
    }
    EXPECT_EQ(server->manager()->nr_pending(), 0u);
}

TEST(GlooFaults, SurvivorsInDifferentCallsNameEachOtherAlive) {
    if (!gloo_available()) GTEST_SKIP() << "this build has no gloo backend";
    if (g_rank >= 0) GTEST_SKIP() << "runs alone, not under braid-launch";
    auto server = start_server();
    const int size = 3;
    std::vector<Worker> workers;
    for (int r = 0; r < size; ++r)
        workers.push_back(spawn_worker("two-calls", r, size, address_of(*server)));
    for (int r = 0; r < size; ++r) {
        int status = wait_worker(workers[r]);
        std::string text = read_report(workers[r]);
        if (r == 2) {
            EXPECT_EQ(status, 128 + SIGKILL) << text;
            continue;
        }
        ASSERT_EQ(status, 3) << "rank " << r << ": " << text;
        // The other survivor is alive: blocked in its call (the first to fail sees it so), or
        // failed there (the second sees that); either way named with its call, not as dead.
        int other = 1 - r;
        EXPECT_NE(text.find("peer rank 2 did not report this failure"), std::string::npos)
            << "rank " << r << ": " << text;
        std::string call = fmt::format("gloo all_reduce (key \"calls-{}\", rank {} of 3)",
                                       other == 0 ? 'a' : 'b', other);
        bool blocked = text.find(fmt::format("peer rank {} is alive, blocked in {}", other,
                                             call)) != std::string::npos;
        bool failed = text.find(fmt::format("peer rank {} is alive but failed in another call: {}",
                                            other, call)) != std::string::npos;
        EXPECT_TRUE(blocked || failed) << "rank " << r << ": " << text;
    }
}

TEST(GlooFaults, StoppedServerFailsWaitingClientsAtOnce) {
    if (!gloo_available()) GTEST_SKIP() << "this build has no gloo backend";
    if (g_rank >= 0) GTEST_SKIP() << "runs alone, not under braid-launch";
    auto server = start_server();
    const int size = 2;
    std::vector<Worker> workers;
    for (int r = 0; r < size; ++r)
        workers.push_back(spawn_worker("server-stop", r, size, address_of(*server)));
    InProcessGroupClient local(server->manager());
    for (int r = 0; r < size; ++r) local.get(fmt::format("ready/{}", r), std::chrono::seconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(100)); // both are in their get()
    server->stop();
    for (int r = 0; r < size; ++r) {
        ASSERT_EQ(wait_worker(workers[r]), 0);
        std::string text = read_report(workers[r]);
        double waited = std::stod(text), total = std::stod(text.substr(text.find(' ')));
        EXPECT_LT(waited, 3.0) << text;
        EXPECT_LT(total, 10.0) << text;
        EXPECT_NE(text.find("CommError: get(key \"never-set\")"), std::string::npos) << text;
        EXPECT_NE(text.find("rendezvous server"), std::string::npos) << text;
        EXPECT_NE(text.find("opr_register(key \"after-stop\")"), std::string::npos) << text;
    }
}

TEST(GlooFaults, RanksOnTwoLoopbackAddressesMeet) {
    if (!gloo_available()) GTEST_SKIP() << "this build has no gloo backend";
    if (g_rank >= 0) GTEST_SKIP() << "runs alone, not under braid-launch";
    auto server = start_server();
    const int size = 2;
    std::vector<Worker> workers;
    for (int r = 0; r < size; ++r)
        workers.push_back(spawn_worker("two-addresses", r, size, address_of(*server),
                                       {fmt::format("BRAID_GLOO_HOST=127.0.0.{}", r + 2)}));
    for (int r = 0; r < size; ++r) {
        EXPECT_EQ(wait_worker(workers[r]), 0);
        EXPECT_EQ(read_report(workers[r]), "1 1 1 1 2 2 2 2 | 3") << "rank " << r;
    }
}

//! What ranks other than 0 print: their failed assertions only, naming the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
public:
    explicit FailurePrinter(int rank) : m_rank(rank) {}
    void OnTestStart(const ::testing::TestInfo& test) override {
        m_test = fmt::format("{}.{}", test.test_suite_name(), test.name());
    }
    void OnTestPartResult(const ::testing::TestPartResult& result) override {
        if (!result.failed()) return;
        std::fprintf(stderr, "rank %d: %s failed at %s:%d\n%s\n", m_rank, m_test.c_str(),
                     result.file_name() ? result.file_name() : "?", result.line_number(),
                     result.message());
    }

private:
    int m_rank;
    std::string m_test;
};

} // namespace
} // namespace braid::comm::test

int main(int argc, char** argv) {
    using namespace braid::comm::test;
    g_self = "/proc/self/exe";
    char path[4096];
    if (ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1); n > 0)
        g_self.assign(path, size_t(n));
    if (argc == 3 && std::string(argv[1]) == "--worker") return run_worker(argv[2]);
    ::testing::InitGoogleTest(&argc, argv);
    if (std::getenv("BRAID_RANK") && std::getenv("BRAID_SERVER")) {
        g_rank = env_int("BRAID_RANK");
        g_world_size = env_int("BRAID_WORLD_SIZE");
        g_client = client_from_env();
        if (g_rank != 0) {
            auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
            delete listeners.Release(listeners.default_result_printer());
            listeners.Append(new FailurePrinter(g_rank));
        }
    }
    int failed = RUN_ALL_TESTS();
    braid::comm::CommunicatorCache::instance().clear();
    g_client.reset();
    return failed;
}
