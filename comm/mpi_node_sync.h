// MpiNodeSync: a deadline-bounded entry handshake for the ranks of one MPI group that share
// a machine, so they can use MPI's fast blocking collectives without waiting forever.
//
// Why: MPI calls have no deadline, and OpenMPI's nonblocking collectives (what a polling
// wait needs) are several times slower than its blocking ones for small messages. A
// blocking collective can only hang when a peer never enters it, so the ranks first agree,
// through a few words of POSIX shared memory, that every one of them has entered call #s;
// then all make the blocking call. The agreement is a single decision word per group that
// exactly one rank sets with compare-and-swap for each call: GO, by whichever rank sees
// every peer's arrival counter at s, or ABORT, by a rank whose deadline passed first. A
// rank whose deadline passes after GO was decided goes on into the call, so either all
// ranks make the blocking call or none does. Not thread-safe (one caller per rank).
#pragma once

#include "comm/deadline.h"

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace braid::comm {

//! Shared-memory entry handshake of one MPI group on one machine.
class MpiNodeSync {
public:
    /*!
     * Collective over `comm` (the group's communicator; blocking MPI calls, made right after
     * the rendezvous, so every member is present). Returns null on every rank when the group
     * spans machines or the shared segment cannot be set up on some rank.
     */
    static std::unique_ptr<MpiNodeSync> create(MPI_Comm comm, uint64_t hash, uint32_t nranks,
                                               uint32_t rank);
    ~MpiNodeSync();
    MpiNodeSync(const MpiNodeSync&) = delete;
    MpiNodeSync& operator=(const MpiNodeSync&) = delete;

    /*!
     * Announces that this rank entered call #`sequence` (1, 2, ... in call order) and waits
     * until every rank did. Throws TimeoutError naming the missing ranks when the deadline
     * passed first, CommError when another rank's deadline did; then nobody makes the call.
     */
    //! `what` names the call in messages (built only when one is thrown).
    void enter(uint64_t sequence, const Deadline& deadline,
               const std::function<std::string()>& what);

private:
    MpiNodeSync(uint8_t* base, size_t size, uint32_t nranks, uint32_t rank)
        : m_base(base), m_size(size), m_nranks(nranks), m_rank(rank) {}
    uint64_t* decision() const;
    uint64_t* counter(uint32_t rank) const;
    //! Sets the decision for `sequence` unless one was made; true when this call made it.
    bool decide(uint64_t sequence, uint64_t state);

    uint8_t* m_base;
    size_t m_size;
    uint32_t m_nranks;
    uint32_t m_rank;
};

} // namespace braid::comm
