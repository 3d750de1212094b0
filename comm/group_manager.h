// The group manager: the state behind the rendezvous server, also usable in-process.
//
// Peers of a collective find each other here before they communicate. Every call that
// waits for peers is asynchronous: it takes a completion callback and returns a WaitId.
// The callback runs exactly once (outside the manager's lock, possibly inside the call
// itself when it completes at once) unless the wait is withdrawn first. Callers own the
// deadline: when it passes (or a remote client disconnects) they call withdraw(), which
// removes the waiter, so its peers keep waiting for their own deadlines, and returns a
// description of what was still missing for the timeout message.
//
// Rendezvous calls (opr_register, bcast_bytes, group_barrier) complete when every peer of
// the round arrived; then the round is forgotten and the key can be used again (next
// iteration, next graph). A disagreement between peers (nr_devices, root, a rank taken
// twice) fails every waiting peer at once and every peer of that round that arrives later.
//
// A peer whose wait was withdrawn is remembered with its round (why it left: its deadline
// passed or its client disconnected), so the messages of the peers still waiting say "rank 0
// arrived and timed out" instead of counting it as missing; a round left with nobody but
// such departures is kept as well, up to a fixed number of rounds.
//
// Memory per request does not depend on the group size a peer claims: taken and departed
// ranks are kept in ordered sets, missing ranks are listed lazily (the first few, then how
// many more), and a size above max_world_size() is refused before anything is stored.
//
// Thread-safe: one mutex guards all state.
#pragma once

#include "memory/tensor_shape.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace braid::comm {

//! What opr_register returns, identical on every peer except `rank`.
struct RegisterInfo {
    uint64_t hash = 0;      //!< identifies the group (key, generation, members)
    uint32_t rank = 0;      //!< the caller's rank in the group
    uint32_t root_rank = 0; //!< the rank of the root peer (rank 0 when none claimed root)
};

//! A rank the caller leaves for the manager to assign (in order of comp node id).
constexpr int32_t UNASSIGNED_RANK = -1;

//! The largest group (nr_devices, or size of a bcast or barrier) a manager accepts by default.
constexpr uint32_t DEFAULT_MAX_WORLD_SIZE = 65536;

//! Why a wait was withdrawn; later messages of its round say so about the peer.
enum class WithdrawReason : uint8_t { TIMED_OUT, DISCONNECTED };

//! Which braid error a failed call becomes.
enum class ErrorKind : uint8_t { COMM, TIMEOUT, VALUE };

//! The failure side of a call's outcome.
struct CallError {
    ErrorKind kind = ErrorKind::COMM;
    std::string message;
};

//! Throws the braid error (CommError, TimeoutError or ValueError) that `error` names.
[[noreturn]] void throw_call_error(const CallError& error);

//! A call's result or its failure.
template <typename T> using Outcome = std::variant<T, CallError>;

//! The in-memory group manager. Thread-safe.
class GroupManager {
public:
    //! Names one pending wait, for withdraw().
    using WaitId = uint64_t;
    //! A completion callback; must not call back into the manager synchronously with a lock
    //! the manager could need (it runs outside the manager's own lock).
    template <typename T> using Done = std::function<void(Outcome<T>)>;

    //! A manager accepting groups of at most `max_world_size` peers (at least 1).
    explicit GroupManager(uint32_t max_world_size = DEFAULT_MAX_WORLD_SIZE);
    GroupManager(const GroupManager&) = delete;
    GroupManager& operator=(const GroupManager&) = delete;

    /*!
     * Registers one peer of `key`; completes when `nr_devices` peers registered. Ranks left
     * UNASSIGNED_RANK are assigned to the free ranks in order of `comp_node_id` (ties in
     * arrival order). Fails with ValueError for nr_devices == 0 or above max_world_size(), or
     * a rank out of range, and
     * fails every peer of the round with CommError when peers disagree on nr_devices,
     * two claim root, or two claim one rank.
     */
    WaitId opr_register(const std::string& key, uint32_t nr_devices, bool is_root, int32_t rank,
                        uint64_t comp_node_id, Done<RegisterInfo> done);
    /*!
     * Stores the output shape of `key` (replacing an earlier one) and wakes its readers. The
     * record lasts until the next registration round of `key` completes (every non-root read
     * it before registering) or ends with all its peers gone, so a later job under the same
     * key never reads an earlier root's shape.
     */
    void set_output_shape(const std::string& key, const TensorShape& shape);
    //! Completes with the shape of `key` once it was set.
    WaitId get_output_shape(const std::string& key, Done<TensorShape> done);
    //! One of `size` peers; completes when all arrived, with the bytes of rank `root`. Fails
    //! with ValueError for a size of 0 or above max_world_size(), or rank or root >= size.
    WaitId bcast_bytes(const std::string& key, uint32_t size, uint32_t rank, uint32_t root,
                       std::string bytes, Done<std::string> done);
    //! One of `size` peers; completes when all arrived (size and rank checked as for
    //! bcast_bytes).
    WaitId group_barrier(const std::string& key, uint32_t size, uint32_t rank,
                         Done<std::monostate> done);

