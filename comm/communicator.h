// The Communicator interface, its backend registry and the communicator cache.
//
// A Communicator is one rank's handle on a group of `nranks` peers that registered under
// one key with the group manager. Collectives take raw pointers, an element count and a
// DType; they are synchronous and blocking in the calling thread (on CPU: the worker thread
// of the comp node the communicator was created for), and every wait inside them has a
// deadline (timeout(), default_timeout() unless set). A backend that executes on a stream
// (NCCL) orders the call on its comp node's stream instead and returns once it is queued;
// the interface is the same. Its buffers live in device memory (buffer_kind()), and
// synchronize() waits, with the deadline, until the queued calls have finished.
//
// Counts follow NCCL: all_gather and gather take the count each rank sends,
// reduce_scatter and scatter the count each rank receives, all_to_all the count of one
// block (each buffer holds nranks blocks). In place is allowed where NCCL allows it:
// all_reduce with send == recv; reduce and broadcast at the root with send == recv;
// all_gather with send == recv + rank * count; reduce_scatter with
// recv == send + rank * count. Other overlaps are undefined.
//
// Reductions: SUM, MAX, MIN over float32, float16, bfloat16 (reduced in float32, rounded
// once), int32, int64, int8, uint8 (integer sums wrap around).
//
// In deterministic mode (base/determinism.h, set on the calling thread) every floating-point
// SUM of all_reduce, reduce and reduce_scatter adds the ranks in rank order, ((x0 + x1) + x2)
// + ..., in float32 for the half types: the local backend always does; on host-memory backends
// whose own algorithm does not (gloo's ring, MPI's), the call becomes an all_to_all that hands
// each rank its slice of every buffer, the local backend's sum of those slices in rank order,
// and an all_gather. Same traffic as a ring; the result is the same bits on every backend.
//
// After a call failed in a way that can leave peers out of step (a timeout, a peer's
// failure), the communicator is broken: every later call throws CommError naming the
// first failure. A Communicator is used by one thread at a time (its comp node's).
#pragma once

#include "comm/deadline.h"
#include "comm/group_client.h"
#include "graph/comp_node.h"
#include "memory/dtype.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace braid::comm {

//! The element-wise reduction of a reducing collective.
enum class ReduceOp : uint8_t { SUM, MAX, MIN };

//! "sum", "max", "min".
const char* reduce_op_name(ReduceOp op);

//! Whether collectives accept `dt` (float32, float16, bfloat16, int32, int64, int8, uint8).
bool is_comm_dtype(DType dt);

//! What a backend needs to build one rank's communicator.
struct CommunicatorDesc {
    std::string key;        //!< the registration key (for messages)
    uint64_t hash = 0;      //!< the group hash from opr_register
    uint32_t nranks = 1;    //!< group size
    uint32_t rank = 0;      //!< this rank
    uint32_t root_rank = 0; //!< the root the group registered with
    CompNode comp_node;     //!< where calls are made (invalid: the caller's thread)
    std::shared_ptr<GroupClient> group_client; //!< for backends exchanging setup data
    Timeout timeout; //!< deadline span of each call (nullopt: default_timeout())
};

//! One rank's endpoint of a group. Not thread-safe: one caller at a time.
class Communicator {
public:
    explicit Communicator(const CommunicatorDesc& desc);
    virtual ~Communicator();
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    //! Backend name: "local", "mpi", ...
    virtual const char* backend() const = 0;
    //! Where the buffers of every call live: host memory (local, mpi) or the CUDA device of
    //! the communicator's comp node (nccl).
    virtual Device::Kind buffer_kind() const { return Device::Kind::CPU; }
    size_t nranks() const { return m_desc.nranks; }
    size_t rank() const { return m_desc.rank; }
    const std::string& key() const { return m_desc.key; }
    uint64_t hash() const { return m_desc.hash; }
    CompNode comp_node() const { return m_desc.comp_node; }
    //! The deadline span of every call.
    Duration timeout() const { return m_timeout; }
    void set_timeout(Duration timeout) { m_timeout = timeout; }
    //! Whether an earlier failure broke the group (every call then throws CommError).
    bool broken() const { return !m_broken_reason.empty(); }

    //! recv[i] = op over ranks of send[i], on every rank; send == recv is allowed.
    void all_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op);
    //! Like all_reduce, but only `root` receives; recv is ignored (may be null) elsewhere.
    void reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op, uint32_t root);
    //! Copies root's `send` into every rank's `recv`; send is ignored off the root.
    void broadcast(const void* send, void* recv, size_t count, DType dt, uint32_t root);
    //! recv (nranks * send_count elements) = the send buffers in rank order.
    void all_gather(const void* send, void* recv, size_t send_count, DType dt);
    //! recv (recv_count elements) = block `rank` of the element-wise reduction of the send
    //! buffers (nranks * recv_count elements each).
    void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dt, ReduceOp op);
    //! Root's recv (nranks * send_count) = the send buffers in rank order.
    void gather(const void* send, void* recv, size_t send_count, DType dt, uint32_t root);
    //! recv (recv_count elements) = block `rank` of root's send (nranks * recv_count).
    void scatter(const void* send, void* recv, size_t recv_count, DType dt, uint32_t root);
    //! Block j of recv on rank i = block i of send on rank j; blocks hold `count` elements.
    //! send and recv must not overlap.
    void all_to_all(const void* send, void* recv, size_t count, DType dt);
    //! Sends `count` elements to `peer`, which must post a matching recv.
    void send(const void* buf, size_t count, DType dt, uint32_t peer);
    //! Receives `count` elements from `peer`'s matching send.
    void recv(void* buf, size_t count, DType dt, uint32_t peer);
    //! Blocks until every call made so far has finished, so that its results can be read.
    //! Backends whose calls are synchronous return at once; a stream backend waits for its
    //! stream until the deadline, then throws TimeoutError and is broken.
    void synchronize();

