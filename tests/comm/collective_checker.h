// Shared by the local (threads) and MPI (processes) collective tests: one case struct,
// deterministic per-rank inputs, and a plain-loop reference every rank computes for itself.
#pragma once

#include "comm/communicator.h"

#include <string>
#include <vector>

namespace braid::comm::test {

//! The collectives under test.
enum class Collective {
    ALL_REDUCE,
    REDUCE,
    BROADCAST,
    ALL_GATHER,
    REDUCE_SCATTER,
    GATHER,
    SCATTER,
    ALL_TO_ALL,
    SEND_RECV
};

const char* collective_name(Collective c);

//! One call to check.
struct CollectiveCase {
    Collective collective;
    DType dt;
    ReduceOp op = ReduceOp::SUM;
    size_t count = 0; //!< the count argument of the call (per block for block collectives)
    uint32_t root = 0;
    bool in_place = false;
    uint64_t seed = 0;

    std::string to_string() const;
};

//! The dtypes every collective supports.
std::vector<DType> comm_dtypes();

//! Every case of `collective` over every dtype (and op, for reductions), for counts
//! {0, 1, 1000} and, where the collective has them, every root and the in-place variant.
std::vector<CollectiveCase> sweep(Collective collective, uint32_t nranks);

/*!
 * Runs `c` on this rank of `comm` with deterministic inputs and compares the result with a
 * reference computed from every rank's inputs. Returns an empty string when it matches,
 * else what differed (first mismatching element). A backend whose buffers live on a device
 * (buffer_kind()) works on device copies of the buffers, synchronized and copied back.
 */
std::string run_and_check(Communicator& comm, const CollectiveCase& c);

/*!
 * In deterministic mode (base/determinism.h): all_reduce, reduce (root 0 and the last rank) and
 * reduce_scatter SUM over float32, float16 and bfloat16 values whose sums round (so the order
 * of the additions shows), in place and not, for counts 1, 7, 1000 and 4099; each result must be
 * the same bits as the ranks added in rank order, ((x0 + x1) + x2) + ..., in float32, rounded
 * once to the dtype. Returns "" when every call matches, else the first difference.
 */
std::string check_rank_ordered_sums(Communicator& comm);

} // namespace braid::comm::test
