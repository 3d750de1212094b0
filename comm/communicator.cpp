#include "comm/communicator.h"

#include "base/determinism.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/gloo_communicator.h"
#include "comm/local_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/reduce_kernels.h"

#if BRAID_WITH_NCCL
#include "comm/cuda_nccl_communicator.h" // declares the backend without CUDA headers
#endif

#include <algorithm>
#include <cstring>
#include <limits>

namespace braid::comm {

const char* reduce_op_name(ReduceOp op) {
    switch (op) {
    case ReduceOp::SUM:
        return "sum";
    case ReduceOp::MAX:
        return "max";
    case ReduceOp::MIN:
        return "min";
    }
    return "?";
}

bool is_comm_dtype(DType dt) {
    if (!dt.valid()) return false;
    switch (dt.enumv()) {
    case DTypeEnum::FLOAT32:
    case DTypeEnum::FLOAT16:
    case DTypeEnum::BFLOAT16:
    case DTypeEnum::INT32:
    case DTypeEnum::INT64:
    case DTypeEnum::INT8:
    case DTypeEnum::UINT8:
        return true;
    default:
        return false;
    }
}

Communicator::Communicator(const CommunicatorDesc& desc)
    : m_desc(desc), m_timeout(resolve_timeout(desc.timeout)) {
    BRAID_ASSERT(desc.nranks >= 1 && desc.rank < desc.nranks, "rank {} of {}", desc.rank,
                 desc.nranks);
}

Communicator::~Communicator() = default;

std::string Communicator::describe(const char* call) const {
    return fmt::format("{} {} (key \"{}\", rank {} of {})", backend(), call, m_desc.key,
                       m_desc.rank, m_desc.nranks);
}

void Communicator::mark_broken(const std::string& reason) {
    if (m_broken_reason.empty()) m_broken_reason = reason;
}

void Communicator::check_usable(const char* call) const {
    if (!m_broken_reason.empty())
        BRAID_THROW(CommError, "{}: the communicator is unusable after an earlier failure: {}",
                    describe(call), m_broken_reason);
}

void Communicator::check_args(const char* call, DType dt, size_t count, size_t multiple) const {
    check_usable(call);
    if (!is_comm_dtype(dt))
        BRAID_THROW(DTypeError,
                    "{}: dtype {} is not supported; expected float32, float16, bfloat16, int32, "
                    "int64, int8 or uint8",
                    describe(call), dt.valid() ? dt.name() : "(invalid)");
    size_t limit = std::numeric_limits<size_t>::max() / dt.size() / std::max<size_t>(multiple, 1);
    if (count > limit)
        BRAID_THROW(ValueError, "{}: count {} overflows the address space", describe(call), count);
}

void Communicator::check_root(const char* call, uint32_t root) const {
    if (root >= m_desc.nranks)
        BRAID_THROW(ValueError, "{}: root {} is out of range; expected 0..{}", describe(call), root,
                    m_desc.nranks - 1);
}

void Communicator::check_ptr(const char* call, const char* what, const void* ptr,
                             size_t count) const {
    if (count && !ptr)
        BRAID_THROW(ValueError, "{}: {} buffer is null but count is {}", describe(call), what,
                    count);
}

template <typename Body> void Communicator::guarded(const char* call, Body&& body) {
    try {
        body();
    } catch (const CommError& e) {
        // A timeout or a peer's failure leaves the group out of step; refuse further calls
        // rather than mixing up rounds.
        mark_broken(e.what());
        throw;
    } catch (const LibraryError& e) {
        mark_broken(e.what());
        throw;
    }
}

void Communicator::all_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op) {
    check_args("all_reduce", dt, count, 1);
    check_ptr("all_reduce", "send", send, count);
    check_ptr("all_reduce", "recv", recv, count);
    guarded("all_reduce", [&] {
        if (rank_ordered(op, dt))
            rank_ordered_all_reduce(send, recv, count, dt);
        else
            do_all_reduce(send, recv, count, dt, op);
    });
}

bool Communicator::rank_ordered(ReduceOp op, DType dt) const {
    bool floating = dt == dtype::Float32() || dt.is_half();
    return op == ReduceOp::SUM && floating && m_desc.nranks > 1 && deterministic_kernels() &&
           !sums_in_rank_order() && buffer_kind() == Device::Kind::CPU;
}

