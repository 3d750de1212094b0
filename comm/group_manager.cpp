#include "comm/group_manager.h"

#include "base/error.h"
#include "base/hash.h"

#include <algorithm>
#include <charconv>
#include <random>

namespace braid::comm {

void throw_call_error(const CallError& error) {
    switch (error.kind) {
    case ErrorKind::TIMEOUT:
        throw TimeoutError(error.message);
    case ErrorKind::VALUE:
        throw ValueError(error.message);
    case ErrorKind::COMM:
        break;
    }
    throw CommError(error.message);
}

namespace {

//! How many ranks or comp nodes a message lists before it says how many more there are.
constexpr size_t LIST_LIMIT = 16;
//! Rounds kept only for their departures (see keep_departed()).
constexpr size_t MAX_DEPARTED_ROUNDS = 1024;

//! "1, 2, 5" for at most LIST_LIMIT items, then " and N more".
template <typename T> std::string join_limited(const std::vector<T>& items) {
    std::string out;
    for (size_t i = 0; i < items.size() && i < LIST_LIMIT; ++i)
        out += fmt::format("{}{}", i ? ", " : "", items[i]);
    if (items.size() > LIST_LIMIT) out += fmt::format(" and {} more", items.size() - LIST_LIMIT);
    return out;
}

/*!
 * The ranks of 0..size-1 in neither `taken` nor `departed`, as "2, 7, 9" (at most LIST_LIMIT,
 * then " and N more"). Walks the sets instead of the whole range, so the cost follows the
 * ranks that arrived, not the size a peer claimed.
 */
std::string missing_ranks(uint32_t size, const std::set<uint32_t>& taken,
                          const std::map<uint32_t, WithdrawReason>& departed,
                          uint64_t* nr_missing = nullptr) {
    uint64_t total = uint64_t(size) - taken.size() - departed.size();
    if (nr_missing) *nr_missing = total;
    std::string out;
    auto t = taken.begin();
    auto d = departed.begin();
    size_t listed = 0;
    for (uint64_t r = 0; r < size && listed < LIST_LIMIT && listed < total; ++r) {
        while (t != taken.end() && *t < r) ++t;
        while (d != departed.end() && d->first < r) ++d;
        if ((t != taken.end() && *t == r) || (d != departed.end() && d->first == r)) continue;
        out += fmt::format("{}{}", listed ? ", " : "", r);
        ++listed;
    }
    if (total > listed) out += fmt::format(" and {} more", total - listed);
    return out;
}

const char* reason_text(WithdrawReason reason) {
    return reason == WithdrawReason::TIMED_OUT ? "timed out" : "disconnected";
}

/*!
 * "; rank 0 arrived and timed out; ranks 3, 4 arrived and disconnected; comp node 7 arrived
 * and timed out" for the departures of a round, or "" when there were none.
 */
template <typename Departures> std::string describe_departures(const Departures& departed) {
    std::string out;
    for (auto reason : {WithdrawReason::TIMED_OUT, WithdrawReason::DISCONNECTED}) {
        std::vector<uint32_t> ranks;
        size_t nr_ranks = 0;
        for (auto& [rank, why] : departed.ranks)
            if (why == reason && nr_ranks++ < LIST_LIMIT) ranks.push_back(rank);
        if (nr_ranks) {
            std::string list = join_limited(ranks);
            if (nr_ranks > ranks.size())
                list += fmt::format(" and {} more", nr_ranks - ranks.size());
            out += fmt::format("; rank{} {} arrived and {}", nr_ranks > 1 ? "s" : "", list,
                               reason_text(reason));
        }
        std::vector<uint64_t> nodes;
        for (auto& [node, why] : departed.comp_nodes)
            if (why == reason) nodes.push_back(node);
        if (!nodes.empty())
            out += fmt::format("; comp node{} {} arrived and {}", nodes.size() > 1 ? "s" : "",
                               join_limited(nodes), reason_text(reason));
    }
    uint64_t unlisted = departed.nr_comp_nodes - departed.comp_nodes.size();
    if (unlisted) out += fmt::format("; {} more comp node(s) arrived and left", unlisted);
    return out;
}

std::string rank_text(int32_t rank) {
    return rank == UNASSIGNED_RANK ? std::string("unassigned") : std::to_string(rank);
}

CallError comm_error(std::string message) {
    return {ErrorKind::COMM, std::move(message)};
}

CallError value_error(std::string message) {
    return {ErrorKind::VALUE, std::move(message)};
}

} // namespace

GroupManager::GroupManager(uint32_t max_world_size)
    : m_max_world_size(std::max<uint32_t>(max_world_size, 1)) {
    // Mixed into every group hash, so two manager instances (a restarted server) never hand
    // out the hash of a group that a long-lived process still caches.
    std::random_device device;
    m_nonce = (uint64_t(device()) << 32) ^ uint64_t(device());
}

template <typename Rounds, typename FailCaller>
void GroupManager::fail_round(Rounds& rounds, const std::string& key, const std::string& conflict,
                              uint32_t expected, Fire& fire, FailCaller&& fail_caller) {
    // Tell everyone waiting now, the caller, and every peer still to come.
    auto& round = rounds.at(key);
    CallError error = comm_error(conflict);
    for (auto& peer : round.peers) {
        m_waits.erase(peer.id);
        fire.push_back([done = std::move(peer.done), error] { done(error); });
    }
    uint32_t told = uint32_t(round.peers.size()) + 1;
    round.peers.clear();
    fail_caller(error);
    if (told >= expected) {
        rounds.erase(key);
    } else {
        round.poison = conflict;
        round.poison_left = expected - told;
    }
}

GroupManager::WaitId GroupManager::opr_register(const std::string& key, uint32_t nr_devices,
                                                bool is_root, int32_t rank, uint64_t comp_node_id,
                                                Done<RegisterInfo> done) {
    Fire fire;
    WaitId id = 0;
    auto fail_caller = [&](CallError error) {
        fire.push_back([done = std::move(done), error = std::move(error)] { done(error); });
    };
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (nr_devices == 0) {
            fail_caller(value_error(
                fmt::format("opr_register(key \"{}\"): nr_devices must be at least 1", key)));
        } else if (nr_devices > m_max_world_size) {
            fail_caller(value_error(fmt::format(
                "opr_register(key \"{}\"): nr_devices {} exceeds the maximum world size of {} "
                "(braid-rendezvous --max-world-size raises it)",
                key, nr_devices, m_max_world_size)));
        } else if (rank != UNASSIGNED_RANK && (rank < 0 || uint32_t(rank) >= nr_devices)) {
            fail_caller(value_error(fmt::format(
                "opr_register(key \"{}\"): rank {} is out of range for nr_devices {} (expected "
                "0..{} or unassigned)",
                key, rank, nr_devices, nr_devices - 1)));
        } else {
            auto& round = m_register[key];
            if (round.poison) {
                fail_caller(comm_error(*round.poison));
                if (--round.poison_left == 0) m_register.erase(key);
            } else {
                std::optional<std::string> conflict;
                if (round.peers.empty()) {
                    // A round kept for its departures: they are news only to the same group.
                    if (round.nr_devices != nr_devices) round.departed.clear();
                    round.nr_devices = nr_devices;
                    round.rank_taken.clear();
                }
                if (round.nr_devices != nr_devices) {
                    conflict = fmt::format(
                        "opr_register(key \"{}\"): peers disagree on nr_devices: comp node {} "
                        "says {}, while {} peer(s) that arrived earlier (comp node {} first) "
                        "said {}",
                        key, comp_node_id, nr_devices, round.peers.size(),
                        round.peers.front().comp_node_id, round.nr_devices);
                } else if (is_root) {
                    for (auto& peer : round.peers)
                        if (peer.is_root)
                            conflict = fmt::format(
                                "opr_register(key \"{}\"): two peers claim to be root: comp "
                                "node {} (rank {}) and comp node {} (rank {}); expected "
                                "exactly one root, or none (then rank 0 is root)",
                                key, peer.comp_node_id, rank_text(peer.rank), comp_node_id,
                                rank_text(rank));
                }
                if (!conflict && rank != UNASSIGNED_RANK &&
                    round.rank_taken.count(uint32_t(rank))) {
                    uint64_t holder = 0;
                    for (auto& peer : round.peers)
                        if (peer.rank == rank) holder = peer.comp_node_id;
                    conflict = fmt::format(
                        "opr_register(key \"{}\"): rank {} is claimed twice, by comp node {} "
                        "and by comp node {}; expected each rank of 0..{} once",
                        key, rank, holder, comp_node_id, round.nr_devices - 1);
                }
                if (conflict) {
                    fail_round(m_register, key, *conflict, std::max(round.nr_devices, nr_devices),
                               fire, fail_caller);
                } else {
                    id = m_next_id++;
                    if (rank != UNASSIGNED_RANK) {
                        round.rank_taken.insert(uint32_t(rank));
                        round.departed.ranks.erase(uint32_t(rank));
                    } else {
                        auto& nodes = round.departed.comp_nodes;
                        auto size = nodes.size();
                        std::erase_if(nodes, [&](auto& n) { return n.first == comp_node_id; });
                        round.departed.nr_comp_nodes -= size - nodes.size();
                    }
                    round.peers.push_back(
                        {id, nr_devices, is_root, rank, comp_node_id, std::move(done)});
                    m_waits.emplace(id, WaitRef{WaitKind::REGISTER, key});
                    if (round.peers.size() == round.nr_devices) {
                        complete_register(key, round, fire);
                        m_register.erase(key);
                    }
                }
            }
        }
    }
    for (auto& f : fire) f();
    return id;
}

