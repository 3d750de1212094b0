#include "comm/local_communicator.h"

#include "base/cpu_relax.h"

#include "base/error.h"
#include "base/log.h"
#include "comm/reduce_kernels.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <thread>
#include <unordered_map>

namespace braid::comm {

namespace {

//! "0, 2, 5" of the ranks for which `missing(r)` holds.
template <typename Pred> std::string list_ranks(uint32_t n, Pred&& missing) {
    std::string out;
    for (uint32_t r = 0; r < n; ++r)
        if (missing(r)) out += fmt::format("{}{}", out.empty() ? "" : ", ", r);
    return out.empty() ? "none" : out;
}

} // namespace

//! What one rank published for the current collective.
struct LocalSlot {
    const char* call = nullptr;
    uint64_t sequence = 0;
    const void* send = nullptr;
    void* recv = nullptr;
    size_t count = 0;
    DType dt;
    ReduceOp op = ReduceOp::SUM;
    uint32_t root = 0;
};

//! One direction of point-to-point traffic between two ranks.
struct Mailbox {
    std::mutex mutex;
    std::condition_variable cv;
    const void* data = nullptr;
    size_t bytes = 0;
    uint64_t posted = 0;
    uint64_t taken = 0;
};

//! The state the ranks of one local group share. Thread-safe.
class LocalGroup {
public:
    LocalGroup(uint64_t hash, std::string key, uint32_t nranks)
        : m_hash(hash), m_key(std::move(key)), m_nranks(nranks), m_slots(nranks),
          m_arrived(new std::atomic<uint64_t>[nranks]), m_joined(nranks, 0),
          m_mailboxes(size_t(nranks) * nranks) {
        for (uint32_t r = 0; r < nranks; ++r) m_arrived[r].store(0, std::memory_order_relaxed);
        unsigned cores = std::max(1u, std::thread::hardware_concurrency());
        // Spinning only pays when every rank can own a core. It must outlast a futex
        // wake-up (tens of microseconds on a VM): a shorter spin lets the ranks fall into
        // a cycle where each barrier costs a sleep and a wake-up.
        m_spin = nranks <= cores ? std::chrono::microseconds(200) : Clock::duration::zero();
    }

    uint32_t nranks() const { return m_nranks; }
    const std::string& key() const { return m_key; }
    LocalSlot& slot(uint32_t rank) { return m_slots[rank]; }
    Mailbox& mailbox(uint32_t from, uint32_t to) {
        return m_mailboxes[size_t(from) * m_nranks + to];
    }

    //! Claims `rank`; throws CommError when taken.
    void join(uint32_t rank) {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (m_joined[rank])
            BRAID_THROW(CommError,
                        "local communicator (key \"{}\", hash {:016x}): rank {} joined twice "
                        "in this process",
                        m_key, m_hash, rank);
        m_joined[rank] = 1;
    }
    void leave(uint32_t rank) {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_joined[rank] = 0;
    }

    /*!
     * Waits until all ranks arrived at this barrier. Throws TimeoutError naming the missing
     * ranks when `deadline` passes (and aborts the group), CommError when the group was
     * aborted by a peer.
     */
    void arrive_and_wait(uint32_t rank, const Deadline& deadline, const std::string& call) {
        check_aborted(call);
        uint64_t generation = m_generation.load(std::memory_order_acquire);
        m_arrived[rank].store(generation + 1, std::memory_order_relaxed);
        if (m_count.fetch_add(1, std::memory_order_acq_rel) + 1 == m_nranks) {
            m_count.store(0, std::memory_order_relaxed);
            {
                std::lock_guard<std::mutex> lock(m_mutex);
                m_generation.store(generation + 1, std::memory_order_release);
            }
            m_cv.notify_all();
            return;
        }
        if (m_spin > Clock::duration::zero()) {
            auto spin_until = Clock::now() + m_spin;
            for (uint32_t i = 1;; ++i) {
                if (m_generation.load(std::memory_order_acquire) != generation) return;
                if ((i & 127) == 0 &&
                    (m_aborted.load(std::memory_order_acquire) || Clock::now() >= spin_until))
                    break;
                cpu_relax();
            }
        }
        std::unique_lock<std::mutex> lock(m_mutex);
        while (m_generation.load(std::memory_order_acquire) == generation) {
            if (m_aborted.load(std::memory_order_acquire))
                BRAID_THROW(CommError, "{}: aborted: {}", call, m_abort_reason);
            if (m_cv.wait_until(lock, deadline.at()) == std::cv_status::timeout &&
                m_generation.load(std::memory_order_acquire) == generation) {
                std::string missing = list_ranks(m_nranks, [&](uint32_t r) {
                    return m_arrived[r].load(std::memory_order_relaxed) <= generation;
                });
                std::string never = list_ranks(m_nranks, [&](uint32_t r) { return !m_joined[r]; });
                uint32_t arrived = m_nranks;
                for (uint32_t r = 0; r < m_nranks; ++r)
                    arrived -= m_arrived[r].load(std::memory_order_relaxed) <= generation;
                std::string message = fmt::format(
                    "{} timed out after {}: {} of {} ranks arrived; missing ranks: {} (ranks "
                    "that never created their communicator in this process: {}; the local "
                    "backend needs every rank in one process)",
                    call, format_duration(deadline.span()), arrived, m_nranks, missing, never);
                abort_locked(message);
                lock.unlock();
                notify_all_waiters();
                throw TimeoutError(message);
            }
        }
    }

