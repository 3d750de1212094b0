#include "comm/rendezvous_server.h"

#include "base/error.h"
#include "base/log.h"
#include "comm/frame.h"
#include "comm/group_client.h"
#include "comm/rendezvous_handler.h"

#include <asio.hpp>

#include <fcntl.h>
#include <sys/resource.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <thread>
#include <unordered_map>

namespace braid::comm {

namespace {

using asio::ip::tcp;
using Strand = asio::strand<asio::io_context::executor_type>;

//! A payload buffer grows by at least this much at a time (and at least doubles).
constexpr size_t MIN_GROWTH = 4u << 10;

} // namespace

class Connection;

struct RendezvousServer::Impl : std::enable_shared_from_this<RendezvousServer::Impl> {
    ServerOptions options;
    std::shared_ptr<GroupManager> manager;
    asio::io_context io{int(std::max<size_t>(options.nr_threads, 1))};
    tcp::acceptor acceptor{io};
    asio::steady_timer accept_retry{io};
    std::vector<std::thread> threads;
    uint16_t port = 0;
    bool started = false;
    bool stopped = false;
    std::mutex mutex; // guards started/stopped, connections
    std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;
    //! Bytes of frame buffers and queued replies of every connection (ServerOptions::
    //! max_buffered_bytes caps it).
    std::atomic<size_t> buffered{0};

    Impl(ServerOptions opts, std::shared_ptr<GroupManager> mgr)
        : options(std::move(opts)), manager(std::move(mgr)) {}
    void accept();
    void forget(Connection* connection) {
        std::lock_guard<std::mutex> lock(mutex);
        connections.erase(connection);
    }
    /*!
     * Reserves `bytes` of the buffer cap; false (nothing reserved) when they do not fit.
     * Frame buffers past the first-frame limit (`large`) may use only seven eighths of the
     * cap, so a few big frames cannot starve the small requests and replies of other peers.
     */
    bool charge(size_t bytes, bool large = false) {
        size_t cap = options.max_buffered_bytes;
        if (large) cap -= cap / 8;
        size_t now = buffered.fetch_add(bytes) + bytes;
        if (now <= cap) return true;
        buffered.fetch_sub(bytes);
        return false;
    }
    void release(size_t bytes) { buffered.fetch_sub(bytes); }
};

//! One client connection; every member is touched only on its strand.
class Connection : public std::enable_shared_from_this<Connection>, public RequestContext {
public:
    Connection(std::shared_ptr<RendezvousServer::Impl> server, tcp::socket socket)
        : m_server(std::move(server)), m_strand(asio::make_strand(m_server->io)),
          m_socket(std::move(socket)), m_read_timer(m_strand), m_write_timer(m_strand) {}

    void start() {
        asio::dispatch(m_strand, [self = shared_from_this()] {
            self->update_read_timer();
            self->read_next();
        });
    }
    //! Closes from outside (server stop): withdraws every wait, closes the socket.
    void shutdown() {
        asio::dispatch(m_strand, [self = shared_from_this()] { self->close(); });
    }

    // RequestContext, called by handle_request() on the strand.
    void reply(std::vector<uint8_t> frame) override { send(std::move(frame)); }
    void wait(const fb::Frame& frame, const char* call, std::string key,
              const Start& start) override;

private:
    struct Pending {
        GroupManager::WaitId wait_id = 0;
        uint64_t request_id = 0;
        std::string call, key;
        Duration span{};
        Duration reported_span{};
        std::unique_ptr<asio::steady_timer> timer;
    };
    enum class ReadTimer : uint8_t { NONE, IDLE, FRAME };

    const ServerOptions& options() const { return m_server->options; }
    bool frame_under_way() const { return m_header_have > 0 || m_payload_length > 0; }

