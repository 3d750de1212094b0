// Plain-loop references of the CollectiveComm modes, shared by the thread tests
// (tests/collective/test_collective_comm.cpp) and the mpirun tests
// (tests/comm/mpi/mpi_collective_comm_test.cpp): every rank computes, from all ranks' inputs,
// what each rank's output must be.
#pragma once

#include "braid.h"

#include <memory>
#include <string>
#include <vector>

namespace braid::test {

//! Every mode, in declaration order.
const std::vector<opr::CollectiveMode>& all_collective_modes();

//! Whether a rank passes an input to `mode` (BROADCAST and SCATTER non-roots pass none).
bool collective_has_input(opr::CollectiveMode mode, bool is_root);

//! The params of one rank's collective: `rank` of `n`, root `root`, on `backend`.
opr::CollectiveParam collective_param(opr::CollectiveMode mode, const std::string& key, uint32_t n,
                                      uint32_t rank, uint32_t root,
                                      std::shared_ptr<comm::GroupClient> client,
                                      const std::string& backend = "local");

/*!
 * The expected float32 output of `rank` for `mode`, from every rank's input (`inputs[r]`,
 * empty for ranks without one). Non-roots of REDUCE_SUM and GATHER get their {1} zero
 * placeholder.
 */
Tensor collective_reference(opr::CollectiveMode mode, const std::vector<Tensor>& inputs,
                            uint32_t rank, uint32_t root);

} // namespace braid::test
