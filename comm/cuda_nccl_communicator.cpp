#include "comm/cuda_nccl_communicator.h"

#include "base/cuda_check.h"
#include "base/error.h"
#include "base/log.h"
#include "graph/cuda_comp_node.h"
#include "memory/cuda_allocator.h"

#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

//! Checks the result of an NCCL call on a nonblocking communicator: ncclInProgress means the
//! call was accepted and its work is being queued (NcclCommunicator::wait_ready waits for it);
//! anything else but ncclSuccess throws LibraryError, as BRAID_NCCL_CHECK does.
#define BRAID_NCCL_CHECK_QUEUED(call)                                                              \
    do {                                                                                           \
        ncclResult_t braid_nccl_rc_ = (call);                                                      \
        if (braid_nccl_rc_ != ncclSuccess && braid_nccl_rc_ != ncclInProgress) [[unlikely]]        \
            ::braid::detail::throw_nccl_error(int(braid_nccl_rc_), #call, __FILE__, __LINE__);     \
    } while (0)

namespace braid::comm {

namespace {

ncclDataType_t nccl_dtype(DType dt) {
    switch (dt.enumv()) {
    case DTypeEnum::FLOAT32:
        return ncclFloat32;
    case DTypeEnum::FLOAT16:
        return ncclFloat16;
    case DTypeEnum::BFLOAT16:
        return ncclBfloat16;
    case DTypeEnum::INT32:
        return ncclInt32;
    case DTypeEnum::INT64:
        return ncclInt64;
    case DTypeEnum::INT8:
        return ncclInt8;
    case DTypeEnum::UINT8:
        return ncclUint8;
    default:
        BRAID_THROW(DTypeError, "dtype {} has no NCCL counterpart", dt.name());
    }
}

ncclRedOp_t nccl_op(ReduceOp op) {
    switch (op) {
    case ReduceOp::SUM:
        return ncclSum;
    case ReduceOp::MAX:
        return ncclMax;
    case ReduceOp::MIN:
        return ncclMin;
    }
    return ncclSum;
}

//! Between two polls: spin politely first (queueing usually takes microseconds), then sleep
//! so that a long wait does not take a core from the ranks it waits for.
void pause(uint64_t polls) {
    if (polls < 1024)
        std::this_thread::yield();
    else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
}

const char* memory_type_name(cudaMemoryType type) {
    switch (type) {
    case cudaMemoryTypeUnregistered:
        return "pageable host memory";
    case cudaMemoryTypeHost:
        return "pinned host memory";
    case cudaMemoryTypeDevice:
        return "device memory";
    case cudaMemoryTypeManaged:
        return "managed memory";
    }
    return "memory of an unknown kind";
}

} // namespace

std::string nccl_unique_id_key(uint64_t hash) {
    return fmt::format("braid.nccl.{:016x}", hash);
}

NcclCommunicator::NcclCommunicator(const CommunicatorDesc& desc) : Communicator(desc) {
    if (!desc.comp_node.valid() || desc.comp_node.device().kind != Device::Kind::CUDA)
        BRAID_THROW(ValueError,
                    "nccl communicator (key \"{}\", rank {}): needs a CUDA comp node to run on "
                    "(its device and stream), got {}",
                    desc.key, desc.rank,
                    desc.comp_node.valid() ? "comp node " + desc.comp_node.locator() : "none");
    if (!desc.group_client)
        BRAID_THROW(ValueError,
                    "nccl communicator (key \"{}\", rank {}): a group client is needed to share "
                    "the NCCL unique id",
                    desc.key, desc.rank);
    m_cuda = &cuda_context(desc.comp_node);
    init();
}

void NcclCommunicator::init() {
    const auto& d = m_desc;
    CudaDeviceGuard guard(device());
    ncclUniqueId id;
    std::string mine;
    if (d.rank == d.root_rank) {
        BRAID_NCCL_CHECK(ncclGetUniqueId(&id));
        mine.assign(id.internal, sizeof(id.internal));
    }
    std::string got = d.group_client->bcast_bytes(nccl_unique_id_key(d.hash), d.nranks, d.rank,
                                                  d.root_rank, mine, d.timeout);
    if (got.size() != sizeof(id.internal))
        BRAID_THROW(CommError,
                    "{}: the root (rank {}) shared {} bytes as its NCCL unique id, expected {}",
                    describe("init"), d.root_rank, got.size(), sizeof(id.internal));
    std::memcpy(id.internal, got.data(), sizeof(id.internal));

    // Nonblocking, so that joining the peers has a deadline: ncclCommInitRankConfig returns at
    // once and the communicator reports ncclInProgress until every rank has joined.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    Deadline deadline = Deadline::after(timeout());
    ncclComm_t comm = nullptr;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, int(d.nranks), id, int(d.rank), &config);
    m_comm = comm;
    try {
        if (rc != ncclSuccess && rc != ncclInProgress)
            braid::detail::throw_nccl_error(int(rc),
                                            "ncclCommInitRankConfig(&comm, nranks, id, rank, "
                                            "&config)",
                                            __FILE__, __LINE__);
        wait_ready("init", deadline,
                   "not every rank joined the NCCL communicator (a peer never reached "
                   "ncclCommInitRank)");
    } catch (...) {
        abort();
        throw;
    }
    logger()->debug("nccl: communicator for key \"{}\" ready on {}, rank {} of {}", d.key,
                    d.comp_node.locator(), d.rank, d.nranks);
}

NcclCommunicator::~NcclCommunicator() {
    if (!m_comm) return;
    if (!broken()) {
        // Finalize flushes the queued work; it may never finish when a peer is gone, so it
        // gets the call deadline and the communicator is aborted past it.
        try {
            CudaDeviceGuard guard(device());
            Deadline deadline = Deadline::after(timeout());
            ncclResult_t state = ncclCommFinalize(m_comm);
            for (uint64_t polls = 0; state == ncclInProgress && !deadline.passed(); ++polls) {
                pause(polls);
                if (ncclCommGetAsyncError(m_comm, &state) != ncclSuccess) state = ncclSystemError;
            }
            if (state == ncclSuccess) {
                ncclResult_t rc = ncclCommDestroy(m_comm);
                if (rc != ncclSuccess && rc != ncclInProgress)
                    logger()->warn("{}: ncclCommDestroy failed: {}", describe("destroy"),
                                   ncclGetErrorString(rc));
                m_comm = nullptr;
                return;
            }
            logger()->warn("{}: ncclCommFinalize did not finish ({}); aborting",
                           describe("destroy"), ncclGetErrorString(state));
        } catch (const std::exception& e) {
            // At process exit the CUDA runtime may already be unloading.
            logger()->warn("{}: {}; aborting", describe("destroy"), e.what());
        }
    }
    abort();
}

int NcclCommunicator::device() const {
    return m_cuda->device();
}

void NcclCommunicator::abort() noexcept {
    if (!m_comm) return;
    ncclComm_t comm = m_comm;
    m_comm = nullptr;
    try {
        CudaDeviceGuard guard(device());
        ncclResult_t rc = ncclCommAbort(comm);
        if (rc != ncclSuccess)
            logger()->warn("{}: ncclCommAbort failed: {}", describe("abort"),
                           ncclGetErrorString(rc));
    } catch (const std::exception& e) {
        logger()->warn("{}: {}", describe("abort"), e.what());
    }
}

void NcclCommunicator::wait_ready(const char* call, const Deadline& deadline,
                                  const char* waiting_for) {
    for (uint64_t polls = 0;; ++polls) {
        ncclResult_t state = ncclSuccess;
        BRAID_NCCL_CHECK(ncclCommGetAsyncError(m_comm, &state));
        if (state == ncclSuccess) return;
        if (state != ncclInProgress)
            BRAID_THROW(LibraryError, "{}: NCCL failed: {} (ncclResult_t {}): {}", describe(call),
                        ncclGetErrorString(state), int(state), ncclGetLastError(m_comm));
        if (deadline.passed())
            throw TimeoutError(fmt::format("{} timed out after {}: {}; the NCCL communicator is "
                                           "aborted and unusable from now on",
                                           describe(call), format_duration(deadline.span()),
                                           waiting_for));
        pause(polls);
    }
}

template <typename Calls>
void NcclCommunicator::enqueue(const char* call, bool grouped, Calls&& calls) {
    BRAID_ASSERT(m_comm != nullptr, "{}: the NCCL communicator is gone", describe(call));
    Deadline deadline = Deadline::after(timeout());
    CudaDeviceGuard guard(device());
    try {
        if (grouped) {
            BRAID_NCCL_CHECK(ncclGroupStart());
            try {
                calls();
            } catch (...) {
                (void)ncclGroupEnd(); // keeps this thread's NCCL group depth balanced
                throw;
            }
            BRAID_NCCL_CHECK_QUEUED(ncclGroupEnd());
        } else {
            calls();
        }
        wait_ready(call, deadline,
                   "NCCL has not queued the work yet (a peer did not enter the matching call)");
    } catch (...) {
        // Part of the work may be queued and the peers are out of step: the NCCL
        // communicator cannot be trusted any more (the base class breaks this one).
        abort();
        throw;
    }
}

void NcclCommunicator::check_device_ptr(const char* call, const char* what, const void* ptr) const {
    cudaPointerAttributes attr{};
    BRAID_CUDA_CHECK(cudaPointerGetAttributes(&attr, ptr));
    if (attr.type == cudaMemoryTypeManaged ||
        (attr.type == cudaMemoryTypeDevice && attr.device == device()))
        return;
    std::string kind = memory_type_name(attr.type);
    if (attr.type == cudaMemoryTypeDevice) kind += fmt::format(" of CUDA device {}", attr.device);
    BRAID_THROW(ValueError,
                "{}: the {} buffer {} is {}; the nccl backend needs memory of CUDA device {} "
                "(comp node {})",
                describe(call), what, ptr, kind, device(), m_desc.comp_node.locator());
}

void NcclCommunicator::copy_on_stream(void* dst, const void* src, size_t bytes) const {
    if (dst == src || bytes == 0) return;
    BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, m_cuda->stream()));
}

