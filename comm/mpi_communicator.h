// The "mpi" backend: one process per rank, launched by mpirun (OpenMPI).
//
// MPI is initialised lazily, once per process, with MPI_THREAD_MULTIPLE (unless the
// application initialised it already) and finalised at exit when braid initialised it.
// Each group gets its own MPI communicator: the members learn each other's world ranks
// through the group client (one bcast_bytes per rank, keyed by the group hash) and build
// it with MPI_Comm_create_group, which only the members take part in, so groups of a
// subset of the world need no cooperation from the other processes.
//
// MPI calls have no deadline, so no collective may start before every peer is known to
// make it too. When all ranks of a group share a machine (the common case), they first
// pass a shared-memory entry handshake with a deadline (comm/mpi_node_sync.h) and then make
// MPI's blocking collective, as fast as raw MPI. Otherwise, or with BRAID_MPI_NONBLOCKING=1,
// the ranks first exchange arrival messages with a deadline (MpiArrivalExchange, same
// header), then make nonblocking MPI calls (MPI_Iallreduce, ...) completed by polling
// MPI_Test until the deadline (OpenMPI's nonblocking collectives are markedly slower for
// small messages). Either way a rank that never enters a collective is named, by rank, in
// the error of every rank waiting for it. send and recv are always MPI_Isend / MPI_Irecv polled to
// the deadline. On a timeout a TimeoutError is thrown and the communicator is broken. The unbounded
// MPI calls left are the blocking setup calls at creation (MPI_Comm_create_group and friends, made
// right after every member passed the rendezvous) and MPI_Finalize at exit. Every MPI call
// is checked and a failure throws LibraryError with MPI's own error string.
#pragma once

#include "comm/communicator.h"
#include "comm/mpi_node_sync.h"

#include <mpi.h>

namespace braid::comm {

namespace detail {
[[noreturn]] void mpi_call_failed(int code, const char* expr, const char* file, int line);
} // namespace detail

//! Runs an MPI call and throws LibraryError with MPI's error string unless it succeeded.
#define BRAID_MPI_CHECK(expr)                                                                      \
    do {                                                                                           \
        int braid_mpi_rc_ = (expr);                                                                \
        if (braid_mpi_rc_ != MPI_SUCCESS) [[unlikely]]                                             \
            ::braid::comm::detail::mpi_call_failed(braid_mpi_rc_, #expr, __FILE__, __LINE__);      \
    } while (0)

//! Initialises MPI once (MPI_THREAD_MULTIPLE) unless already initialised; registers
//! MPI_Finalize at exit when braid initialised it. Thread-safe.
void mpi_ensure_initialized();
//! This process's rank in MPI_COMM_WORLD (initialises MPI).
int mpi_world_rank();
//! The size of MPI_COMM_WORLD (initialises MPI).
int mpi_world_size();

//! One rank of an MPI group. Not thread-safe (one caller at a time).
class MpiCommunicator final : public Communicator {
public:
    //! Builds the group's MPI communicator; needs desc.group_client. Throws CommError or
    //! LibraryError when that fails, TimeoutError when peers do not show up in time.
    explicit MpiCommunicator(const CommunicatorDesc& desc);
    ~MpiCommunicator() override;

    const char* backend() const override { return "mpi"; }
    //! The group's MPI communicator (for tests and benchmarks).
    MPI_Comm mpi_comm() const { return m_comm; }
    //! Whether collectives use the shared-memory handshake + blocking MPI calls.
    bool uses_blocking_collectives() const { return m_node_sync != nullptr; }

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
    //! Polls `request` until it completes or the deadline passes; `why` says in the timeout
    //! message what a pending request means.
    void wait(MPI_Request& request, const Deadline& deadline, const char* call, const char* why);
    /*!
     * Runs one collective: after the shared-memory handshake, `blocking()` (named
     * `blocking_name`), or after the arrival exchange `nonblocking(&request)` polled to the
     * deadline. Both return MPI codes.
     */
    template <typename Blocking, typename Nonblocking>
    void run(const char* call, const Deadline& deadline, const char* blocking_name,
             Blocking&& blocking, const char* nonblocking_name, Nonblocking&& nonblocking);
    //! MPI's int count, or ValueError when `count` does not fit.
    int mpi_count(size_t count, const char* call) const;

    MPI_Comm m_comm = MPI_COMM_NULL;
    std::unique_ptr<MpiNodeSync> m_node_sync;          //!< null: nonblocking calls
    std::unique_ptr<MpiArrivalExchange> m_arrivals;    //!< set when m_node_sync is null
    uint64_t m_sequence = 0;                           //!< collectives issued so far
    std::vector<float> m_scratch_send, m_scratch_recv; //!< float32 copies of half buffers
};

//! The "mpi" backend's factory (registered as "mpi").
std::shared_ptr<Communicator> make_mpi_communicator(const CommunicatorDesc& desc);

} // namespace braid::comm