void GroupManager::complete_register(const std::string& key, RegisterRound& round, Fire& fire) {
    uint32_t n = round.nr_devices;
    // Explicit ranks stay; the others take the free ranks in order of comp node id, ties in
    // arrival order (stable sort over the arrival-ordered peer list).
    std::vector<size_t> unassigned;
    std::vector<int64_t> rank_of(round.peers.size(), -1);
    for (size_t i = 0; i < round.peers.size(); ++i) {
        if (round.peers[i].rank != UNASSIGNED_RANK)
            rank_of[i] = round.peers[i].rank;
        else
            unassigned.push_back(i);
    }
    std::stable_sort(unassigned.begin(), unassigned.end(), [&](size_t a, size_t b) {
        return round.peers[a].comp_node_id < round.peers[b].comp_node_id;
    });
    uint32_t next_free = 0;
    auto taken = round.rank_taken.begin();
    for (size_t i : unassigned) {
        // Both walk upwards: the next free rank is the next gap in the ordered set.
        while (taken != round.rank_taken.end() && *taken == next_free) {
            ++taken;
            ++next_free;
        }
        rank_of[i] = next_free++;
    }
    std::vector<uint64_t> member(n, 0);
    uint32_t root_rank = 0;
    for (size_t i = 0; i < round.peers.size(); ++i) {
        member[rank_of[i]] = round.peers[i].comp_node_id;
        if (round.peers[i].is_root) root_rank = uint32_t(rank_of[i]);
    }
    uint64_t generation = m_generation[key]++;
    // Every non-root read the root's output shape before it registered: the record belongs to
    // this round, and a later job under the same key must wait for its own root's shape.
    m_shapes.erase(key);
    Hasher hasher(0x62726169646772ull);
    hasher.add("braid.group").add(key).add_pod(m_nonce).add_pod(generation).add_pod(n);
    for (uint64_t cn : member) hasher.add_pod(cn);
    uint64_t hash = hasher.digest();
    for (size_t i = 0; i < round.peers.size(); ++i) {
        auto& peer = round.peers[i];
        m_waits.erase(peer.id);
        RegisterInfo info{hash, uint32_t(rank_of[i]), root_rank};
        fire.push_back([done = std::move(peer.done), info] { done(info); });
    }
}

