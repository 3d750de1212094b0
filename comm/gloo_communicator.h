// The "gloo" backend: one process per rank, on any host, meeting through the group manager.
//
// Built on Debian's libgloo-dev (TCP transport) when CMake finds it; otherwise the backend
// is still registered, and making one throws CommError saying it was not built.
//
// Creation: the members of a group (one opr_register round) run gloo's full-mesh rendezvous
// through GroupClientStore, a gloo::rendezvous::Store whose set/get/wait/add are the group
// client's key-value calls under the prefix "braid.gloo.<group hash>/", each with the
// communicator's deadline. The group hash changes with every registration round, so a later
// job on the same server never reads an earlier job's addresses.
//
// Which address a rank listens on (see GlooAddress): BRAID_GLOO_IFACE (an interface name)
// or BRAID_GLOO_HOST (an address or host name) when set; else 127.0.0.1 when the group
// manager is in-process or on a loopback address; else the local address this host uses to
// reach the group manager's host.
//
// Calls: gloo's allreduce, reduce, broadcast, allgather, gather, scatter and alltoall; a
// reduce_scatter is an allreduce into scratch memory and a copy of this rank's block; send
// and recv are gloo unbound buffers. float16 and bfloat16 reduce in float32 (rounded once,
// like the other backends). Every gloo wait gets the time left to the call's deadline.
//
// Failures: when a call fails (a peer's connection closed, or a wait timed out), this rank
// closes its connections, so that the peers blocked on it fail at once too, and marks the
// communicator broken. Before throwing, it publishes that it is alive and failing (key
// "braid.gloo.<hash>/failed/<rank>") and waits briefly (FAILURE_REPORT_WAIT, at most a
// quarter of the timeout) for the peers' own reports: the peers that never report are named
// in the error as dead (or never reaching the call), unless PeerLiveness shows them alive
// elsewhere: failing in another call, or blocked in one (then the error says which call).
// Thread-safety: one caller at a time, like every Communicator.
#pragma once

#include "comm/communicator.h"

#include <memory>
#include <string>

namespace gloo {
class Context;
} // namespace gloo

namespace braid::comm {

//! Whether this build has the gloo backend (libgloo-dev was found at configure time).
bool gloo_available();

//! How long a failing rank waits for its peers' failure reports, at most.
constexpr Duration FAILURE_REPORT_WAIT = std::chrono::milliseconds(2000);

//! Where a rank's gloo transport listens.
struct GlooAddress {
    std::string iface;    //!< network interface name (BRAID_GLOO_IFACE), or empty
    std::string hostname; //!< address or host name to bind when iface is empty
};

/*!
 * The listening address for a group whose manager is at `manager_address` (a GroupClient's
 * address(): "in-process" or "tcp://HOST:PORT"), from the environment as the file header
 * says. Throws CommError when no route to the manager's host is found.
 */
GlooAddress gloo_address(const std::string& manager_address);

#if BRAID_WITH_GLOO
//! One rank of a gloo group. Not thread-safe (one caller at a time).
class GlooCommunicator final : public Communicator {
public:
    //! Connects to every peer through the group manager; needs desc.group_client. Throws
    //! TimeoutError when peers do not show up in time, CommError when connecting fails.
    explicit GlooCommunicator(const CommunicatorDesc& desc);
    ~GlooCommunicator() override;

    const char* backend() const override { return "gloo"; }

protected:
    void do_all_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op) override;
    void do_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                   uint32_t root) override;
    void do_broadcast(const void* send, void* recv, size_t count, DType dt, uint32_t root) override;
    void do_all_gather(const void* send, void* recv, size_t send_count, DType dt) override;
    void do_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                           ReduceOp op) override;
    void do_gather(const void* send, void* recv, size_t send_count, DType dt,
                   uint32_t root) override;
    void do_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                    uint32_t root) override;
    void do_all_to_all(const void* send, void* recv, size_t count, DType dt) override;
    void do_send(const void* buf, size_t count, DType dt, uint32_t peer) override;
    void do_recv(void* buf, size_t count, DType dt, uint32_t peer) override;

private:
    //! Runs `body` (given the time left to the deadline); turns a gloo failure into
    //! TimeoutError or CommError naming the peers that did not report back.
    template <typename Body> void run(const char* call, Body&& body);
    //! Publishes this rank's failure of `call` (PeerLiveness::publish_failure) and returns,
    //! as text, the peers that did not publish theirs within the report wait and are not
    //! known to be alive, and the peers alive in another call ("" when all failed in this).
    std::string missing_peers(const char* call, const std::string& reason);
    //! The all_reduce of float32 copies of a float16/bfloat16 buffer.
    void all_reduce_widened(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                            Duration left);

    std::string m_prefix; //!< key-value prefix of this group
    std::shared_ptr<gloo::Context> m_context;
    uint32_t m_tag = 0; //!< tag of the next collective
    std::vector<float> m_scratch;
    std::vector<uint8_t> m_bytes;
    uint64_t m_liveness_id = 0; //!< this communicator's member id in PeerLiveness
};
#endif

//! The "gloo" backend's factory (registered as "gloo"); throws CommError in builds without
//! gloo.
std::shared_ptr<Communicator> make_gloo_communicator(const CommunicatorDesc& desc);

} // namespace braid::comm