    //! Fails the group: every waiting and later call throws CommError with `reason`.
    void abort(const std::string& reason) {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            abort_locked(reason);
        }
        notify_all_waiters();
    }

    void check_aborted(const std::string& call) {
        if (!m_aborted.load(std::memory_order_acquire)) return;
        std::lock_guard<std::mutex> lock(m_mutex);
        BRAID_THROW(CommError, "{}: the group was aborted: {}", call, m_abort_reason);
    }

    bool aborted() const { return m_aborted.load(std::memory_order_acquire); }
    std::string abort_reason() {
        std::lock_guard<std::mutex> lock(m_mutex);
        return m_abort_reason;
    }

private:
    void abort_locked(const std::string& reason) {
        if (!m_aborted.load(std::memory_order_relaxed)) m_abort_reason = reason;
        m_aborted.store(true, std::memory_order_release);
    }
    void notify_all_waiters() {
        m_cv.notify_all();
        for (auto& box : m_mailboxes) {
            std::lock_guard<std::mutex> lock(box.mutex);
            box.cv.notify_all();
        }
    }

    const uint64_t m_hash;
    const std::string m_key;
    const uint32_t m_nranks;
    Clock::duration m_spin;
    std::vector<LocalSlot> m_slots;
    alignas(64) std::atomic<uint32_t> m_count{0};
    alignas(64) std::atomic<uint64_t> m_generation{0};
    std::unique_ptr<std::atomic<uint64_t>[]> m_arrived;
    std::atomic<bool> m_aborted{false};
    std::mutex m_mutex; // guards m_joined, m_abort_reason; pairs with m_cv
    std::condition_variable m_cv;
    std::vector<uint8_t> m_joined;
    std::string m_abort_reason;
    std::vector<Mailbox> m_mailboxes;
};

namespace {

//! The process-wide registry of local groups by hash.
struct GroupRegistry {
    std::mutex mutex;
    std::unordered_map<uint64_t, std::weak_ptr<LocalGroup>> groups;

    static GroupRegistry& instance() {
        static GroupRegistry registry;
        return registry;
    }

    std::shared_ptr<LocalGroup> find_or_create(const CommunicatorDesc& desc) {
        std::lock_guard<std::mutex> lock(mutex);
        std::erase_if(groups, [](const auto& item) { return item.second.expired(); });
        auto& weak = groups[desc.hash];
        auto group = weak.lock();
        if (!group) {
            group = std::make_shared<LocalGroup>(desc.hash, desc.key, desc.nranks);
            weak = group;
        } else if (group->nranks() != desc.nranks) {
            BRAID_THROW(CommError,
                        "local communicator (key \"{}\", hash {:016x}): rank {} expects {} "
                        "ranks, the group has {}",
                        desc.key, desc.hash, desc.rank, desc.nranks, group->nranks());
        }
        return group;
    }
};

size_t slice_begin(size_t count, uint32_t part, uint32_t parts) {
    // 128-bit product: count * part must not overflow for huge counts.
    return size_t((unsigned __int128)count * part / parts);
}

} // namespace

struct LocalCommunicator::Call {
    const char* name;
    const void* send;
    void* recv;
    size_t count;
    DType dt;
    ReduceOp op;
    uint32_t root;
};

LocalCommunicator::LocalCommunicator(const CommunicatorDesc& desc)
    : Communicator(desc), m_group(GroupRegistry::instance().find_or_create(desc)) {
    m_group->join(desc.rank);
}

