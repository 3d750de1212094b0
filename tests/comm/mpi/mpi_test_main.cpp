#include "mpi_test_main.h"

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_rendezvous.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdio>
#include <string>

namespace braid::comm::test {
namespace {

std::shared_ptr<GroupClient> g_client;

//! What ranks other than 0 print: their failed assertions only, naming the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
public:
    explicit FailurePrinter(int rank) : m_rank(rank) {}
    void OnTestStart(const ::testing::TestInfo& test) override {
        m_test = fmt::format("{}.{}", test.test_suite_name(), test.name());
    }
    // Called under gtest's lock: it must not call back into UnitTest.
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

const std::shared_ptr<GroupClient>& mpi_test_client() {
    return g_client;
}

} // namespace braid::comm::test

int main(int argc, char** argv) {
    using namespace braid::comm;
    ::testing::InitGoogleTest(&argc, argv);
    mpi_ensure_initialized();
    int rank = mpi_world_rank();
    // Only rank 0 prints gtest's report; the others print their failures alone.
    if (rank != 0) {
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
        listeners.Append(new test::FailurePrinter(rank));
    }
    auto rendezvous = std::make_unique<MpiRendezvous>();
    test::g_client = rendezvous->client();
    int failed = RUN_ALL_TESTS();
    int any_failed = 0;
    BRAID_MPI_CHECK(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (failed) std::fprintf(stderr, "%s: rank %d had failures\n", argv[0], rank);
    test::g_client.reset();
    CommunicatorCache::instance().clear();
    rendezvous.reset();
    return any_failed;
}