    //! Arms the timer the read side's state calls for: FRAME while a frame is under way
    //! (not restarted while it stays under way), IDLE when nothing at all is under way.
    void update_read_timer() {
        if (m_closed) return;
        ReadTimer want = ReadTimer::NONE;
        if (frame_under_way())
            want = ReadTimer::FRAME;
        else if (m_pending.empty() && m_writes.empty())
            want = ReadTimer::IDLE;
        if (want == m_read_timer_kind) return;
        m_read_timer_kind = want;
        uint64_t generation = ++m_read_timer_generation;
        m_read_timer.cancel();
        if (want == ReadTimer::NONE) return;
        m_read_timer.expires_after(want == ReadTimer::FRAME ? options().frame_read_timeout
                                                            : options().idle_timeout);
        m_read_timer.async_wait([self = shared_from_this(), generation](std::error_code ec) {
            if (ec || generation != self->m_read_timer_generation || self->m_closed) return;
            if (self->m_read_timer_kind == ReadTimer::FRAME)
                logger()->info("rendezvous: closing {}: a frame did not complete within {}",
                               self->m_peer, format_duration(self->options().frame_read_timeout));
            else
                logger()->info("rendezvous: closing {}: idle for {}", self->m_peer,
                               format_duration(self->options().idle_timeout));
            self->close();
        });
    }

    //! Issues the next read: header bytes, or payload bytes into a buffer grown to hold them.
    void read_next() {
        if (m_closed || m_closing || m_reading) return;
        // A client that sends requests without reading the replies is not read from until
        // its replies drained (write_next() resumes).
        if (m_write_bytes > options().max_frame_bytes) return;
        m_reading = true;
        if (m_payload_length != 0 && m_payload_have == m_payload_capacity) {
            // Grow only once bytes are there to fill the room: a connection that announced a
            // frame and went silent holds nothing.
            m_socket.async_wait(
                tcp::socket::wait_read,
                asio::bind_executor(m_strand, [self = shared_from_this()](std::error_code ec) {
                    self->m_reading = false;
                    if (ec || self->m_closed) return self->close();
                    std::error_code ignored;
                    size_t available = self->m_socket.available(ignored);
                    if (self->grow_payload(available)) self->read_next();
                }));
            return;
        }
        asio::mutable_buffer target =
            m_payload_length == 0
                ? asio::buffer(m_header.data() + m_header_have, m_header.size() - m_header_have)
                : asio::buffer(m_payload.get() + m_payload_have,
                               m_payload_capacity - m_payload_have);
        m_socket.async_read_some(
            target, asio::bind_executor(m_strand,
                                        [self = shared_from_this()](std::error_code ec, size_t n) {
                                            self->m_reading = false;
                                            if (ec || self->m_closed) return self->close();
                                            self->on_read(n);
                                        }));
    }

    /*!
     * Grows the payload buffer towards the announced length, within the buffer cap: to hold
     * the `available` bytes already there, and at least doubling (so a big frame is copied
     * a few times, not once per read).
     */
    bool grow_payload(size_t available) {
        size_t wanted = std::max({2 * m_payload_capacity, m_payload_have + available, MIN_GROWTH});
        size_t capacity = std::min<size_t>(m_payload_length, wanted);
        size_t extra = capacity - m_payload_capacity;
        if (!m_server->charge(extra, capacity > options().first_frame_bytes)) {
            size_t held = m_server->buffered.load();
            reject(0, fb::ErrorCode::PROTOCOL,
                   fmt::format("the server is out of buffer space: {} more bytes for a frame of "
                               "{} bytes do not fit beside the {} bytes all connections hold "
                               "(cap {} bytes); retry later",
                               extra, m_payload_length, held, options().max_buffered_bytes));
            return false;
        }
        // Not zero-filled: only the pages the bytes arrive in are ever touched.
        auto bigger = std::make_unique_for_overwrite<uint8_t[]>(capacity);
        if (m_payload_have) std::memcpy(bigger.get(), m_payload.get(), m_payload_have);
        m_payload = std::move(bigger);
        m_payload_capacity = capacity;
        return true;
    }

    void release_payload() {
        m_server->release(m_payload_capacity);
        m_payload.reset();
        m_payload_capacity = m_payload_have = 0;
        m_payload_length = 0;
    }