std::string GroupManager::describe_register(const RegisterRound& round) const {
    std::vector<uint64_t> arrived_cn;
    bool any_unassigned = false;
    for (auto& peer : round.peers) {
        arrived_cn.push_back(peer.comp_node_id);
        any_unassigned |= peer.rank == UNASSIGNED_RANK;
    }
    uint64_t nr_unclaimed = 0;
    std::string unclaimed =
        missing_ranks(round.nr_devices, round.rank_taken, round.departed.ranks, &nr_unclaimed);
    std::string text = fmt::format("{} of {} peers arrived (comp node ids: {}){}",
                                   round.peers.size(), round.nr_devices, join_limited(arrived_cn),
                                   describe_departures(round.departed));
    if (!any_unassigned && round.departed.nr_comp_nodes == 0) {
        if (nr_unclaimed) text += fmt::format("; missing ranks: {}", unclaimed);
        return text;
    }
    // Departed comp nodes may outnumber the group (the same slot tried by several).
    uint64_t accounted =
        round.peers.size() + round.departed.ranks.size() + round.departed.nr_comp_nodes;
    uint64_t nr_missing = accounted < round.nr_devices ? round.nr_devices - accounted : 0;
    if (nr_missing)
        text += fmt::format("; missing {} peer(s) whose comp nodes never registered (ranks not "
                            "claimed explicitly: {})",
                            nr_missing, unclaimed);
    return text;
}

