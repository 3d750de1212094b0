// The "local" backend: ranks are threads of one process, collectives run on shared memory.
//
// Peers of one group find each other in a process-wide registry keyed by the group hash.
// Each collective publishes every rank's buffer pointers, meets at a barrier, lets every
// rank do its share reading its peers' buffers directly, and meets at a second barrier
// before anyone returns (peers may still be reading its buffers until then). Each byte
// moves as few times as the operation allows; all_reduce, for one, is a reduce-scatter and
// an all-gather fused: rank r reduces slice r of all send buffers in cache-sized chunks
// and writes each reduced chunk straight into every rank's recv buffer, so every rank
// reads and writes each byte once. The barrier counts generations, spins briefly and then
// sleeps until its deadline; a rank that times out or finds its peers in another call
// aborts the group, so its peers fail at once instead of waiting out their deadlines.
#pragma once

#include "comm/communicator.h"

#include <memory>

namespace braid::comm {

class LocalGroup;

//! One rank of a local group. Not thread-safe (one caller at a time, like every
//! Communicator); different ranks of a group run in different threads.
class LocalCommunicator final : public Communicator {
public:
    //! Joins (or creates) the process-wide group of `desc.hash`. Throws CommError when the
    //! rank already joined or the group was created with another size.
    explicit LocalCommunicator(const CommunicatorDesc& desc);
    ~LocalCommunicator() override;

    const char* backend() const override { return "local"; }

protected:
    //! reduce_to_many adds the ranks' buffers in rank order.
    bool sums_in_rank_order() const override { return true; }
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
    struct Call;
    //! Publishes this rank's arguments, waits for every peer, checks they are in the same
    //! call with the same arguments, runs `work` (this rank's share), waits again.
    template <typename Work> void collective(const Call& call, Work&& work);

    std::shared_ptr<LocalGroup> m_group;
    uint64_t m_sequence = 0;
};

//! The "local" backend's factory (registered as "local").
std::shared_ptr<Communicator> make_local_communicator(const CommunicatorDesc& desc);

} // namespace braid::comm
