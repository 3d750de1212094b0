// The main() of the mpirun test binaries (mpi_test_main.cpp): it initialises MPI, lets ranks
// meet through comm::MpiRendezvous (rank 0 hosts the rendezvous server in-process), runs the
// tests on every rank (only rank 0 prints gtest's report) and exits nonzero on every rank when
// any rank had a failure.
#pragma once

#include "comm/group_client.h"

#include <memory>

namespace braid::comm::test {

//! The group client of this process, valid while the tests run.
const std::shared_ptr<GroupClient>& mpi_test_client();

} // namespace braid::comm::test