std::string GroupManager::describe_round(const Round& round) {
    uint64_t nr_missing = 0;
    std::string missing =
        missing_ranks(round.size, round.rank_taken, round.departed.ranks, &nr_missing);
    std::string text = fmt::format("{} of {} ranks arrived{}", round.peers.size(), round.size,
                                   describe_departures(round.departed));
    if (nr_missing) text += fmt::format("; missing ranks: {}", missing);
    return text;
}

void GroupManager::keep_departed(WaitKind kind, const std::string& key) {
    m_departed_rounds.push_back({kind, key});
    while (m_departed_rounds.size() > MAX_DEPARTED_ROUNDS) {
        WaitRef oldest = std::move(m_departed_rounds.front());
        m_departed_rounds.pop_front();
        // Forget it unless peers came back meanwhile.
        if (oldest.kind == WaitKind::REGISTER) {
            auto it = m_register.find(oldest.key);
            if (it != m_register.end() && it->second.peers.empty() && !it->second.poison)
                m_register.erase(it);
        } else {
            auto& rounds = oldest.kind == WaitKind::BCAST ? m_bcast : m_barrier;
            auto it = rounds.find(oldest.key);
            if (it != rounds.end() && it->second.peers.empty() && !it->second.poison)
                rounds.erase(it);
        }
    }
}

GroupManager::WaitId GroupManager::round_arrive(std::map<std::string, Round>& rounds, WaitKind kind,
                                                const char* call, const std::string& key,
                                                uint32_t size, uint32_t rank, uint32_t root,
                                                std::string bytes, Done<std::string> done,
                                                Fire& fire) {
    auto fail_caller = [&](CallError error) {
        fire.push_back([done = std::move(done), error = std::move(error)] { done(error); });
    };
    if (size > m_max_world_size) {
        fail_caller(
            value_error(fmt::format("{}(key \"{}\"): size {} exceeds the maximum world "
                                    "size of {} (braid-rendezvous --max-world-size raises it)",
                                    call, key, size, m_max_world_size)));
        return 0;
    }
    if (size == 0 || rank >= size || root >= size) {
        fail_caller(value_error(
            fmt::format("{}(key \"{}\"): rank {} and root {} must both be below size {}", call, key,
                        rank, root, size)));
        return 0;
    }
    auto& round = rounds[key];
    if (round.poison) {
        fail_caller(comm_error(*round.poison));
        if (--round.poison_left == 0) rounds.erase(key);
        return 0;
    }
    if (round.peers.empty()) {
        // A round kept for its departures: they are news only to the same group.
        if (round.size != size || round.root != root) round.departed.clear();
        round.size = size;
        round.root = root;
        round.rank_taken.clear();
        round.payload.clear();
    }
    std::optional<std::string> conflict;
    if (round.size != size)
        conflict = fmt::format("{}(key \"{}\"): peers disagree on size: rank {} says {}, earlier "
                               "peers said {}",
                               call, key, rank, size, round.size);
    else if (round.root != root)
        conflict = fmt::format("{}(key \"{}\"): peers disagree on the root: rank {} says {}, "
                               "earlier peers said {}",
                               call, key, rank, root, round.root);
    else if (round.rank_taken.count(rank))
        conflict = fmt::format("{}(key \"{}\"): rank {} arrived twice; expected each rank of "
                               "0..{} once",
                               call, key, rank, size - 1);
    if (conflict) {
        fail_round(rounds, key, *conflict, std::max(round.size, size), fire, fail_caller);
        return 0;
    }
    WaitId id = m_next_id++;
    round.rank_taken.insert(rank);
    round.departed.ranks.erase(rank);
    if (rank == root) round.payload = std::move(bytes);
    round.peers.push_back({id, rank, std::move(done)});
    m_waits.emplace(id, WaitRef{kind, key});
    if (round.peers.size() == round.size) {
        auto payload = std::make_shared<const std::string>(std::move(round.payload));
        for (auto& peer : round.peers) {
            m_waits.erase(peer.id);
            fire.push_back([done = std::move(peer.done), payload] { done(*payload); });
        }
        rounds.erase(key);
    }
    return id;
}