void NcclCommunicator::do_all_reduce(const void* send, void* recv, size_t count, DType dt,
                                     ReduceOp op) {
    if (count == 0) return;
    check_device_ptr("all_reduce", "send", send);
    check_device_ptr("all_reduce", "recv", recv);
    ncclDataType_t type = nccl_dtype(dt);
    enqueue("all_reduce", false, [&] {
        BRAID_NCCL_CHECK_QUEUED(
            ncclAllReduce(send, recv, count, type, nccl_op(op), m_comm, m_cuda->stream()));
    });
}

void NcclCommunicator::do_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                                 uint32_t root) {
    if (count == 0) return;
    check_device_ptr("reduce", "send", send);
    if (m_desc.rank == root) check_device_ptr("reduce", "root's recv", recv);
    ncclDataType_t type = nccl_dtype(dt);
    // recv is only used at the root (NCCL ignores it elsewhere, null included).
    enqueue("reduce", false, [&] {
        BRAID_NCCL_CHECK_QUEUED(
            ncclReduce(send, recv, count, type, nccl_op(op), int(root), m_comm, m_cuda->stream()));
    });
}

void NcclCommunicator::do_broadcast(const void* send, void* recv, size_t count, DType dt,
                                    uint32_t root) {
    if (count == 0) return;
    bool at_root = m_desc.rank == root;
    if (at_root) check_device_ptr("broadcast", "root's send", send);
    check_device_ptr("broadcast", "recv", recv);
    ncclDataType_t type = nccl_dtype(dt);
    // send is only read at the root; elsewhere it may be null, so NCCL gets recv instead.
    const void* source = at_root ? send : recv;
    enqueue("broadcast", false, [&] {
        BRAID_NCCL_CHECK_QUEUED(
            ncclBroadcast(source, recv, count, type, int(root), m_comm, m_cuda->stream()));
    });
}

