#include "comm/mpi_communicator.h"

#include "base/error.h"
#include "base/log.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace braid::comm {

namespace detail {

void mpi_call_failed(int code, const char* expr, const char* file, int line) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
        std::snprintf(text, sizeof(text), "unknown MPI error");
    BRAID_THROW(LibraryError, "MPI call {} failed at {}:{}: {} (error code {})", expr, file, line,
                text, code);
}

} // namespace detail

namespace {

//! Set when braid called MPI_Init_thread, so it also calls MPI_Finalize.
bool g_initialized_by_braid = false;

void finalize_at_exit() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

MPI_Datatype mpi_datatype(DType dt) {
    switch (dt.enumv()) {
    case DTypeEnum::FLOAT32:
        return MPI_FLOAT;
    case DTypeEnum::FLOAT16:
    case DTypeEnum::BFLOAT16:
        return MPI_UINT16_T; // moved as bits; reductions go through float32 copies
    case DTypeEnum::INT32:
        return MPI_INT32_T;
    case DTypeEnum::INT64:
        return MPI_INT64_T;
    case DTypeEnum::INT8:
        return MPI_INT8_T;
    case DTypeEnum::UINT8:
        return MPI_UINT8_T;
    default:
        BRAID_THROW(DTypeError, "dtype {} has no MPI counterpart", dt.name());
    }
}

MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
    case ReduceOp::SUM:
        return MPI_SUM;
    case ReduceOp::MAX:
        return MPI_MAX;
    case ReduceOp::MIN:
        return MPI_MIN;
    }
    return MPI_SUM;
}

//! float32 copies of half buffers, so reductions of float16/bfloat16 run in float32.
void widen(DType dt, const void* src, std::vector<float>& dst, size_t count) {
    dst.resize(count);
    convert_elements(dt, src, dtype::Float32(), dst.data(), count);
}

void narrow(DType dt, const std::vector<float>& src, void* dst, size_t count) {
    convert_elements(dtype::Float32(), src.data(), dt, dst, count);
}

} // namespace

void mpi_ensure_initialized() {
    static std::once_flag once;
    std::call_once(once, [] {
        int initialized = 0;
        BRAID_MPI_CHECK(MPI_Initialized(&initialized));
        int provided = 0;
        if (!initialized) {
            BRAID_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
            g_initialized_by_braid = true;
            std::atexit(finalize_at_exit);
        } else {
            BRAID_MPI_CHECK(MPI_Query_thread(&provided));
        }
        if (provided < MPI_THREAD_MULTIPLE)
            logger()->warn("MPI provides thread level {} below MPI_THREAD_MULTIPLE; make MPI "
                           "calls from one thread at a time",
                           provided);
        // Errors come back as codes that BRAID_MPI_CHECK turns into exceptions.
        BRAID_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    });
}

int mpi_world_rank() {
    mpi_ensure_initialized();
    int rank = 0;
    BRAID_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    return rank;
}

int mpi_world_size() {
    mpi_ensure_initialized();
    int size = 0;
    BRAID_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    return size;
}

