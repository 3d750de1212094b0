// braid-run under mpirun: one rank per process with --backend mpi, meeting at the group
// manager that MPI rank 0 hosts, or at a running server named by --server. The test itself is
// one process; it launches mpirun, whose program and flags are its command-line arguments:
//
//     braid_cli_mpi_tests mpirun --oversubscribe --allow-run-as-root --mca btl self,vader
#include "comm/rendezvous_server.h"
#include "helpers.h"
#include "serialization/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace braid;
using namespace braid::test;
using ::testing::HasSubstr;

namespace {

const std::string RUN = BRAID_RUN_PATH;
const std::string DP = std::string(BRAID_EXAMPLE_MODELS_DIR) + "/dp_allreduce.braid";
//! The mpirun program and its flags.
std::vector<std::string> g_mpirun;

//! The mpirun command line: the launcher, its flags, then `apps` (a ":"-separated MPMD list
//! when more than one).
ToolResult mpirun(const std::vector<std::vector<std::string>>& apps) {
    std::vector<std::string> args(g_mpirun.begin() + 1, g_mpirun.end());
    for (size_t i = 0; i < apps.size(); ++i) {
        if (i) args.push_back(":");
        args.insert(args.end(), apps[i].begin(), apps[i].end());
    }
    return run_tool(g_mpirun.at(0), args);
}

//! braid-run's arguments: the dp_allreduce model, fixed inputs, `flags`.
std::vector<std::string> dp_run(const TempDir& dir, std::vector<std::string> flags) {
    std::vector<std::string> a = {RUN, DP, "--iter", "2"};
    auto inputs = write_dp_inputs(dir);
    a.insert(a.end(), inputs.begin(), inputs.end());
    a.insert(a.end(), flags.begin(), flags.end());
    return a;
}

//! The single-rank outputs in DIR/one.
void run_single_rank(const TempDir& dir) {
    auto a = dp_run(dir, {"--output-dir", dir.file("one")});
    auto r = run_tool(a[0], {a.begin() + 1, a.end()});
    ASSERT_EQ(r.status, 0) << r.err;
}

} // namespace

TEST(BraidRunMpi, TwoProcessesGiveTwiceTheSingleRankOutput) {
    TempDir dir;
    run_single_rank(dir);
    auto a = dp_run(dir, {"--backend", "mpi", "--json", "--output-dir", dir.file("two")});
    a.insert(a.begin(), {"-np", "2"});
    auto r = mpirun({a});
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    expect_scaled_outputs(dir.file("one"), dir.file("two"), 2.f);
    // MPI rank 0 alone reports.
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_THAT(r.out, HasSubstr("\"rank\":0,\"world_size\":2"));
    EXPECT_THAT(r.out, HasSubstr("rank 0 of 2 (mpi backend, group manager on MPI rank 0)"));
}

TEST(BraidRunMpi, TwoProcessesJoinARunningServer) {
    comm::RendezvousServer server;
    std::string address = fmt::format("127.0.0.1:{}", server.start());
    TempDir dir;
    run_single_rank(dir);
    std::vector<std::vector<std::string>> apps;
    for (int rank = 0; rank < 2; ++rank) {
        auto a =
            dp_run(dir, {"--backend", "mpi", "--server", address, "--rank", std::to_string(rank),
                         "--world-size", "2", "--output-dir", dir.file("two")});
        a.insert(a.begin(), {"-np", "1"});
        apps.push_back(a);
    }
    auto r = mpirun(apps);
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    expect_scaled_outputs(dir.file("one"), dir.file("two"), 2.f);
    EXPECT_THAT(r.out, HasSubstr("rank 0 of 2 (mpi backend, server " + address + ")"));

    // A --rank that is not the process's MPI rank is a usage error on that rank.
    auto flag = std::find(apps[0].begin(), apps[0].end(), "--rank");
    ASSERT_NE(flag, apps[0].end());
    *(flag + 1) = "1";
    auto wrong = mpirun(apps);
    EXPECT_NE(wrong.status, 0);
    EXPECT_THAT(wrong.err, HasSubstr("--rank 1 differs from this process's MPI rank 0"));
}

TEST(BraidRunMpi, ContextParallelBlockEqualsTheSingleRankBlock) {
    // The model examples/context_parallel_block dumps for 2 ranks, run by braid-run as 2
    // threads and as 2 MPI processes, gives the output of transformer_block.braid.
    TempDir dir;
    auto dumped = run_tool(BRAID_CP_EXAMPLE_PATH, {"--ranks", "2", "--dump", dir.file("cp.braid")});
    ASSERT_EQ(dumped.status, 0) << dumped.err;
    write_npy(dir.file("x.npy"), random_input({128, 256}, 5));
    std::string x = "x=" + dir.file("x.npy");
    auto single = run_tool(RUN, {std::string(BRAID_EXAMPLE_MODELS_DIR) + "/transformer_block.braid",
                                 "--iter", "1", "--input", x, "--output-dir", dir.file("one")});
    ASSERT_EQ(single.status, 0) << single.err;
    Tensor want = read_npy(dir.file("one/y.npy"));
    auto expect_same = [&](const std::string& out_dir) {
        Tensor got = read_npy(dir.file(out_dir + "/y.npy"));
        ASSERT_EQ(got.shape(), want.shape());
        double diff = 0, scale = 0;
        for (size_t i = 0; i < want.shape().total_nr_elems(); ++i) {
            diff = std::max(diff, double(std::fabs(got.ptr<float>()[i] - want.ptr<float>()[i])));
            scale = std::max(scale, double(std::fabs(want.ptr<float>()[i])));
        }
        EXPECT_LE(diff, 1e-5 * scale) << out_dir;
    };
    auto threads = run_tool(RUN, {dir.file("cp.braid"), "--iter", "1", "--devices", "2", "--input",
                                  x, "--output-dir", dir.file("threads")});
    ASSERT_EQ(threads.status, 0) << threads.err;
    expect_same("threads");
    auto procs = mpirun({{"-np", "2", RUN, dir.file("cp.braid"), "--iter", "1", "--backend", "mpi",
                          "--input", x, "--output-dir", dir.file("procs")}});
    ASSERT_EQ(procs.status, 0) << procs.out << procs.err;
    expect_same("procs");
    // Built for 2 ranks, it refuses 3 (here the all-to-all that shards the input sees it
    // first; ring attention refuses too) rather than attend to the wrong positions.
    auto three = run_tool(RUN, {dir.file("cp.braid"), "--iter", "1", "--devices", "3"});
    EXPECT_NE(three.status, 0);
    EXPECT_THAT(three.err, HasSubstr("not divisible by nr_devices 3"));
}

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    for (int i = 1; i < argc; ++i) g_mpirun.push_back(argv[i]);
    if (g_mpirun.empty()) {
        std::fprintf(stderr, "usage: %s MPIRUN [MPIRUN FLAGS...]\n", argv[0]);
        return 2;
    }
    return RUN_ALL_TESTS();
}