void GroupManager::set_output_shape(const std::string& key, const TensorShape& shape) {
    Fire fire;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_shapes[key] = shape;
        auto it = m_shape_waiters.find(key);
        if (it != m_shape_waiters.end()) {
            for (auto& waiter : it->second) {
                m_waits.erase(waiter.id);
                fire.push_back([done = std::move(waiter.done), shape] { done(shape); });
            }
            m_shape_waiters.erase(it);
        }
    }
    for (auto& f : fire) f();
}

GroupManager::WaitId GroupManager::get_output_shape(const std::string& key,
                                                    Done<TensorShape> done) {
    std::unique_lock<std::mutex> lock(m_mutex);
    auto it = m_shapes.find(key);
    if (it != m_shapes.end()) {
        TensorShape shape = it->second;
        lock.unlock();
        done(shape);
        return 0;
    }
    WaitId id = m_next_id++;
    m_shape_waiters[key].push_back({id, std::move(done)});
    m_waits.emplace(id, WaitRef{WaitKind::SHAPE, key});
    return id;
}

GroupManager::WaitId GroupManager::bcast_bytes(const std::string& key, uint32_t size, uint32_t rank,
                                               uint32_t root, std::string bytes,
                                               Done<std::string> done) {
    Fire fire;
    WaitId id;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        id = round_arrive(m_bcast, WaitKind::BCAST, "bcast_bytes", key, size, rank, root,
                          std::move(bytes), std::move(done), fire);
    }
    for (auto& f : fire) f();
    return id;
}

GroupManager::WaitId GroupManager::group_barrier(const std::string& key, uint32_t size,
                                                 uint32_t rank, Done<std::monostate> done) {
    Fire fire;
    WaitId id;
    auto adapt = [done = std::move(done)](Outcome<std::string> outcome) {
        if (auto* error = std::get_if<CallError>(&outcome))
            done(*error);
        else
            done(std::monostate{});
    };
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        id = round_arrive(m_barrier, WaitKind::BARRIER, "group_barrier", key, size, rank, 0, {},
                          std::move(adapt), fire);
    }
    for (auto& f : fire) f();
    return id;
}

void GroupManager::kv_set(const std::string& key, std::string value) {
    Fire fire;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        store_locked(key, std::move(value), fire);
    }
    for (auto& f : fire) f();
}

void GroupManager::store_locked(const std::string& key, std::string value, Fire& fire) {
    auto it = m_kv_waiters.find(key);
    if (it != m_kv_waiters.end()) {
        for (auto& waiter : it->second) {
            m_waits.erase(waiter.id);
            fire.push_back([done = std::move(waiter.done), value] { done(value); });
        }
        m_kv_waiters.erase(it);
    }
    m_kv[key] = std::move(value);
}