void Communicator::rank_ordered_slice(const void* send, size_t count, DType dt, size_t slice,
                                      void* out) {
    size_t n = m_desc.nranks, es = dt.size();
    std::vector<uint8_t> blocks(n * slice * es, 0), gathered(n * slice * es);
    if (count) std::memcpy(blocks.data(), send, count * es);
    // Block q of `gathered`: rank q's slice `rank`.
    do_all_to_all(blocks.data(), gathered.data(), slice, dt);
    std::vector<const void*> ins(n);
    for (size_t q = 0; q < n; ++q) ins[q] = gathered.data() + q * slice * es;
    reduce_to_many(dt, ReduceOp::SUM, ins.data(), n, &out, 1, 0, slice);
}

void Communicator::rank_ordered_all_reduce(const void* send, void* recv, size_t count, DType dt) {
    size_t n = m_desc.nranks, es = dt.size(), slice = (count + n - 1) / n;
    std::vector<uint8_t> mine(slice * es), all(n * slice * es);
    rank_ordered_slice(send, count, dt, slice, mine.data());
    do_all_gather(mine.data(), all.data(), slice, dt);
    if (count) std::memcpy(recv, all.data(), count * es);
}

void Communicator::reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                          uint32_t root) {
    check_args("reduce", dt, count, 1);
    check_root("reduce", root);
    check_ptr("reduce", "send", send, count);
    if (m_desc.rank == root) check_ptr("reduce", "root's recv", recv, count);
    guarded("reduce", [&] {
        if (!rank_ordered(op, dt)) return do_reduce(send, recv, count, dt, op, root);
        std::vector<uint8_t> all(count * dt.size());
        rank_ordered_all_reduce(send, all.data(), count, dt);
        if (m_desc.rank == root && count) std::memcpy(recv, all.data(), all.size());
    });
}

void Communicator::broadcast(const void* send, void* recv, size_t count, DType dt, uint32_t root) {
    check_args("broadcast", dt, count, 1);
    check_root("broadcast", root);
    if (m_desc.rank == root) check_ptr("broadcast", "root's send", send, count);
    check_ptr("broadcast", "recv", recv, count);
    guarded("broadcast", [&] { do_broadcast(send, recv, count, dt, root); });
}

void Communicator::all_gather(const void* send, void* recv, size_t send_count, DType dt) {
    check_args("all_gather", dt, send_count, m_desc.nranks);
    check_ptr("all_gather", "send", send, send_count);
    check_ptr("all_gather", "recv", recv, send_count);
    guarded("all_gather", [&] { do_all_gather(send, recv, send_count, dt); });
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                                  ReduceOp op) {
    check_args("reduce_scatter", dt, recv_count, m_desc.nranks);
    check_ptr("reduce_scatter", "send", send, recv_count);
    check_ptr("reduce_scatter", "recv", recv, recv_count);
    guarded("reduce_scatter", [&] {
        if (!rank_ordered(op, dt)) return do_reduce_scatter(send, recv, recv_count, dt, op);
        std::vector<uint8_t> mine(recv_count * dt.size());
        rank_ordered_slice(send, m_desc.nranks * recv_count, dt, recv_count, mine.data());
        if (recv_count) std::memcpy(recv, mine.data(), mine.size());
    });
}

void Communicator::gather(const void* send, void* recv, size_t send_count, DType dt,
                          uint32_t root) {
    check_args("gather", dt, send_count, m_desc.nranks);
    check_root("gather", root);
    check_ptr("gather", "send", send, send_count);
    if (m_desc.rank == root) check_ptr("gather", "root's recv", recv, send_count);
    guarded("gather", [&] { do_gather(send, recv, send_count, dt, root); });
}

void Communicator::scatter(const void* send, void* recv, size_t recv_count, DType dt,
                           uint32_t root) {
    check_args("scatter", dt, recv_count, m_desc.nranks);
    check_root("scatter", root);
    if (m_desc.rank == root) check_ptr("scatter", "root's send", send, recv_count);
    check_ptr("scatter", "recv", recv, recv_count);
    guarded("scatter", [&] { do_scatter(send, recv, recv_count, dt, root); });
}

void Communicator::all_to_all(const void* send, void* recv, size_t count, DType dt) {
    check_args("all_to_all", dt, count, m_desc.nranks);
    check_ptr("all_to_all", "send", send, count);
    check_ptr("all_to_all", "recv", recv, count);
    guarded("all_to_all", [&] { do_all_to_all(send, recv, count, dt); });
}