LocalCommunicator::~LocalCommunicator() {
    m_group->leave(m_desc.rank);
}

template <typename Work> void LocalCommunicator::collective(const Call& call, Work&& work) {
    uint32_t n = m_group->nranks(), me = m_desc.rank;
    Deadline deadline = Deadline::after(timeout());
    LocalSlot& mine = m_group->slot(me);
    mine = {call.name, ++m_sequence, call.send, call.recv, call.count, call.dt, call.op, call.root};
    std::string what = describe(call.name);
    m_group->arrive_and_wait(me, deadline, what);
    // Every rank checks every peer, so all of them fail together on a mismatch.
    for (uint32_t r = 0; r < n; ++r) {
        const LocalSlot& peer = m_group->slot(r);
        if (peer.sequence != mine.sequence || std::strcmp(peer.call, mine.call) != 0)
            BRAID_THROW(CommError,
                        "{}: peers are out of step: rank {} is in call #{} ({}), this rank in "
                        "call #{} ({})",
                        what, r, peer.sequence, peer.call, mine.sequence, mine.call);
        if (peer.count != mine.count || !(peer.dt == mine.dt) || peer.op != mine.op ||
            peer.root != mine.root)
            BRAID_THROW(CommError,
                        "{}: peers disagree: rank {} passed count {}, dtype {}, op {}, root {}; "
                        "this rank passed count {}, dtype {}, op {}, root {}",
                        what, r, peer.count, peer.dt.name(), reduce_op_name(peer.op), peer.root,
                        mine.count, mine.dt.name(), reduce_op_name(mine.op), mine.root);
    }
    try {
        work(n, me);
    } catch (const std::exception& e) {
        m_group->abort(fmt::format("rank {} failed in {}: {}", me, call.name, e.what()));
        throw;
    }
    m_group->arrive_and_wait(me, deadline, what);
}

void LocalCommunicator::do_all_reduce(const void* send, void* recv, size_t count, DType dt,
                                      ReduceOp op) {
    collective({"all_reduce", send, recv, count, dt, op, 0}, [&](uint32_t n, uint32_t me) {
        std::vector<const void*> ins(n);
        std::vector<void*> outs(n);
        for (uint32_t r = 0; r < n; ++r) {
            ins[r] = m_group->slot(r).send;
            outs[r] = m_group->slot(r).recv;
        }
        size_t begin = slice_begin(count, me, n), end = slice_begin(count, me + 1, n);
        reduce_to_many(dt, op, ins.data(), n, outs.data(), n, begin, end - begin);
    });
}

void LocalCommunicator::do_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                                  uint32_t root) {
    collective({"reduce", send, recv, count, dt, op, root}, [&](uint32_t n, uint32_t me) {
        std::vector<const void*> ins(n);
        for (uint32_t r = 0; r < n; ++r) ins[r] = m_group->slot(r).send;
        void* out = m_group->slot(root).recv;
        size_t begin = slice_begin(count, me, n), end = slice_begin(count, me + 1, n);
        reduce_to_many(dt, op, ins.data(), n, &out, 1, begin, end - begin);
    });
}

void LocalCommunicator::do_broadcast(const void* send, void* recv, size_t count, DType dt,
                                     uint32_t root) {
    collective({"broadcast", send, recv, count, dt, ReduceOp::SUM, root}, [&](uint32_t, uint32_t) {
        const void* src = m_group->slot(root).send;
        if (src != recv && count) copy_bytes(recv, src, count * dt.size());
    });
}

void LocalCommunicator::do_all_gather(const void* send, void* recv, size_t send_count, DType dt) {
    collective({"all_gather", send, recv, send_count, dt, ReduceOp::SUM, 0},
               [&](uint32_t n, uint32_t) {
                   size_t bytes = send_count * dt.size();
                   for (uint32_t r = 0; r < n; ++r) {
                       auto* dst = static_cast<uint8_t*>(recv) + r * bytes;
                       const void* src = m_group->slot(r).send;
                       if (src != dst && bytes) copy_bytes(dst, src, bytes);
                   }
               });
}

void LocalCommunicator::do_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                                          ReduceOp op) {
    collective({"reduce_scatter", send, recv, recv_count, dt, op, 0}, [&](uint32_t n, uint32_t me) {
        std::vector<const void*> ins(n);
        for (uint32_t r = 0; r < n; ++r)
            ins[r] = static_cast<const uint8_t*>(m_group->slot(r).send) +
                     size_t(me) * recv_count * dt.size();
        reduce_to_many(dt, op, ins.data(), n, &recv, 1, 0, recv_count);
    });
}

