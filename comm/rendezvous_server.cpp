#include "comm/rendezvous_server.h"

#include "base/error.h"
#include "base/log.h"
#include "comm/frame.h"
#include "comm/group_client.h"

#include <asio.hpp>

#include <sys/resource.h>

#include <deque>
#include <thread>
#include <unordered_map>

namespace braid::comm {

namespace {

using asio::ip::tcp;
using Strand = asio::strand<asio::io_context::executor_type>;

//! Compares secrets without leaking the position of the first difference through timing.
bool equal_secret(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    uint8_t diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i] ^ b[i]);
    return diff == 0;
}

std::string to_string(const flatbuffers::String* s) {
    return s ? s->str() : std::string();
}

fb::ErrorCode error_code(ErrorKind kind) {
    switch (kind) {
    case ErrorKind::TIMEOUT:
        return fb::ErrorCode::TIMEOUT;
    case ErrorKind::VALUE:
        return fb::ErrorCode::VALUE;
    case ErrorKind::COMM:
        break;
    }
    return fb::ErrorCode::COMM;
}

std::vector<uint8_t> ok_frame(uint64_t request_id) {
    flatbuffers::FlatBufferBuilder builder(64);
    auto body = fb::CreateOkReply(builder);
    return make_frame(builder, FrameMeta{request_id, {}, 0, 0, PROTOCOL_VERSION}, fb::Body::OkReply,
                      body.Union());
}

std::vector<uint8_t> bytes_frame(uint64_t request_id, const std::string& bytes) {
    flatbuffers::FlatBufferBuilder builder(64 + bytes.size());
    auto data = builder.CreateVector(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    auto body = fb::CreateBytesReply(builder, data);
    return make_frame(builder, FrameMeta{request_id, {}, 0, 0, PROTOCOL_VERSION},
                      fb::Body::BytesReply, body.Union());
}

std::vector<uint8_t> int_frame(uint64_t request_id, int64_t value) {
    flatbuffers::FlatBufferBuilder builder(64);
    auto body = fb::CreateIntReply(builder, value);
    return make_frame(builder, FrameMeta{request_id, {}, 0, 0, PROTOCOL_VERSION},
                      fb::Body::IntReply, body.Union());
}

std::vector<uint8_t> shape_frame(uint64_t request_id, const TensorShape& shape) {
    flatbuffers::FlatBufferBuilder builder(128);
    std::vector<uint64_t> dims(shape.ndim());
    for (size_t i = 0; i < shape.ndim(); ++i) dims[i] = shape[i];
    auto body = fb::CreateShapeReply(builder, builder.CreateVector(dims));
    return make_frame(builder, FrameMeta{request_id, {}, 0, 0, PROTOCOL_VERSION},
                      fb::Body::ShapeReply, body.Union());
}

std::vector<uint8_t> register_frame(uint64_t request_id, const RegisterInfo& info) {
    flatbuffers::FlatBufferBuilder builder(64);
    auto body = fb::CreateRegisterReply(builder, info.hash, info.rank, info.root_rank);
    return make_frame(builder, FrameMeta{request_id, {}, 0, 0, PROTOCOL_VERSION},
                      fb::Body::RegisterReply, body.Union());
}

std::string_view as_view(const flatbuffers::Vector<uint8_t>* v) {
    return v ? std::string_view(reinterpret_cast<const char*>(v->data()), v->size())
             : std::string_view();
}

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

    Impl(ServerOptions opts, std::shared_ptr<GroupManager> mgr)
        : options(std::move(opts)), manager(std::move(mgr)) {}
    void accept();
    void forget(Connection* connection) {
        std::lock_guard<std::mutex> lock(mutex);
        connections.erase(connection);
    }
};

//! One client connection; every member is touched only on its strand.
class Connection : public std::enable_shared_from_this<Connection> {
public:
    Connection(std::shared_ptr<RendezvousServer::Impl> server, tcp::socket socket)
        : m_server(std::move(server)), m_strand(asio::make_strand(m_server->io)),
          m_socket(std::move(socket)), m_frame_timer(m_strand) {}

    void start() {
        asio::dispatch(m_strand, [self = shared_from_this()] { self->read_header(); });
    }
    //! Closes from outside (server stop): withdraws every wait, closes the socket.
    void shutdown() {
        asio::dispatch(m_strand, [self = shared_from_this()] { self->close(); });
    }

private:
    struct Pending {
        GroupManager::WaitId wait_id = 0;
        uint64_t request_id = 0;
        std::string call, key;
        Duration span{};
        Duration reported_span{};
        std::unique_ptr<asio::steady_timer> timer;
    };

    void read_header() {
        if (m_closed || m_closing) return;
        asio::async_read(
            m_socket, asio::buffer(m_header),
            asio::bind_executor(m_strand, [self = shared_from_this()](std::error_code ec, size_t) {
                self->on_header(ec);
            }));
    }