GroupManager::WaitId GroupManager::kv_get(const std::string& key, Done<std::string> done) {
    std::unique_lock<std::mutex> lock(m_mutex);
    auto it = m_kv.find(key);
    if (it != m_kv.end()) {
        std::string value = it->second;
        lock.unlock();
        done(std::move(value));
        return 0;
    }
    WaitId id = m_next_id++;
    m_kv_waiters[key].push_back({id, std::move(done)});
    m_waits.emplace(id, WaitRef{WaitKind::KV, key});
    return id;
}

int64_t GroupManager::kv_add(const std::string& key, int64_t delta) {
    int64_t sum;
    Fire fire;
    {
        // Read and write under one lock: concurrent adds must not lose updates.
        std::lock_guard<std::mutex> lock(m_mutex);
        int64_t current = 0;
        auto it = m_kv.find(key);
        if (it != m_kv.end()) {
            const std::string& text = it->second;
            auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
            if (ec != std::errc() || end != text.data() + text.size())
                BRAID_THROW(ValueError,
                            "add(key \"{}\"): the key holds {} bytes that are not a decimal "
                            "integer; expected a counter written by add()",
                            key, text.size());
        }
        // Wrap like two's complement instead of overflowing into undefined behaviour.
        sum = int64_t(uint64_t(current) + uint64_t(delta));
        store_locked(key, std::to_string(sum), fire);
    }
    for (auto& f : fire) f();
    return sum;
}

std::optional<std::string> GroupManager::withdraw(WaitId id, WithdrawReason reason) {
    std::lock_guard<std::mutex> lock(m_mutex);
    auto it = m_waits.find(id);
    if (it == m_waits.end()) return std::nullopt;
    WaitRef ref = std::move(it->second);
    m_waits.erase(it);
    std::string description;
    switch (ref.kind) {
    case WaitKind::REGISTER: {
        auto& round = m_register.at(ref.key);
        description = describe_register(round);
        auto peer = std::find_if(round.peers.begin(), round.peers.end(),
                                 [&](const RegisterPeer& p) { return p.id == id; });
        if (peer->rank != UNASSIGNED_RANK) {
            round.rank_taken.erase(uint32_t(peer->rank));
            round.departed.ranks[uint32_t(peer->rank)] = reason;
        } else {
            if (round.departed.comp_nodes.size() < LIST_LIMIT)
                round.departed.comp_nodes.emplace_back(peer->comp_node_id, reason);
            ++round.departed.nr_comp_nodes;
        }
        round.peers.erase(peer);
        if (round.peers.empty()) {
            keep_departed(ref.kind, ref.key);
            m_shapes.erase(ref.key); // the job failed: its root's shape is no one's
        }
        break;
    }
    case WaitKind::BCAST:
    case WaitKind::BARRIER: {
        auto& rounds = ref.kind == WaitKind::BCAST ? m_bcast : m_barrier;
        auto& round = rounds.at(ref.key);
        description = describe_round(round);
        auto peer = std::find_if(round.peers.begin(), round.peers.end(),
                                 [&](const RoundPeer& p) { return p.id == id; });
        round.rank_taken.erase(peer->rank);
        round.departed.ranks[peer->rank] = reason;
        round.peers.erase(peer);
        if (round.peers.empty()) keep_departed(ref.kind, ref.key);
        break;
    }
    case WaitKind::SHAPE: {
        description = "no peer set the output shape";
        auto& waiters = m_shape_waiters.at(ref.key);
        std::erase_if(waiters, [&](const auto& w) { return w.id == id; });
        if (waiters.empty()) m_shape_waiters.erase(ref.key);
        break;
    }
    case WaitKind::KV: {
        description = "no peer set the key";
        auto& waiters = m_kv_waiters.at(ref.key);
        std::erase_if(waiters, [&](const auto& w) { return w.id == id; });
        if (waiters.empty()) m_kv_waiters.erase(ref.key);
        break;
    }
    }
    return description;
}

size_t GroupManager::nr_pending() const {
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_waits.size();
}

} // namespace braid::comm