    void on_read(size_t n) {
        if (m_payload_length == 0) {
            bool started = m_header_have == 0 && n > 0;
            m_header_have += n;
            if (started) update_read_timer();
            if (m_header_have < m_header.size()) return read_next();
            std::string error;
            uint32_t length = parse_frame_header(m_header.data(), error, options().max_frame_bytes);
            if (length == 0) return reject(0, fb::ErrorCode::PROTOCOL, error);
            if (!m_trusted && length > options().first_frame_bytes)
                return reject(0, fb::ErrorCode::PROTOCOL,
                              fmt::format("a first frame of {} bytes exceeds the limit of {} bytes "
                                          "for a connection's first frame (larger frames, up to "
                                          "{} bytes, are accepted once a request proved the "
                                          "token: send a HelloRequest first)",
                                          length, options().first_frame_bytes,
                                          options().max_frame_bytes));
            m_payload_length = length;
            return read_next();
        }
        m_payload_have += n;
        if (m_payload_have < m_payload_length) return read_next();
        on_payload();
        if (m_closed || m_closing) return;
        release_payload();
        m_header_have = 0;
        update_read_timer();
        read_next();
    }

    void on_payload() {
        auto admitted =
            admit_frame(m_payload.get(), m_payload_length, std::string_view(options().token));
        if (auto* rejection = std::get_if<FrameRejection>(&admitted))
            return reject(rejection->request_id, rejection->code, rejection->message);
        const fb::Frame& frame = *std::get<const fb::Frame*>(admitted);
        m_trusted = true;
        if (m_pending.size() >= options().max_pending_per_connection)
            return reject(frame.request_id(), fb::ErrorCode::PROTOCOL,
                          fmt::format("more than {} waiting requests on one connection",
                                      options().max_pending_per_connection));
        handle_request(*m_server->manager, frame, *this);
    }

    Duration wait_span(const fb::Frame& frame) const {
        auto& opt = options();
        Duration span =
            frame.timeout_ms()
                ? Duration(int64_t(std::min<uint64_t>(frame.timeout_ms(), uint64_t(INT64_MAX / 2))))
                : opt.default_wait;
        return std::min(span, opt.max_wait);
    }

    //! A wait's reply arrived (on the strand); it was charged to the buffer cap already.
    void complete(uint64_t local, std::vector<uint8_t> reply) {
        auto it = m_pending.find(local);
        if (m_closed || it == m_pending.end()) {
            m_server->release(reply.size());
            return;
        }
        it->second.timer->cancel();
        m_pending.erase(it);
        enqueue(std::move(reply));
    }

    void on_deadline(uint64_t local) {
        auto it = m_pending.find(local);
        if (it == m_pending.end()) return;
        Pending& pending = it->second;
        auto missing = m_server->manager->withdraw(pending.wait_id, WithdrawReason::TIMED_OUT);
        if (!missing) return; // completed meanwhile; its reply is already posted
        auto reply = make_error_frame(
            pending.request_id, fb::ErrorCode::TIMEOUT,
            timeout_message(pending.call, pending.key, pending.reported_span, *missing));
        m_pending.erase(it);
        send(std::move(reply));
    }

    //! Replies with an error, then closes once the reply is written.
    void reject(uint64_t request_id, fb::ErrorCode code, const std::string& message) {
        logger()->info("rendezvous: rejecting {}: {}", m_peer, message);
        send(make_error_frame(request_id, code, message));
        m_closing = true;
        if (!m_writing) close();
    }

    //! Queues a reply that is not charged to the buffer cap yet; closes the connection when
    //! it does not fit.
    void send(std::vector<uint8_t> frame) {
        if (m_closed) return;
        if (!m_server->charge(frame.size())) {
            logger()->info("rendezvous: closing {}: a reply of {} bytes does not fit the buffer "
                           "cap of {} bytes",
                           m_peer, frame.size(), options().max_buffered_bytes);
            return close();
        }
        enqueue(std::move(frame));
    }