MpiCommunicator::MpiCommunicator(const CommunicatorDesc& desc) : Communicator(desc) {
    if (!desc.group_client)
        BRAID_THROW(ValueError,
                    "mpi communicator (key \"{}\"): a group client is needed to build the "
                    "group's MPI communicator",
                    desc.key);
    mpi_ensure_initialized();
    int world_rank = mpi_world_rank();
    // Every member learns every member's world rank: one bcast per rank, rooted there.
    std::vector<int> world_ranks(desc.nranks);
    for (uint32_t r = 0; r < desc.nranks; ++r) {
        std::string key = fmt::format("braid.mpi.{:016x}.{}", desc.hash, r);
        std::string mine(reinterpret_cast<const char*>(&world_rank), sizeof(int));
        std::string got = desc.group_client->bcast_bytes(
            key, desc.nranks, desc.rank, r, r == desc.rank ? mine : std::string(), desc.timeout);
        if (got.size() != sizeof(int))
            BRAID_THROW(CommError,
                        "mpi communicator (key \"{}\"): rank {} published {} bytes as its "
                        "world rank, expected {}",
                        desc.key, r, got.size(), sizeof(int));
        std::memcpy(&world_ranks[r], got.data(), sizeof(int));
    }
    MPI_Group world_group, group;
    BRAID_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    BRAID_MPI_CHECK(MPI_Group_incl(world_group, int(desc.nranks), world_ranks.data(), &group));
    // Any tag works as long as all members agree; it keeps concurrent creations apart.
    int tag = int(desc.hash & 0x3fff);
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &m_comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    BRAID_MPI_CHECK(rc);
    BRAID_MPI_CHECK(MPI_Comm_set_errhandler(m_comm, MPI_ERRORS_RETURN));
    int comm_rank = -1;
    BRAID_MPI_CHECK(MPI_Comm_rank(m_comm, &comm_rank));
    BRAID_ASSERT(comm_rank == int(desc.rank), "MPI rank {} for group rank {}", comm_rank,
                 desc.rank);
    // Every member must choose the same path, whatever its own environment says.
    const char* env = std::getenv("BRAID_MPI_NONBLOCKING");
    int want_handshake = env && *env && std::strcmp(env, "0") != 0 ? 0 : 1, all_want = 0;
    BRAID_MPI_CHECK(MPI_Allreduce(&want_handshake, &all_want, 1, MPI_INT, MPI_MIN, m_comm));
    if (all_want) m_node_sync = MpiNodeSync::create(m_comm, desc.hash, desc.nranks, desc.rank);
    // MpiNodeSync::create() answers alike on every member, so all of them build this or none.
    if (!m_node_sync)
        m_arrivals = std::make_unique<MpiArrivalExchange>(m_comm, desc.nranks, desc.rank);
}

MpiCommunicator::~MpiCommunicator() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // After MPI_Finalize (at exit) communicators are gone with MPI itself.
    if (!finalized && m_comm != MPI_COMM_NULL && !broken()) MPI_Comm_free(&m_comm);
    if (m_arrivals && broken()) m_arrivals->abandon();
}

int MpiCommunicator::mpi_count(size_t count, const char* call) const {
    if (count > size_t(INT_MAX))
        BRAID_THROW(ValueError, "{}: count {} exceeds MPI's limit of {} elements per call",
                    describe(call), count, INT_MAX);
    return int(count);
}

void MpiCommunicator::wait(MPI_Request& request, const Deadline& deadline, const char* call,
                           const char* why) {
    for (uint64_t polls = 0;; ++polls) {
        int done = 0;
        BRAID_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if ((polls & 63) == 63) {
            if (deadline.passed())
                throw TimeoutError(fmt::format("{} timed out after {}: the MPI request is still "
                                               "pending ({}); the communicator is unusable from "
                                               "now on",
                                               describe(call), format_duration(deadline.span()),
                                               why));
            // Give the core away now and then: ranks may outnumber cores.
            if (polls > 4096) std::this_thread::yield();
        }
    }
}

template <typename Blocking, typename Nonblocking>
void MpiCommunicator::run(const char* call, const Deadline& deadline, const char* blocking_name,
                          Blocking&& blocking, const char* nonblocking_name,
                          Nonblocking&& nonblocking) {
    if (m_node_sync) {
        m_node_sync->enter(++m_sequence, deadline, [&] { return describe(call); });
        int rc = blocking();
        if (rc != MPI_SUCCESS) detail::mpi_call_failed(rc, blocking_name, __FILE__, __LINE__);
        return;
    }
    // Every peer must be known to have entered before the call: a rank that never comes is
    // then named, and no collective request is left pending.
    m_arrivals->enter(++m_sequence, deadline, [&] { return describe(call); });
    MPI_Request request;
    int rc = nonblocking(&request);
    if (rc != MPI_SUCCESS) detail::mpi_call_failed(rc, nonblocking_name, __FILE__, __LINE__);
    wait(request, deadline, call,
         "every rank had entered the call; a peer gave up or failed before it completed");
}

void MpiCommunicator::do_all_reduce(const void* send, void* recv, size_t count, DType dt,
                                    ReduceOp op) {
    Deadline deadline = Deadline::after(timeout());
    int n = mpi_count(count, "all_reduce");
    MPI_Datatype type = mpi_datatype(dt);
    const void* in = send == recv ? MPI_IN_PLACE : send;
    void* out = recv;
    if (dt.is_half()) {
        widen(dt, send, m_scratch_send, count);
        in = MPI_IN_PLACE;
        out = m_scratch_send.data();
        type = MPI_FLOAT;
    }
    run(
        "all_reduce", deadline, "MPI_Allreduce",
        [&] { return MPI_Allreduce(in, out, n, type, mpi_op(op), m_comm); }, "MPI_Iallreduce",
        [&](MPI_Request* r) { return MPI_Iallreduce(in, out, n, type, mpi_op(op), m_comm, r); });
    if (dt.is_half()) narrow(dt, m_scratch_send, recv, count);
}