void LocalCommunicator::do_gather(const void* send, void* recv, size_t send_count, DType dt,
                                  uint32_t root) {
    collective({"gather", send, recv, send_count, dt, ReduceOp::SUM, root},
               [&](uint32_t, uint32_t me) {
                   size_t bytes = send_count * dt.size();
                   auto* dst = static_cast<uint8_t*>(m_group->slot(root).recv) + me * bytes;
                   if (dst != send && bytes) copy_bytes(dst, send, bytes);
               });
}

void LocalCommunicator::do_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                                   uint32_t root) {
    collective({"scatter", send, recv, recv_count, dt, ReduceOp::SUM, root},
               [&](uint32_t, uint32_t me) {
                   size_t bytes = recv_count * dt.size();
                   auto* src = static_cast<const uint8_t*>(m_group->slot(root).send) + me * bytes;
                   if (src != recv && bytes) copy_bytes(recv, src, bytes);
               });
}

void LocalCommunicator::do_all_to_all(const void* send, void* recv, size_t count, DType dt) {
    collective(
        {"all_to_all", send, recv, count, dt, ReduceOp::SUM, 0}, [&](uint32_t n, uint32_t me) {
            size_t bytes = count * dt.size();
            if (!bytes) return;
            for (uint32_t r = 0; r < n; ++r)
                copy_bytes(static_cast<uint8_t*>(recv) + r * bytes,
                           static_cast<const uint8_t*>(m_group->slot(r).send) + me * bytes, bytes);
        });
}

void LocalCommunicator::do_send(const void* buf, size_t count, DType dt, uint32_t peer) {
    Deadline deadline = Deadline::after(timeout());
    std::string what = describe("send");
    m_group->check_aborted(what);
    Mailbox& box = m_group->mailbox(m_desc.rank, peer);
    std::unique_lock<std::mutex> lock(box.mutex);
    auto wait = [&](auto&& ready, const char* waiting_for) {
        while (!ready()) {
            if (m_group->aborted())
                BRAID_THROW(CommError, "{}: the group was aborted: {}", what,
                            m_group->abort_reason());
            if (box.cv.wait_until(lock, deadline.at()) == std::cv_status::timeout && !ready()) {
                std::string message =
                    fmt::format("{} to rank {} timed out after {}: {}", what, peer,
                                format_duration(deadline.span()), waiting_for);
                lock.unlock();
                m_group->abort(message);
                throw TimeoutError(message);
            }
        }
    };
    wait([&] { return box.posted == box.taken; }, "rank's previous message was never received");
    box.data = buf;
    box.bytes = count * dt.size();
    uint64_t ticket = ++box.posted;
    box.cv.notify_all();
    wait([&] { return box.taken >= ticket; }, "the peer never posted a matching recv");
}

void LocalCommunicator::do_recv(void* buf, size_t count, DType dt, uint32_t peer) {
    Deadline deadline = Deadline::after(timeout());
    std::string what = describe("recv");
    m_group->check_aborted(what);
    Mailbox& box = m_group->mailbox(peer, m_desc.rank);
    std::unique_lock<std::mutex> lock(box.mutex);
    while (box.posted == box.taken) {
        if (m_group->aborted())
            BRAID_THROW(CommError, "{}: the group was aborted: {}", what, m_group->abort_reason());
        if (box.cv.wait_until(lock, deadline.at()) == std::cv_status::timeout &&
            box.posted == box.taken) {
            std::string message =
                fmt::format("{} from rank {} timed out after {}: the peer never sent", what, peer,
                            format_duration(deadline.span()));
            lock.unlock();
            m_group->abort(message);
            throw TimeoutError(message);
        }
    }
    size_t bytes = count * dt.size();
    if (box.bytes != bytes) {
        std::string message = fmt::format("{}: rank {} sent {} bytes, this rank expects {} bytes "
                                          "({} x {})",
                                          what, peer, box.bytes, bytes, count, dt.name());
        lock.unlock();
        m_group->abort(message);
        throw CommError(message);
    }
    if (bytes) std::memcpy(buf, box.data, bytes);
    ++box.taken;
    box.cv.notify_all();
}

std::shared_ptr<Communicator> make_local_communicator(const CommunicatorDesc& desc) {
    return std::make_shared<LocalCommunicator>(desc);
}

} // namespace braid::comm