    //! Queues a reply already charged to the buffer cap.
    void enqueue(std::vector<uint8_t> frame) {
        if (m_closed) {
            m_server->release(frame.size());
            return;
        }
        m_write_bytes += frame.size();
        m_writes.push_back(std::move(frame));
        update_read_timer();
        if (!m_writing) write_next();
    }

    void write_next() {
        if (m_closed) return;
        if (m_writes.empty()) {
            m_writing = false;
            if (m_closing) return close();
            update_read_timer();
            read_next(); // resumes reading if a full queue had paused it
            return;
        }
        m_writing = true;
        // A client that stops reading must not hold its replies (and their share of the
        // buffer cap) forever.
        uint64_t generation = ++m_write_generation;
        m_write_timer.expires_after(options().frame_read_timeout);
        m_write_timer.async_wait([self = shared_from_this(), generation](std::error_code ec) {
            if (ec || generation != self->m_write_generation || self->m_closed) return;
            logger()->info("rendezvous: closing {}: a reply was not read within {}", self->m_peer,
                           format_duration(self->options().frame_read_timeout));
            self->close();
        });
        asio::async_write(
            m_socket, asio::buffer(m_writes.front()),
            asio::bind_executor(m_strand, [self = shared_from_this()](std::error_code ec, size_t) {
                ++self->m_write_generation;
                self->m_write_timer.cancel();
                if (ec || self->m_closed) return self->close();
                size_t size = self->m_writes.front().size();
                self->m_writes.pop_front();
                self->m_write_bytes -= size;
                self->m_server->release(size);
                self->write_next();
            }));
    }