void MpiCommunicator::do_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                                uint32_t root) {
    Deadline deadline = Deadline::after(timeout());
    int n = mpi_count(count, "reduce");
    bool at_root = m_desc.rank == root;
    MPI_Datatype type = mpi_datatype(dt);
    const void* in = at_root && send == recv ? MPI_IN_PLACE : send;
    void* out = at_root ? recv : nullptr;
    if (dt.is_half()) {
        widen(dt, send, m_scratch_send, count);
        m_scratch_recv.resize(at_root ? count : 0);
        in = m_scratch_send.data();
        out = at_root ? m_scratch_recv.data() : nullptr;
        type = MPI_FLOAT;
    }
    run(
        "reduce", deadline, "MPI_Reduce",
        [&] { return MPI_Reduce(in, out, n, type, mpi_op(op), int(root), m_comm); }, "MPI_Ireduce",
        [&](MPI_Request* r) {
            return MPI_Ireduce(in, out, n, type, mpi_op(op), int(root), m_comm, r);
        });
    if (dt.is_half() && at_root) narrow(dt, m_scratch_recv, recv, count);
}

void MpiCommunicator::do_broadcast(const void* send, void* recv, size_t count, DType dt,
                                   uint32_t root) {
    Deadline deadline = Deadline::after(timeout());
    int n = mpi_count(count, "broadcast");
    if (m_desc.rank == root && send != recv && count) std::memcpy(recv, send, count * dt.size());
    MPI_Datatype type = mpi_datatype(dt);
    run(
        "broadcast", deadline, "MPI_Bcast",
        [&] { return MPI_Bcast(recv, n, type, int(root), m_comm); }, "MPI_Ibcast",
        [&](MPI_Request* r) { return MPI_Ibcast(recv, n, type, int(root), m_comm, r); });
}

void MpiCommunicator::do_all_gather(const void* send, void* recv, size_t send_count, DType dt) {
    Deadline deadline = Deadline::after(timeout());
    int n = mpi_count(send_count, "all_gather");
    auto* own = static_cast<uint8_t*>(recv) + m_desc.rank * send_count * dt.size();
    const void* in = send == own ? MPI_IN_PLACE : send;
    MPI_Datatype type = mpi_datatype(dt);
    run(
        "all_gather", deadline, "MPI_Allgather",
        [&] { return MPI_Allgather(in, n, type, recv, n, type, m_comm); }, "MPI_Iallgather",
        [&](MPI_Request* r) { return MPI_Iallgather(in, n, type, recv, n, type, m_comm, r); });
}

void MpiCommunicator::do_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                                        ReduceOp op) {
    Deadline deadline = Deadline::after(timeout());
    int n = mpi_count(recv_count, "reduce_scatter");
    size_t bytes = recv_count * dt.size();
    MPI_Datatype type = mpi_datatype(dt);
    const void* in = send;
    void* out = recv;
    // In place NCCL-style (recv is this rank's block of send): MPI forbids the overlap, so
    // reduce into scratch and copy.
    auto* own = static_cast<const uint8_t*>(send) + m_desc.rank * bytes;
    bool overlap = recv_count && recv == own;
    std::vector<uint8_t> scratch(overlap && !dt.is_half() ? bytes : 0);
    if (overlap) out = scratch.data();
    if (dt.is_half()) {
        widen(dt, send, m_scratch_send, recv_count * m_desc.nranks);
        m_scratch_recv.resize(recv_count);
        in = m_scratch_send.data();
        out = m_scratch_recv.data();
        type = MPI_FLOAT;
    }
    run(
        "reduce_scatter", deadline, "MPI_Reduce_scatter_block",
        [&] { return MPI_Reduce_scatter_block(in, out, n, type, mpi_op(op), m_comm); },
        "MPI_Ireduce_scatter_block",
        [&](MPI_Request* r) {
            return MPI_Ireduce_scatter_block(in, out, n, type, mpi_op(op), m_comm, r);
        });
    if (dt.is_half())
        narrow(dt, m_scratch_recv, recv, recv_count);
    else if (overlap)
        std::memcpy(recv, scratch.data(), bytes);
}

