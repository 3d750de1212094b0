// GroupClient: how a rank talks to the group manager, and its in-process implementation.
//
// Every call blocks until it completes or its deadline passes (the timeout argument, or
// default_timeout(): BRAID_COMM_TIMEOUT seconds, 300 s unset); a passed deadline throws
// braid::TimeoutError naming the call, the key and what was missing. Two implementations:
// InProcessGroupClient calls a GroupManager directly (ranks are threads of one process);
// TcpGroupClient (comm/tcp_client.h) talks to a RendezvousServer. Both are thread-safe and
// may be shared by all the comp nodes of a process.
#pragma once

#include "comm/deadline.h"
#include "comm/group_manager.h"

#include <memory>
#include <string>
#include <string_view>

namespace braid::comm {

//! The calls peers make to find each other and agree on small facts. Thread-safe.
class GroupClient {
public:
    virtual ~GroupClient() = default;

    /*!
     * Registers the caller as one of `nr_devices` peers of `key` and blocks until all are
     * registered. `rank` is the caller's rank or UNASSIGNED_RANK (then ranks follow the order
     * of `comp_node_id`). Returns the group hash (equal on every peer), the caller's rank and
     * the root's rank. Throws CommError when peers disagree (nr_devices, two roots, a rank
     * claimed twice), ValueError for a bad argument, TimeoutError past the deadline.
     */
    virtual RegisterInfo opr_register(const std::string& key, uint32_t nr_devices, bool is_root,
                                      int32_t rank, uint64_t comp_node_id,
                                      Timeout timeout = std::nullopt) = 0;
    //! Publishes the output shape of `key` (the root's, for BROADCAST and SCATTER).
    virtual void set_output_shape(const std::string& key, const TensorShape& shape,
                                  Timeout timeout = std::nullopt) = 0;
    //! Blocks until the output shape of `key` was set and returns it.
    virtual TensorShape get_output_shape(const std::string& key,
                                         Timeout timeout = std::nullopt) = 0;
    //! One of `size` peers; blocks until all arrived and returns rank `root`'s bytes.
    virtual std::string bcast_bytes(const std::string& key, uint32_t size, uint32_t rank,
                                    uint32_t root, std::string_view bytes,
                                    Timeout timeout = std::nullopt) = 0;
    //! One of `size` peers; blocks until all arrived.
    virtual void group_barrier(const std::string& key, uint32_t size, uint32_t rank,
                               Timeout timeout = std::nullopt) = 0;

    //! Stores `value` under `key` in the user key-value space.
    virtual void set(const std::string& key, std::string_view value,
                     Timeout timeout = std::nullopt) = 0;
    //! Blocks until `key` was set and returns its value.
    virtual std::string get(const std::string& key, Timeout timeout = std::nullopt) = 0;
    //! Atomically adds `delta` to the counter `key` (0 when unset); returns the new value.
    virtual int64_t add(const std::string& key, int64_t delta, Timeout timeout = std::nullopt) = 0;

    //! Where the manager lives, for messages: "in-process" or "tcp://127.0.0.1:5000".
    virtual std::string address() const = 0;
};

//! A GroupClient calling a GroupManager in the same process. Thread-safe.
class InProcessGroupClient final : public GroupClient {
public:
    //! A client of `manager`, or of a fresh manager of its own when null.
    explicit InProcessGroupClient(std::shared_ptr<GroupManager> manager = nullptr);

    RegisterInfo opr_register(const std::string& key, uint32_t nr_devices, bool is_root,
                              int32_t rank, uint64_t comp_node_id,
                              Timeout timeout = std::nullopt) override;
    void set_output_shape(const std::string& key, const TensorShape& shape,
                          Timeout timeout = std::nullopt) override;
    TensorShape get_output_shape(const std::string& key, Timeout timeout = std::nullopt) override;
    std::string bcast_bytes(const std::string& key, uint32_t size, uint32_t rank, uint32_t root,
                            std::string_view bytes, Timeout timeout = std::nullopt) override;
    void group_barrier(const std::string& key, uint32_t size, uint32_t rank,
                       Timeout timeout = std::nullopt) override;
    void set(const std::string& key, std::string_view value,
             Timeout timeout = std::nullopt) override;
    std::string get(const std::string& key, Timeout timeout = std::nullopt) override;
    int64_t add(const std::string& key, int64_t delta, Timeout timeout = std::nullopt) override;
    std::string address() const override { return "in-process"; }

    //! The manager this client calls.
    const std::shared_ptr<GroupManager>& manager() const { return m_manager; }

private:
    std::shared_ptr<GroupManager> m_manager;
};

//! "opr_register(key \"k\") timed out after 5 s: " + what: the TimeoutError text every
//! client and the server use.
std::string timeout_message(std::string_view call, const std::string& key, Duration span,
                            const std::string& what);

} // namespace braid::comm