    void close() {
        if (m_closed) return;
        m_closed = true;
        for (auto& [local, pending] : m_pending) {
            m_server->manager->withdraw(pending.wait_id, WithdrawReason::DISCONNECTED);
            pending.timer->cancel();
        }
        if (!m_pending.empty())
            logger()->info("rendezvous: {} disconnected with {} waiting request(s); withdrawn",
                           m_peer, m_pending.size());
        m_pending.clear();
        ++m_read_timer_generation;
        m_read_timer.cancel();
        ++m_write_generation;
        m_write_timer.cancel();
        // Give the buffer cap back now; the buffers themselves go with the connection, once
        // the operations still using them have been aborted.
        m_server->release(m_payload_capacity + m_write_bytes);
        m_payload_capacity = m_payload_have = 0;
        m_write_bytes = 0;
        if (!m_writing) m_writes.clear();
        std::error_code ignored;
        m_socket.shutdown(tcp::socket::shutdown_both, ignored);
        m_socket.close(ignored);
        m_server->forget(this);
    }

public:
    std::string m_peer;

private:
    std::shared_ptr<RendezvousServer::Impl> m_server;
    Strand m_strand;
    tcp::socket m_socket;
    asio::steady_timer m_read_timer;
    ReadTimer m_read_timer_kind = ReadTimer::NONE;
    uint64_t m_read_timer_generation = 0;
    asio::steady_timer m_write_timer;
    uint64_t m_write_generation = 0;
    std::array<uint8_t, FRAME_HEADER_SIZE> m_header{};
    size_t m_header_have = 0;
    uint32_t m_payload_length = 0; //!< of the frame being read; 0 while reading a header
    std::unique_ptr<uint8_t[]> m_payload;
    size_t m_payload_capacity = 0; //!< charged to the buffer cap
    size_t m_payload_have = 0;
    bool m_trusted = false; //!< a frame proved the token (or was valid, without one)
    bool m_reading = false;
    std::deque<std::vector<uint8_t>> m_writes;
    size_t m_write_bytes = 0; //!< of m_writes, charged to the buffer cap
    bool m_writing = false;
    bool m_closing = false;
    bool m_closed = false;
    uint64_t m_next_local = 1;
    std::unordered_map<uint64_t, Pending> m_pending;
};

void Connection::wait(const fb::Frame& frame, const char* call, std::string key,
                      const Start& start) {
    uint64_t local = m_next_local++;
    Pending& pending = m_pending[local];
    pending.request_id = frame.request_id();
    pending.call = call;
    pending.key = std::move(key);
    pending.span = wait_span(frame);
    // Messages name the whole timeout the caller asked for, not what was left of it.
    pending.reported_span = frame.timeout_span_ms()
                                ? Duration(int64_t(std::min<uint64_t>(frame.timeout_span_ms(),
                                                                      uint64_t(INT64_MAX / 2))))
                                : pending.span;
    std::weak_ptr<Connection> weak = weak_from_this();
    pending.wait_id = start([weak, local](std::vector<uint8_t> reply) {
        auto self = weak.lock();
        if (!self) return;
        // Charged here, where the reply was made: many replies completing at once (one
        // bcast fanning out to thousands of waiters) must not pile up uncounted.
        if (!self->m_server->charge(reply.size())) {
            size_t size = reply.size();
            asio::post(self->m_strand, [self, size] {
                logger()->info("rendezvous: closing {}: a reply of {} bytes does not fit the "
                               "buffer cap of {} bytes",
                               self->m_peer, size, self->options().max_buffered_bytes);
                self->close();
            });
            return;
        }
        asio::post(self->m_strand, [self, local, reply = std::move(reply)]() mutable {
            self->complete(local, std::move(reply));
        });
    });
    // A wait that completed at once already posted its reply; the timer is cancelled then.
    pending.timer = std::make_unique<asio::steady_timer>(m_strand, pending.span);
    pending.timer->async_wait([self = shared_from_this(), local](std::error_code ec) {
        if (!ec) self->on_deadline(local);
    });
    update_read_timer();
}

void RendezvousServer::Impl::accept() {
    acceptor.async_accept([self = shared_from_this()](std::error_code ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !self->acceptor.is_open()) return;
        if (ec) {
            // Out of file descriptors and the like: back off instead of spinning.
            logger()->warn("rendezvous: accept failed: {}; retrying in 100 ms", ec.message());
            self->accept_retry.expires_after(std::chrono::milliseconds(100));
            self->accept_retry.async_wait([self](std::error_code ec) {
                if (!ec) self->accept();
            });
            return;
        }
        std::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
        std::string peer;
        auto endpoint = socket.remote_endpoint(ignored);
        if (!ignored) peer = fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port());
        auto connection = std::make_shared<Connection>(self, std::move(socket));
        connection->m_peer = peer;
        {
            std::lock_guard<std::mutex> lock(self->mutex);
            if (self->stopped) return;
            self->connections.emplace(connection.get(), connection);
        }
        connection->start();
        self->accept();
    });
}

void ServerOptions::validate() const {
    if (max_frame_bytes < MIN_FIRST_FRAME_BYTES || max_frame_bytes > (1u << 30))
        BRAID_THROW(ValueError,
                    "rendezvous server: max_frame_bytes {} is out of range; expected "
                    "{}..{}",
                    max_frame_bytes, MIN_FIRST_FRAME_BYTES, 1u << 30);
    if (first_frame_bytes < MIN_FIRST_FRAME_BYTES || first_frame_bytes > max_frame_bytes)
        BRAID_THROW(ValueError,
                    "rendezvous server: first_frame_bytes {} is out of range; expected "
                    "{}..{} (max_frame_bytes)",
                    first_frame_bytes, MIN_FIRST_FRAME_BYTES, max_frame_bytes);
    if (max_buffered_bytes < max_frame_bytes)
        BRAID_THROW(ValueError,
                    "rendezvous server: max_buffered_bytes {} is below max_frame_bytes "
                    "{}; the largest frame could never be read",
                    max_buffered_bytes, max_frame_bytes);
    if (max_world_size == 0)
        BRAID_THROW(ValueError, "rendezvous server: max_world_size must be at least 1");
    if (frame_read_timeout <= Duration(0) || idle_timeout <= Duration(0))
        BRAID_THROW(ValueError, "rendezvous server: frame_read_timeout and idle_timeout must be "
                                "positive");
}