void NcclCommunicator::do_all_gather(const void* send, void* recv, size_t send_count, DType dt) {
    if (send_count == 0) return;
    check_device_ptr("all_gather", "send", send);
    check_device_ptr("all_gather", "recv", recv);
    ncclDataType_t type = nccl_dtype(dt);
    enqueue("all_gather", false, [&] {
        BRAID_NCCL_CHECK_QUEUED(
            ncclAllGather(send, recv, send_count, type, m_comm, m_cuda->stream()));
    });
}

void NcclCommunicator::do_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                                         ReduceOp op) {
    if (recv_count == 0) return;
    check_device_ptr("reduce_scatter", "send", send);
    check_device_ptr("reduce_scatter", "recv", recv);
    ncclDataType_t type = nccl_dtype(dt);
    enqueue("reduce_scatter", false, [&] {
        BRAID_NCCL_CHECK_QUEUED(
            ncclReduceScatter(send, recv, recv_count, type, nccl_op(op), m_comm, m_cuda->stream()));
    });
}

void NcclCommunicator::do_gather(const void* send, void* recv, size_t send_count, DType dt,
                                 uint32_t root) {
    if (send_count == 0) return;
    bool at_root = m_desc.rank == root;
    check_device_ptr("gather", "send", send);
    if (at_root) check_device_ptr("gather", "root's recv", recv);
    ncclDataType_t type = nccl_dtype(dt);
    size_t bytes = send_count * dt.size();
    enqueue("gather", true, [&] {
        if (!at_root) {
            BRAID_NCCL_CHECK_QUEUED(
                ncclSend(send, send_count, type, int(root), m_comm, m_cuda->stream()));
            return;
        }
        auto* out = static_cast<uint8_t*>(recv);
        for (uint32_t r = 0; r < m_desc.nranks; ++r) {
            if (r == root)
                copy_on_stream(out + r * bytes, send, bytes); // nothing when in place
            else
                BRAID_NCCL_CHECK_QUEUED(
                    ncclRecv(out + r * bytes, send_count, type, int(r), m_comm, m_cuda->stream()));
        }
    });
}