    void on_header(std::error_code ec) {
        if (ec) return close();
        std::string error;
        uint32_t length =
            parse_frame_header(m_header.data(), error, m_server->options.max_frame_bytes);
        if (length == 0) return reject(0, fb::ErrorCode::PROTOCOL, error);
        m_payload.resize(length);
        m_frame_timer.expires_after(m_server->options.frame_read_timeout);
        m_frame_timer.async_wait([self = shared_from_this()](std::error_code ec) {
            if (!ec) {
                logger()->info("rendezvous: closing {}: frame payload did not arrive in time",
                               self->m_peer);
                self->close();
            }
        });
        asio::async_read(
            m_socket, asio::buffer(m_payload),
            asio::bind_executor(m_strand, [self = shared_from_this()](std::error_code ec, size_t) {
                self->m_frame_timer.cancel();
                if (ec) return self->close();
                self->on_payload();
            }));
    }

    void on_payload() {
        const fb::Frame* frame = verify_frame(m_payload.data(), m_payload.size());
        if (!frame)
            return reject(0, fb::ErrorCode::PROTOCOL,
                          fmt::format("malformed frame of {} bytes: the flatbuffers verifier "
                                      "rejected it",
                                      m_payload.size()));
        uint64_t request_id = frame->request_id();
        if (frame->version() != PROTOCOL_VERSION)
            return reject(request_id, fb::ErrorCode::PROTOCOL,
                          fmt::format("protocol version {} is not supported: this server "
                                      "speaks version {}; use a matching braid build",
                                      frame->version(), PROTOCOL_VERSION));
        const std::string& token = m_server->options.token;
        if (!token.empty() && !equal_secret(to_string(frame->token()), token))
            return reject(request_id, fb::ErrorCode::AUTH,
                          "authentication failed: the request's token does not match the "
                          "server's (set BRAID_TOKEN to the server's --token)");
        if (m_pending.size() >= m_server->options.max_pending_per_connection)
            return reject(request_id, fb::ErrorCode::PROTOCOL,
                          fmt::format("more than {} waiting requests on one connection",
                                      m_server->options.max_pending_per_connection));
        handle(*frame);
        read_header();
    }

    Duration wait_span(const fb::Frame& frame) const {
        auto& opt = m_server->options;
        Duration span =
            frame.timeout_ms()
                ? Duration(int64_t(std::min<uint64_t>(frame.timeout_ms(), uint64_t(INT64_MAX / 2))))
                : opt.default_wait;
        return std::min(span, opt.max_wait);
    }

    //! Starts a manager wait whose outcome `encode` turns into the reply frame.
    template <typename T, typename Start, typename Encode>
    void wait(const fb::Frame& frame, const char* call, std::string key, Start&& start,
              Encode encode) {
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
        uint64_t request_id = frame.request_id();
        auto done = [weak, local, request_id, encode](Outcome<T> outcome) {
            auto self = weak.lock();
            if (!self) return;
            std::vector<uint8_t> reply;
            if (auto* error = std::get_if<CallError>(&outcome))
                reply = make_error_frame(request_id, error_code(error->kind), error->message);
            else
                reply = encode(request_id, std::get<T>(outcome));
            asio::post(self->m_strand, [self, local, reply = std::move(reply)]() mutable {
                self->complete(local, std::move(reply));
            });
        };
        pending.wait_id = start(std::move(done));
        pending.timer = std::make_unique<asio::steady_timer>(m_strand, pending.span);
        pending.timer->async_wait([self = shared_from_this(), local](std::error_code ec) {
            if (!ec) self->on_deadline(local);
        });
    }

    void complete(uint64_t local, std::vector<uint8_t> reply) {
        auto it = m_pending.find(local);
        if (it == m_pending.end()) return;
        it->second.timer->cancel();
        m_pending.erase(it);
        send(std::move(reply));
    }

    void on_deadline(uint64_t local) {
        auto it = m_pending.find(local);
        if (it == m_pending.end()) return;
        Pending& pending = it->second;
        auto missing = m_server->manager->withdraw(pending.wait_id);
        if (!missing) return; // completed meanwhile; its reply is already posted
        send(make_error_frame(
            pending.request_id, fb::ErrorCode::TIMEOUT,
            timeout_message(pending.call, pending.key, pending.reported_span, *missing)));
        m_pending.erase(it);
    }