    //! Stores `value` under `key` (user key-value space) and wakes its readers.
    void kv_set(const std::string& key, std::string value);
    //! Completes with the value of `key` once it was set.
    WaitId kv_get(const std::string& key, Done<std::string> done);
    //! Adds `delta` to the integer stored under `key` (0 when unset) and returns the sum;
    //! the value reads back through kv_get as decimal text. Throws ValueError when the key
    //! holds something that is not an integer.
    int64_t kv_add(const std::string& key, int64_t delta);

    /*!
     * Withdraws a pending wait (its deadline passed or its client went away, as `reason`
     * says); its callback will not run, and the peers still waiting in its round will report
     * it as arrived and gone. Returns what the wait was still missing, e.g. "3 of 4 peers
     * arrived; missing ranks: 2", or std::nullopt when the wait already completed (its
     * callback has run or is about to).
     */
    std::optional<std::string> withdraw(WaitId id,
                                        WithdrawReason reason = WithdrawReason::TIMED_OUT);

    //! Number of waits not yet completed or withdrawn (for tests and monitoring).
    size_t nr_pending() const;
    //! The largest group accepted.
    uint32_t max_world_size() const { return m_max_world_size; }

private:
    struct RegisterPeer {
        WaitId id;
        uint32_t nr_devices;
        bool is_root;
        int32_t rank;
        uint64_t comp_node_id;
        Done<RegisterInfo> done;
    };
    //! Peers of a round that arrived and left before it completed.
    struct Departures {
        std::map<uint32_t, WithdrawReason> ranks; //!< by rank (explicit ranks)
        //! Comp node ids of peers without an explicit rank (the first few).
        std::vector<std::pair<uint64_t, WithdrawReason>> comp_nodes;
        uint64_t nr_comp_nodes = 0; //!< all of them, listed or not
        bool empty() const { return ranks.empty() && nr_comp_nodes == 0; }
        void clear() { *this = Departures(); }
    };
    struct RegisterRound {
        uint32_t nr_devices = 0;
        std::vector<RegisterPeer> peers;
        std::set<uint32_t> rank_taken; //!< explicit ranks of the peers waiting
        Departures departed;
        std::optional<std::string> poison; //!< set once peers disagreed
        uint32_t poison_left = 0;          //!< peers still to be told before forgetting
    };
    struct RoundPeer {
        WaitId id;
        uint32_t rank;
        Done<std::string> done;
    };
    struct Round {
        uint32_t size = 0;
        uint32_t root = 0;
        std::vector<RoundPeer> peers;
        std::set<uint32_t> rank_taken;
        Departures departed;
        std::string payload;
        std::optional<std::string> poison;
        uint32_t poison_left = 0;
    };
    template <typename T> struct ValueWaiter {
        WaitId id;
        Done<T> done;
    };
    enum class WaitKind : uint8_t { REGISTER, BCAST, BARRIER, SHAPE, KV };
    struct WaitRef {
        WaitKind kind;
        std::string key;
    };
    using Fire = std::vector<std::function<void()>>;
    //! Stores `value` under `key` and queues the wake-ups of its waiters; m_mutex held.
    void store_locked(const std::string& key, std::string value, Fire& fire);

    WaitId round_arrive(std::map<std::string, Round>& rounds, WaitKind kind, const char* call,
                        const std::string& key, uint32_t size, uint32_t rank, uint32_t root,
                        std::string bytes, Done<std::string> done, Fire& fire);
    void complete_register(const std::string& key, RegisterRound& round, Fire& fire);
    //! A conflict in the round under `key` of `rounds`: its waiting peers and then the caller
    //! (through `fail_caller`) fail with `conflict`; the round stays poisoned for the peers
    //! still to come until `expected` peers in all were told, then it is erased. m_mutex held.
    template <typename Rounds, typename FailCaller>
    void fail_round(Rounds& rounds, const std::string& key, const std::string& conflict,
                    uint32_t expected, Fire& fire, FailCaller&& fail_caller);
    std::string describe_register(const RegisterRound& round) const;
    static std::string describe_round(const Round& round);
    //! Keeps a round that only departures are left in (for later messages), forgetting the
    //! oldest such rounds beyond a fixed number; m_mutex held.
    void keep_departed(WaitKind kind, const std::string& key);

    uint32_t m_max_world_size;
    uint64_t m_nonce;
    mutable std::mutex m_mutex;
    WaitId m_next_id = 1;
    std::unordered_map<WaitId, WaitRef> m_waits;
    std::map<std::string, RegisterRound> m_register;
    std::map<std::string, uint64_t> m_generation;
    std::map<std::string, Round> m_bcast;
    std::map<std::string, Round> m_barrier;
    std::map<std::string, TensorShape> m_shapes;
    std::map<std::string, std::vector<ValueWaiter<TensorShape>>> m_shape_waiters;
    std::map<std::string, std::string> m_kv;
    std::map<std::string, std::vector<ValueWaiter<std::string>>> m_kv_waiters;
    std::deque<WaitRef> m_departed_rounds; //!< rounds kept for their departures, oldest first
};

} // namespace braid::comm
