// Entry handshakes of the "mpi" backend: before a collective, the ranks of a group learn,
// within a deadline, that every peer entered it too, and otherwise name the ranks that did
// not come.
//
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
//
// MpiArrivalExchange: the handshake of groups that use nonblocking MPI calls (spanning
// machines, or BRAID_MPI_NONBLOCKING=1). Each rank sends every peer the number of the call
// it entered (MPI_Isend on a communicator of its own) and polls for the peers' messages
// until its deadline. The collective follows only once every peer's message arrived, so a
// rank that never comes is named by every rank waiting for it, and no MPI collective request
// is left behind. Not thread-safe (one caller per rank).
#pragma once

#include "comm/deadline.h"

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace braid::comm {

//! "2 of 3 ranks arrived; missing ranks: 2" (at most 16 listed, then how many more).
std::string describe_arrivals(uint32_t nranks, const std::vector<uint32_t>& missing);

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
     * passed first, CommError naming the rank that gave up and the ranks still missing when
     * another rank's deadline did; then nobody makes the call.
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
    //! "2 of 3 ranks arrived; missing ranks: 2" for call #`sequence`, as the counters say now.
    std::string arrivals(uint64_t sequence) const;

    uint8_t* m_base;
    size_t m_size;
    uint32_t m_nranks;
    uint32_t m_rank;
};

//! Arrival exchange of one MPI group over point-to-point messages.
class MpiArrivalExchange {
public:
    //! Collective over `comm` (duplicates it, so the exchange's messages never meet the
    //! group's own); made right after the rendezvous, when every member is present.
    MpiArrivalExchange(MPI_Comm comm, uint32_t nranks, uint32_t rank);
    ~MpiArrivalExchange();
    MpiArrivalExchange(const MpiArrivalExchange&) = delete;
    MpiArrivalExchange& operator=(const MpiArrivalExchange&) = delete;

    /*!
     * Tells every peer that this rank entered call #`sequence` and waits until every peer
     * said the same. Throws TimeoutError naming the ranks that did not arrive when the
     * deadline passes first (the messages still pending are cancelled or released), and
     * CommError when a peer reports another call number (the ranks' calls are out of step).
     * `what` names the call in messages.
     */
    void enter(uint64_t sequence, const Deadline& deadline,
               const std::function<std::string()>& what);
    //! Leaves the duplicated communicator to MPI instead of freeing it (its group broke).
    void abandon();

private:
    //! Completes (cancels) the receives still pending and releases the sends.
    void cancel_pending();

    MPI_Comm m_comm = MPI_COMM_NULL;
    uint32_t m_nranks;
    uint32_t m_rank;
    uint64_t m_sent = 0;                 //!< the number this rank sends (must outlive the sends)
    std::vector<uint64_t> m_received;    //!< per peer
    std::vector<MPI_Request> m_sends;    //!< per peer
    std::vector<MPI_Request> m_receives; //!< per peer
};

} // namespace braid::comm
