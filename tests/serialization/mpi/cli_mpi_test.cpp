// braid-run under mpirun: one rank per process with --backend mpi, meeting at the group
// manager that MPI rank 0 hosts, or at a running server named by --server. The test itself is
// one process; it launches mpirun, whose program and flags are its command-line arguments:
//
//     braid_cli_mpi_tests mpirun --oversubscribe --allow-run-as-root --mca btl self,vader
#include "comm/rendezvous_server.h"
#include "helpers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

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

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    for (int i = 1; i < argc; ++i) g_mpirun.push_back(argv[i]);
    if (g_mpirun.empty()) {
        std::fprintf(stderr, "usage: %s MPIRUN [MPIRUN FLAGS...]\n", argv[0]);
        return 2;
    }
    return RUN_ALL_TESTS();
}
