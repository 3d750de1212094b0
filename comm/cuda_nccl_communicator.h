// The "nccl" backend: ranks are CUDA devices, collectives run as NCCL kernels on the stream
// of the communicator's CUDA comp node (builds with CUDA and NCCL only).
//
// Setup: the group's root calls ncclGetUniqueId and shares the id through the group client
// (bcast_bytes under nccl_unique_id_key(hash)); then every rank makes its comp node's device
// current and calls ncclCommInitRankConfig with a nonblocking config (blocking = 0), polling
// ncclCommGetAsyncError until the communicator is ready or the deadline passes. On timeout
// the half-made communicator is aborted (ncclCommAbort) and TimeoutError names the key and
// the rank. Each rank needs its own device: one process may drive several GPUs (one comp
// node, hence one communicator, per device, each used from its comp node's thread), or run
// one process per GPU (mpirun, or processes meeting at a braid-rendezvous).
//
// Calls: every mode maps to NCCL. all_reduce, reduce, broadcast, all_gather and
// reduce_scatter are NCCL's own collectives; gather, scatter and all_to_all are grouped
// ncclSend/ncclRecv (ncclGroupStart/End) plus a device copy of the rank's own block;
// send/recv are ncclSend/ncclRecv. A call makes the comp node's device current, enqueues on
// its stream and returns once NCCL has queued the work: with a nonblocking communicator a
// call may answer ncclInProgress, and the backend polls ncclCommGetAsyncError until the work
// is queued, within the call's deadline. Results are ready once the stream reaches them:
// later work on the same stream is ordered after them, and synchronize() waits for the stream
// with the deadline. A timeout or an NCCL error aborts the NCCL communicator and breaks the
// braid one. Buffers must be device memory of the comp node's device (or managed memory);
// host pointers are refused with ValueError before anything is queued. float16 and bfloat16
// are reduced by NCCL in their own precision (rounded at each step, not once as on the CPU
// backends).
//
// This header includes no CUDA or NCCL header, so shared code may declare the backend.
#pragma once

#include "comm/communicator.h"

struct ncclComm;

namespace braid {
class CudaContext;
}

namespace braid::comm {

//! The bcast_bytes key under which the root of the group with hash `hash` shares its NCCL
//! unique id.
std::string nccl_unique_id_key(uint64_t hash);

//! One rank of an NCCL group, on one CUDA comp node. Not thread-safe (one caller at a time).
class NcclCommunicator final : public Communicator {
public:
    /*!
     * Creates the NCCL communicator on desc.comp_node's device; needs a CUDA comp node and
     * desc.group_client. Throws ValueError for a missing comp node or client, TimeoutError
     * when the peers do not all join in time, LibraryError when NCCL or CUDA fail.
     */
    explicit NcclCommunicator(const CommunicatorDesc& desc);
    //! Finalizes and destroys the NCCL communicator (aborts it when that does not finish by
    //! the deadline, or when the communicator is broken).
    ~NcclCommunicator() override;

    const char* backend() const override { return "nccl"; }
    Device::Kind buffer_kind() const override { return Device::Kind::CUDA; }
    //! The CUDA device index of the comp node.
    int device() const;
    //! The NCCL communicator (nullptr once aborted).
    ncclComm* nccl_comm() const { return m_comm; }

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
    void do_synchronize() override;

private:
    //! Shares the unique id and initializes m_comm (see the header comment).
    void init();
    /*!
     * Runs `calls` (which make NCCL calls on m_comm) with the device current, then waits
     * until NCCL has queued their work; on timeout or an NCCL error the communicator is
     * aborted and the error thrown. `grouped` wraps the calls in ncclGroupStart/End.
     */
    template <typename Calls> void enqueue(const char* call, bool grouped, Calls&& calls);
    //! Polls ncclCommGetAsyncError until m_comm left ncclInProgress or `deadline` passed.
    //! `waiting_for` completes the timeout message ("... timed out after 5 s: <waiting_for>").
    void wait_ready(const char* call, const Deadline& deadline, const char* waiting_for);
    //! Throws ValueError unless `ptr` is memory the device can use (count > 0 only).
    void check_device_ptr(const char* call, const char* what, const void* ptr) const;
    //! Enqueues a device-to-device copy of `bytes` on the stream (own blocks).
    void copy_on_stream(void* dst, const void* src, size_t bytes) const;
    //! ncclCommAbort (errors only logged) and forgets m_comm. Never throws.
    void abort() noexcept;

    CudaContext* m_cuda = nullptr;
    ncclComm* m_comm = nullptr;
};

//! The "nccl" backend's factory (registered as "nccl" in builds with NCCL).
std::shared_ptr<Communicator> make_nccl_communicator(const CommunicatorDesc& desc);

} // namespace braid::comm