RendezvousServer::RendezvousServer(ServerOptions options, std::shared_ptr<GroupManager> manager) {
    options.validate();
    if (!manager) manager = std::make_shared<GroupManager>(options.max_world_size);
    m_impl = std::make_shared<Impl>(std::move(options), std::move(manager));
}

RendezvousServer::~RendezvousServer() {
    stop();
}

uint16_t RendezvousServer::start() {
    auto& impl = *m_impl;
    {
        std::lock_guard<std::mutex> lock(impl.mutex);
        if (impl.started)
            BRAID_THROW(CommError, "rendezvous server on {}:{} was already started",
                        impl.options.host, impl.port);
        impl.started = true;
    }
    try {
        tcp::endpoint endpoint(asio::ip::make_address(impl.options.host), impl.options.port);
        impl.acceptor.open(endpoint.protocol());
        // Processes the host program starts (braid-launch's ranks) must not inherit the
        // listener: it would keep the port open, unanswered, after stop().
        fcntl(impl.acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
        impl.acceptor.set_option(tcp::acceptor::reuse_address(true));
        impl.acceptor.bind(endpoint);
        impl.acceptor.listen(asio::socket_base::max_listen_connections);
        impl.port = impl.acceptor.local_endpoint().port();
    } catch (const std::system_error& e) {
        BRAID_THROW(CommError, "rendezvous server cannot listen on {}:{}: {}", impl.options.host,
                    impl.options.port, e.what());
    }
    impl.accept();
    for (size_t i = 0; i < std::max<size_t>(impl.options.nr_threads, 1); ++i)
        impl.threads.emplace_back([&impl] {
            for (;;) {
                try {
                    impl.io.run();
                    return;
                } catch (const std::exception& e) {
                    // A handler bug must not take the whole server down.
                    logger()->error("rendezvous: handler failed: {}", e.what());
                }
            }
        });
    logger()->info("rendezvous server listening on {}:{}", impl.options.host, impl.port);
    return impl.port;
}

void RendezvousServer::stop() {
    auto& impl = *m_impl;
    std::vector<std::shared_ptr<Connection>> open;
    {
        std::lock_guard<std::mutex> lock(impl.mutex);
        if (!impl.started || impl.stopped) return;
        impl.stopped = true;
        for (auto& [ptr, weak] : impl.connections)
            if (auto c = weak.lock()) open.push_back(std::move(c));
    }
    asio::post(impl.io, [&impl] {
        std::error_code ignored;
        impl.acceptor.close(ignored);
        impl.accept_retry.cancel();
    });
    for (auto& c : open) c->shutdown();
    open.clear();
    // Every socket is closed and every wait withdrawn; the handlers left run out on their own.
    for (auto& t : impl.threads) t.join();
    impl.threads.clear();
    // The workers return once the io_context ran out of work, but completions of the
    // operations that closing aborted can still be queued behind that point; left there,
    // each would keep its connection (and through it this server) alive forever.
    for (int round = 0; round < 1000; ++round) {
        impl.io.restart();
        if (impl.io.poll() == 0) break;
    }
}

uint16_t RendezvousServer::port() const {
    return m_impl->port;
}

size_t RendezvousServer::nr_connections() const {
    std::lock_guard<std::mutex> lock(m_impl->mutex);
    return m_impl->connections.size();
}

size_t RendezvousServer::buffered_bytes() const {
    return m_impl->buffered.load();
}

const std::shared_ptr<GroupManager>& RendezvousServer::manager() const {
    return m_impl->manager;
}

size_t raise_fd_limit(size_t wanted) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
    rlim_t target = std::min<rlim_t>(wanted, limit.rlim_max);
    if (limit.rlim_cur < target) {
        limit.rlim_cur = target;
        if (setrlimit(RLIMIT_NOFILE, &limit) != 0) getrlimit(RLIMIT_NOFILE, &limit);
    }
    return limit.rlim_cur;
}

} // namespace braid::comm