protected:
    //! Whether do_all_reduce, do_reduce and do_reduce_scatter already add the ranks in rank
    //! order (the local backend); the others get the ordered path in deterministic mode.
    virtual bool sums_in_rank_order() const { return false; }

    virtual void do_all_reduce(const void* send, void* recv, size_t count, DType dt,
                               ReduceOp op) = 0;
    virtual void do_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                           uint32_t root) = 0;
    virtual void do_broadcast(const void* send, void* recv, size_t count, DType dt,
                              uint32_t root) = 0;
    virtual void do_all_gather(const void* send, void* recv, size_t send_count, DType dt) = 0;
    virtual void do_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                                   ReduceOp op) = 0;
    virtual void do_gather(const void* send, void* recv, size_t send_count, DType dt,
                           uint32_t root) = 0;
    virtual void do_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                            uint32_t root) = 0;
    virtual void do_all_to_all(const void* send, void* recv, size_t count, DType dt) = 0;
    virtual void do_send(const void* buf, size_t count, DType dt, uint32_t peer) = 0;
    virtual void do_recv(void* buf, size_t count, DType dt, uint32_t peer) = 0;
    virtual void do_synchronize() {}

    //! Marks the communicator broken (first reason wins); later calls throw CommError.
    void mark_broken(const std::string& reason);
    //! Whether this call of `op` over `dt` takes the rank-ordered path (see the file comment).
    bool rank_ordered(ReduceOp op, DType dt) const;
    //! Slice `rank` (`slice` elements) of the rank-ordered sum of every rank's `send` (`count`
    //! elements, zeros past them, nranks * slice in all) into `out`.
    void rank_ordered_slice(const void* send, size_t count, DType dt, size_t slice, void* out);
    //! The rank-ordered all_reduce SUM: rank_ordered_slice, then an all_gather.
    void rank_ordered_all_reduce(const void* send, void* recv, size_t count, DType dt);

    //! "local all_reduce (key \"k\", rank 1 of 4)": the prefix of backend error messages.
    std::string describe(const char* call) const;

    const CommunicatorDesc m_desc;

private:
    //! Checks the common preconditions and runs `body`; a TimeoutError or CommError
    //! escaping it breaks the communicator.
    template <typename Body> void guarded(const char* call, Body&& body);
    //! Throws CommError when an earlier failure broke the communicator.
    void check_usable(const char* call) const;
    void check_args(const char* call, DType dt, size_t count, size_t multiple) const;
    void check_root(const char* call, uint32_t root) const;
    void check_ptr(const char* call, const char* what, const void* ptr, size_t count) const;

    Duration m_timeout;
    std::string m_broken_reason;
};

//! Builds one rank's communicator of a backend.
using CommunicatorFactory =
    std::function<std::shared_ptr<Communicator>(const CommunicatorDesc& desc)>;

//! Backends by name. The built-in ones ("local", "mpi", "gloo", and "nccl" in builds with NCCL) are
//! registered when the registry is first used; others call add(). Thread-safe.
class CommunicatorRegistry {
public:
    static CommunicatorRegistry& instance();
    //! Adds or replaces the backend `name`.
    void add(const std::string& name, CommunicatorFactory factory);
    //! A new communicator of backend `name`; throws ValueError for an unknown name.
    std::shared_ptr<Communicator> make(const std::string& name, const CommunicatorDesc& desc);
    //! The registered backend names, sorted.
    std::vector<std::string> names() const;

private:
    CommunicatorRegistry();
    mutable std::mutex m_mutex;
    std::map<std::string, CommunicatorFactory> m_factories;
};

/*!
 * Communicators by (backend, group hash, rank): a group's communicator is created once per
 * rank and then reused. Creating one may block (it can exchange data with peers), so the
 * cache only holds its own lock briefly and creations of different groups run in parallel.
 * Thread-safe.
 */
class CommunicatorCache {
public:
    static CommunicatorCache& instance();
    //! The cached communicator for `desc`, created through the registry on first use.
    std::shared_ptr<Communicator> get(const std::string& backend, const CommunicatorDesc& desc);
    //! Number of communicators held.
    size_t size() const;
    //! Drops every cached communicator (those still referenced elsewhere live on).
    void clear();

private:
    struct Entry {
        std::mutex mutex;
        std::shared_ptr<Communicator> communicator;
    };
    mutable std::mutex m_mutex;
    std::map<std::tuple<std::string, uint64_t, uint32_t>, std::shared_ptr<Entry>> m_entries;
};

//! A rank's place in a group: what registration returned and its communicator.
struct GroupMembership {
    RegisterInfo info;
    std::shared_ptr<Communicator> communicator;
};

/*!
 * Registers with the group manager through `client` (see GroupClient::opr_register) and
 * returns the cached communicator of backend `backend` for the group: what a collective
 * operator does on its first execution. `comp_node_id` orders unassigned ranks (a comp
 * node's id()); `comp_node` is the comp node the communicator serves (may be invalid).
 */
GroupMembership join_group(const std::shared_ptr<GroupClient>& client, const std::string& backend,
                           const std::string& key, uint32_t nr_devices, bool is_root, int32_t rank,
                           uint64_t comp_node_id, CompNode comp_node = {},
                           Timeout timeout = std::nullopt);

} // namespace braid::comm