    void handle(const fb::Frame& frame) {
        GroupManager& manager = *m_server->manager;
        uint64_t id = frame.request_id();
        try {
            switch (frame.body_type()) {
            case fb::Body::RegisterRequest: {
                auto* req = frame.body_as_RegisterRequest();
                std::string key = to_string(req->key());
                wait<RegisterInfo>(
                    frame, "opr_register", key,
                    [&](auto done) {
                        return manager.opr_register(key, req->nr_devices(), req->is_root(),
                                                    req->rank(), req->comp_node_id(),
                                                    std::move(done));
                    },
                    register_frame);
                break;
            }
            case fb::Body::SetShapeRequest: {
                auto* req = frame.body_as_SetShapeRequest();
                TensorShape shape;
                size_t ndim = req->dims() ? req->dims()->size() : 0;
                shape.set_ndim(ndim);
                for (size_t i = 0; i < ndim; ++i) shape[i] = req->dims()->Get(i);
                manager.set_output_shape(to_string(req->key()), shape);
                send(ok_frame(id));
                break;
            }
            case fb::Body::GetShapeRequest: {
                std::string key = to_string(frame.body_as_GetShapeRequest()->key());
                wait<TensorShape>(
                    frame, "get_output_shape", key,
                    [&](auto done) { return manager.get_output_shape(key, std::move(done)); },
                    shape_frame);
                break;
            }
            case fb::Body::BcastRequest: {
                auto* req = frame.body_as_BcastRequest();
                std::string key = to_string(req->key());
                wait<std::string>(
                    frame, "bcast_bytes", key,
                    [&](auto done) {
                        return manager.bcast_bytes(key, req->size(), req->rank(), req->root(),
                                                   std::string(as_view(req->data())),
                                                   std::move(done));
                    },
                    bytes_frame);
                break;
            }
            case fb::Body::BarrierRequest: {
                auto* req = frame.body_as_BarrierRequest();
                std::string key = to_string(req->key());
                wait<std::monostate>(
                    frame, "group_barrier", key,
                    [&](auto done) {
                        return manager.group_barrier(key, req->size(), req->rank(),
                                                     std::move(done));
                    },
                    [](uint64_t rid, std::monostate) { return ok_frame(rid); });
                break;
            }
            case fb::Body::KvSetRequest: {
                auto* req = frame.body_as_KvSetRequest();
                manager.kv_set(to_string(req->key()), std::string(as_view(req->value())));
                send(ok_frame(id));
                break;
            }
            case fb::Body::KvGetRequest: {
                std::string key = to_string(frame.body_as_KvGetRequest()->key());
                wait<std::string>(
                    frame, "get", key,
                    [&](auto done) { return manager.kv_get(key, std::move(done)); }, bytes_frame);
                break;
            }
            case fb::Body::KvAddRequest: {
                auto* req = frame.body_as_KvAddRequest();
                send(int_frame(id, manager.kv_add(to_string(req->key()), req->delta())));
                break;
            }
            default:
                send(make_error_frame(id, fb::ErrorCode::PROTOCOL,
                                      fmt::format("frame body {} is not a request",
                                                  fb::EnumNameBody(frame.body_type()))));
                break;
            }
        } catch (const ValueError& e) {
            send(make_error_frame(id, fb::ErrorCode::VALUE, e.what()));
        } catch (const ShapeError& e) {
            send(make_error_frame(id, fb::ErrorCode::VALUE, e.what()));
        }
    }

    //! Replies with an error, then closes once the reply is written.
    void reject(uint64_t request_id, fb::ErrorCode code, const std::string& message) {
        logger()->info("rendezvous: rejecting {}: {}", m_peer, message);
        send(make_error_frame(request_id, code, message));
        m_closing = true;
        if (!m_writing) close();
    }

    void send(std::vector<uint8_t> frame) {
        if (m_closed) return;
        m_writes.push_back(std::move(frame));
        if (!m_writing) write_next();
    }

    void write_next() {
        if (m_writes.empty()) {
            m_writing = false;
            if (m_closing) close();
            return;
        }
        m_writing = true;
        asio::async_write(
            m_socket, asio::buffer(m_writes.front()),
            asio::bind_executor(m_strand, [self = shared_from_this()](std::error_code ec, size_t) {
                if (ec) return self->close();
                self->m_writes.pop_front();
                self->write_next();
            }));
    }

    void close() {
        if (m_closed) return;
        m_closed = true;
        for (auto& [local, pending] : m_pending) {
            m_server->manager->withdraw(pending.wait_id);
            pending.timer->cancel();
        }
        if (!m_pending.empty())
            logger()->info("rendezvous: {} disconnected with {} waiting request(s); withdrawn",
                           m_peer, m_pending.size());
        m_pending.clear();
        m_frame_timer.cancel();
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
    asio::steady_timer m_frame_timer;
    std::array<uint8_t, FRAME_HEADER_SIZE> m_header{};
    std::vector<uint8_t> m_payload;
    std::deque<std::vector<uint8_t>> m_writes;
    bool m_writing = false;
    bool m_closing = false;
    bool m_closed = false;
    uint64_t m_next_local = 1;
    std::unordered_map<uint64_t, Pending> m_pending;
};

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

RendezvousServer::RendezvousServer(ServerOptions options, std::shared_ptr<GroupManager> manager)
    : m_impl(std::make_shared<Impl>(
          std::move(options), manager ? std::move(manager) : std::make_shared<GroupManager>())) {}

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
}

uint16_t RendezvousServer::port() const {
    return m_impl->port;
}

size_t RendezvousServer::nr_connections() const {
    std::lock_guard<std::mutex> lock(m_impl->mutex);
    return m_impl->connections.size();
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
