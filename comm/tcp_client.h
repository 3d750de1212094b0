// TcpGroupClient: a GroupClient talking to a RendezvousServer over TCP.
//
// Calls may come from many threads at once (the comp nodes of one process all register
// concurrently and block), so the client keeps a small pool of connections: a call takes
// an idle connection or opens a new one, and gives it back when the reply arrived. Every
// socket operation has a deadline: the call's timeout (sent to the server, which answers
// with a TimeoutError naming what was missing), plus a short grace for that answer to
// arrive. Thread-safe.
#pragma once

#include "comm/group_client.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace braid::comm {

//! How a TcpGroupClient connects.
struct TcpClientOptions {
    //! Shared secret sent with every request; defaults to the environment variable
    //! BRAID_TOKEN (empty when unset).
    std::string token = token_from_env();
    //! How long to keep retrying a refused connection (the server may still be starting);
    //! never longer than the call's own deadline. Once this client reached the server, a
    //! refused connection is not retried: the server stopped.
    Duration connect_retry = std::chrono::seconds(30);
    //! Extra time to wait for the server's own timeout reply past the call's deadline.
    Duration reply_grace = std::chrono::seconds(2);

    //! BRAID_TOKEN, or empty.
    static std::string token_from_env();
};

//! A GroupClient for a RendezvousServer at host:port. Thread-safe.
class TcpGroupClient final : public GroupClient {
public:
    TcpGroupClient(std::string host, uint16_t port, TcpClientOptions options = {});
    ~TcpGroupClient() override;

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
    std::string address() const override;

    //! Connections open in the pool (idle ones), for tests.
    size_t nr_idle_connections() const;

    class Connection;

private:
    struct Reply;
    //! Sends a request built by `build` (given the frame's FrameMeta) and returns
    //! the verified reply; throws the error the server replied with.
    template <typename Build>
    Reply call(std::string_view call_name, const std::string& key, Timeout timeout, Build&& build);
    /*!
     * Writes `request` (of `request_id`) on `connection` and reads its verified reply; throws the
     * error the server replied with (handing the connection back when the server keeps it open).
     * Returns std::nullopt when `may_retry` and the connection turned out closed before
     * any reply.
     */
    std::optional<Reply> exchange(std::string_view call_name, const std::string& key,
                                  const Deadline& deadline, std::unique_ptr<Connection>& connection,
                                  const std::vector<uint8_t>& request, uint64_t request_id,
                                  bool may_retry);
    std::unique_ptr<Connection> connect(std::string_view call_name, const std::string& key,
                                        const Deadline& deadline);
    //! Returns a healthy connection to the idle pool.
    void give_back(std::unique_ptr<Connection> connection);

    std::string m_host;
    uint16_t m_port;
    TcpClientOptions m_options;
    mutable std::mutex m_mutex;
    std::vector<std::unique_ptr<Connection>> m_idle;
    uint64_t m_next_request = 1;
    //! Set once a connection succeeded: from then on a refused connection means the server
    //! stopped, and fails at once instead of being retried.
    std::atomic<bool> m_reached{false};
};

} // namespace braid::comm