void NcclCommunicator::do_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                                  uint32_t root) {
    if (recv_count == 0) return;
    bool at_root = m_desc.rank == root;
    if (at_root) check_device_ptr("scatter", "root's send", send);
    check_device_ptr("scatter", "recv", recv);
    ncclDataType_t type = nccl_dtype(dt);
    size_t bytes = recv_count * dt.size();
    enqueue("scatter", true, [&] {
        if (!at_root) {
            BRAID_NCCL_CHECK_QUEUED(
                ncclRecv(recv, recv_count, type, int(root), m_comm, m_cuda->stream()));
            return;
        }
        auto* in = static_cast<const uint8_t*>(send);
        for (uint32_t r = 0; r < m_desc.nranks; ++r) {
            if (r == root)
                copy_on_stream(recv, in + r * bytes, bytes); // nothing when in place
            else
                BRAID_NCCL_CHECK_QUEUED(
                    ncclSend(in + r * bytes, recv_count, type, int(r), m_comm, m_cuda->stream()));
        }
    });
}

void NcclCommunicator::do_all_to_all(const void* send, void* recv, size_t count, DType dt) {
    if (count == 0) return;
    check_device_ptr("all_to_all", "send", send);
    check_device_ptr("all_to_all", "recv", recv);
    ncclDataType_t type = nccl_dtype(dt);
    size_t bytes = count * dt.size();
    auto* in = static_cast<const uint8_t*>(send);
    auto* out = static_cast<uint8_t*>(recv);
    enqueue("all_to_all", true, [&] {
        for (uint32_t r = 0; r < m_desc.nranks; ++r) {
            if (r == m_desc.rank) {
                copy_on_stream(out + r * bytes, in + r * bytes, bytes);
                continue;
            }
            BRAID_NCCL_CHECK_QUEUED(
                ncclSend(in + r * bytes, count, type, int(r), m_comm, m_cuda->stream()));
            BRAID_NCCL_CHECK_QUEUED(
                ncclRecv(out + r * bytes, count, type, int(r), m_comm, m_cuda->stream()));
        }
    });
}

void NcclCommunicator::do_send(const void* buf, size_t count, DType dt, uint32_t peer) {
    if (count == 0) return;
    check_device_ptr("send", "send", buf);
    ncclDataType_t type = nccl_dtype(dt);
    enqueue("send", false, [&] {
        BRAID_NCCL_CHECK_QUEUED(ncclSend(buf, count, type, int(peer), m_comm, m_cuda->stream()));
    });
}

void NcclCommunicator::do_recv(void* buf, size_t count, DType dt, uint32_t peer) {
    if (count == 0) return;
    check_device_ptr("recv", "recv", buf);
    ncclDataType_t type = nccl_dtype(dt);
    enqueue("recv", false, [&] {
        BRAID_NCCL_CHECK_QUEUED(ncclRecv(buf, count, type, int(peer), m_comm, m_cuda->stream()));
    });
}

void NcclCommunicator::do_synchronize() {
    BRAID_ASSERT(m_comm != nullptr, "{}: the NCCL communicator is gone", describe("synchronize"));
    Deadline deadline = Deadline::after(timeout());
    CudaDeviceGuard guard(device());
    try {
        for (uint64_t polls = 0;; ++polls) {
            cudaError_t err = cudaStreamQuery(m_cuda->stream());
            if (err == cudaSuccess) return;
            if (err != cudaErrorNotReady) BRAID_CUDA_CHECK(err);
            // An NCCL kernel waiting for a peer that failed never finishes: look at the
            // communicator's own state too.
            ncclResult_t state = ncclSuccess;
            BRAID_NCCL_CHECK(ncclCommGetAsyncError(m_comm, &state));
            if (state != ncclSuccess && state != ncclInProgress)
                BRAID_THROW(LibraryError, "{}: NCCL failed: {} (ncclResult_t {}): {}",
                            describe("synchronize"), ncclGetErrorString(state), int(state),
                            ncclGetLastError(m_comm));
            if (deadline.passed())
                throw TimeoutError(fmt::format(
                    "{} timed out after {}: the work queued on comp node {}'s stream has not "
                    "finished (a peer did not enter the matching call); the NCCL communicator "
                    "is aborted and unusable from now on",
                    describe("synchronize"), format_duration(deadline.span()),
                    m_desc.comp_node.locator()));
            pause(polls);
        }
    } catch (...) {
        abort(); // frees NCCL kernels stuck on the stream
        throw;
    }
}

std::shared_ptr<Communicator> make_nccl_communicator(const CommunicatorDesc& desc) {
    return std::make_shared<NcclCommunicator>(desc);
}

} // namespace braid::comm