void Communicator::send(const void* buf, size_t count, DType dt, uint32_t peer) {
    check_args("send", dt, count, 1);
    if (peer >= m_desc.nranks || peer == m_desc.rank)
        BRAID_THROW(ValueError, "{}: peer {} is invalid; expected another rank of 0..{}",
                    describe("send"), peer, m_desc.nranks - 1);
    check_ptr("send", "send", buf, count);
    guarded("send", [&] { do_send(buf, count, dt, peer); });
}

void Communicator::recv(void* buf, size_t count, DType dt, uint32_t peer) {
    check_args("recv", dt, count, 1);
    if (peer >= m_desc.nranks || peer == m_desc.rank)
        BRAID_THROW(ValueError, "{}: peer {} is invalid; expected another rank of 0..{}",
                    describe("recv"), peer, m_desc.nranks - 1);
    check_ptr("recv", "recv", buf, count);
    guarded("recv", [&] { do_recv(buf, count, dt, peer); });
}

void Communicator::synchronize() {
    check_usable("synchronize");
    guarded("synchronize", [&] { do_synchronize(); });
}

CommunicatorRegistry::CommunicatorRegistry() {
    // The built-in backends, listed explicitly (no static registration objects).
    m_factories["local"] = make_local_communicator;
    m_factories["mpi"] = make_mpi_communicator;
    m_factories["gloo"] = make_gloo_communicator; // refuses in builds without gloo
#if BRAID_WITH_NCCL
    m_factories["nccl"] = make_nccl_communicator;
#endif
}

CommunicatorRegistry& CommunicatorRegistry::instance() {
    static CommunicatorRegistry registry;
    return registry;
}

void CommunicatorRegistry::add(const std::string& name, CommunicatorFactory factory) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_factories[name] = std::move(factory);
}

std::shared_ptr<Communicator> CommunicatorRegistry::make(const std::string& name,
                                                         const CommunicatorDesc& desc) {
    CommunicatorFactory factory;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        auto it = m_factories.find(name);
        if (it == m_factories.end()) {
            std::string known;
            for (auto& [n, f] : m_factories) known += (known.empty() ? "" : ", ") + n;
            BRAID_THROW(ValueError,
                        "communicator backend \"{}\" (key \"{}\") is unknown; "
                        "registered backends: {}",
                        name, desc.key, known);
        }
        factory = it->second;
    }
    return factory(desc);
}

std::vector<std::string> CommunicatorRegistry::names() const {
    std::lock_guard<std::mutex> lock(m_mutex);
    std::vector<std::string> names;
    for (auto& [n, f] : m_factories) names.push_back(n);
    return names;
}

CommunicatorCache& CommunicatorCache::instance() {
    static CommunicatorCache cache;
    return cache;
}

std::shared_ptr<Communicator> CommunicatorCache::get(const std::string& backend,
                                                     const CommunicatorDesc& desc) {
    std::shared_ptr<Entry> entry;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        auto& slot = m_entries[{backend, desc.hash, desc.rank}];
        if (!slot) slot = std::make_shared<Entry>();
        entry = slot;
    }
    std::lock_guard<std::mutex> lock(entry->mutex);
    if (!entry->communicator) {
        entry->communicator = CommunicatorRegistry::instance().make(backend, desc);
        logger()->debug("comm: created {} communicator for key \"{}\" (hash {:016x}), rank {} "
                        "of {}",
                        backend, desc.key, desc.hash, desc.rank, desc.nranks);
    }
    return entry->communicator;
}

size_t CommunicatorCache::size() const {
    std::lock_guard<std::mutex> lock(m_mutex);
    size_t n = 0;
    for (auto& [k, e] : m_entries) {
        std::lock_guard<std::mutex> entry_lock(e->mutex);
        n += e->communicator != nullptr;
    }
    return n;
}

void CommunicatorCache::clear() {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_entries.clear();
}

GroupMembership join_group(const std::shared_ptr<GroupClient>& client, const std::string& backend,
                           const std::string& key, uint32_t nr_devices, bool is_root, int32_t rank,
                           uint64_t comp_node_id, CompNode comp_node, Timeout timeout) {
    BRAID_ASSERT(client != nullptr, "join_group(key \"{}\") without a group client", key);
    RegisterInfo info = client->opr_register(key, nr_devices, is_root, rank, comp_node_id, timeout);
    CommunicatorDesc desc;
    desc.key = key;
    desc.hash = info.hash;
    desc.nranks = nr_devices;
    desc.rank = info.rank;
    desc.root_rank = info.root_rank;
    desc.comp_node = comp_node;
    desc.group_client = client;
    desc.timeout = timeout;
    return {info, CommunicatorCache::instance().get(backend, desc)};
}

} // namespace braid::comm