void MpiCommunicator::do_gather(const void* send, void* recv, size_t send_count, DType dt,
                                uint32_t root) {
    Deadline deadline = Deadline::after(timeout());
    int n = mpi_count(send_count, "gather");
    bool at_root = m_desc.rank == root;
    MPI_Datatype type = mpi_datatype(dt);
    const void* in = send;
    if (at_root && send == static_cast<uint8_t*>(recv) + root * send_count * dt.size())
        in = MPI_IN_PLACE;
    void* out = at_root ? recv : nullptr;
    run(
        "gather", deadline, "MPI_Gather",
        [&] { return MPI_Gather(in, n, type, out, n, type, int(root), m_comm); }, "MPI_Igather",
        [&](MPI_Request* r) {
            return MPI_Igather(in, n, type, out, n, type, int(root), m_comm, r);
        });
}

void MpiCommunicator::do_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                                 uint32_t root) {
    Deadline deadline = Deadline::after(timeout());
    int n = mpi_count(recv_count, "scatter");
    bool at_root = m_desc.rank == root;
    MPI_Datatype type = mpi_datatype(dt);
    void* out = recv;
    if (at_root && recv == static_cast<const uint8_t*>(send) + root * recv_count * dt.size())
        out = MPI_IN_PLACE;
    const void* in = at_root ? send : nullptr;
    run(
        "scatter", deadline, "MPI_Scatter",
        [&] { return MPI_Scatter(in, n, type, out, n, type, int(root), m_comm); }, "MPI_Iscatter",
        [&](MPI_Request* r) {
            return MPI_Iscatter(in, n, type, out, n, type, int(root), m_comm, r);
        });
}

void MpiCommunicator::do_all_to_all(const void* send, void* recv, size_t count, DType dt) {
    Deadline deadline = Deadline::after(timeout());
    int n = mpi_count(count, "all_to_all");
    MPI_Datatype type = mpi_datatype(dt);
    run(
        "all_to_all", deadline, "MPI_Alltoall",
        [&] { return MPI_Alltoall(send, n, type, recv, n, type, m_comm); }, "MPI_Ialltoall",
        [&](MPI_Request* r) { return MPI_Ialltoall(send, n, type, recv, n, type, m_comm, r); });
}

void MpiCommunicator::do_send(const void* buf, size_t count, DType dt, uint32_t peer) {
    Deadline deadline = Deadline::after(timeout());
    int n = mpi_count(count, "send");
    MPI_Request request;
    BRAID_MPI_CHECK(MPI_Isend(buf, n, mpi_datatype(dt), int(peer), /*tag=*/0, m_comm, &request));
    wait(request, deadline, "send", "the peer did not post the matching recv");
}

void MpiCommunicator::do_recv(void* buf, size_t count, DType dt, uint32_t peer) {
    Deadline deadline = Deadline::after(timeout());
    int n = mpi_count(count, "recv");
    MPI_Request request;
    BRAID_MPI_CHECK(MPI_Irecv(buf, n, mpi_datatype(dt), int(peer), /*tag=*/0, m_comm, &request));
    // A message of another size is an MPI truncation error or a short count; check both.
    MPI_Status status;
    for (uint64_t polls = 0;; ++polls) {
        int done = 0;
        BRAID_MPI_CHECK(MPI_Test(&request, &done, &status));
        if (done) break;
        if ((polls & 63) == 63 && deadline.passed())
            throw TimeoutError(fmt::format("{} from rank {} timed out after {}: the peer never "
                                           "sent; the communicator is unusable from now on",
                                           describe("recv"), peer,
                                           format_duration(deadline.span())));
        if (polls > 4096 && (polls & 63) == 63) std::this_thread::yield();
    }
    int received = 0;
    BRAID_MPI_CHECK(MPI_Get_count(&status, mpi_datatype(dt), &received));
    if (received != n)
        BRAID_THROW(CommError, "{}: rank {} sent {} elements, this rank expects {}",
                    describe("recv"), peer, received, n);
}

std::shared_ptr<Communicator> make_mpi_communicator(const CommunicatorDesc& desc) {
    return std::make_shared<MpiCommunicator>(desc);
}

} // namespace braid::comm
