#include "comm/tcp_client.h"

#include "base/error.h"
#include "base/log.h"
#include "comm/frame.h"

#include <asio.hpp>

#include <cstdlib>
#include <thread>

namespace braid::comm {

using asio::ip::tcp;

std::string TcpClientOptions::token_from_env() {
    const char* env = std::getenv("BRAID_TOKEN");
    return env ? std::string(env) : std::string();
}

//! One socket with its own io_context, so blocking operations can carry deadlines.
class TcpGroupClient::Connection {
public:
    asio::io_context io{1};
    tcp::socket socket{io};

    //! Runs the pending operation until it finished or `until` passed; in the latter case
    //! closes the socket (aborting the operation) and returns false.
    bool run_until(Clock::time_point until) {
        io.restart();
        io.run_until(until);
        if (io.stopped()) return true;
        std::error_code ignored;
        socket.close(ignored);
        io.restart();
        io.run();
        return false;
    }

    //! Writes all of `bytes`; returns the error (timeout as asio::error::timed_out).
    std::error_code write(const std::vector<uint8_t>& bytes, Clock::time_point until) {
        std::error_code result = asio::error::would_block;
        asio::async_write(socket, asio::buffer(bytes),
                          [&](std::error_code ec, size_t) { result = ec; });
        if (!run_until(until)) return asio::error::timed_out;
        return result;
    }

    //! Reads exactly `size` bytes into `out`.
    std::error_code read(void* out, size_t size, Clock::time_point until) {
        std::error_code result = asio::error::would_block;
        asio::async_read(socket, asio::buffer(out, size),
                         [&](std::error_code ec, size_t) { result = ec; });
        if (!run_until(until)) return asio::error::timed_out;
        return result;
    }
};

struct TcpGroupClient::Reply {
    std::vector<uint8_t> payload;
    const fb::Frame* frame = nullptr;
};

namespace {

//! Checks that a reply is an OkReply; CommError naming what came instead.
template <typename Reply>
void expect_ok(const Reply& reply, std::string_view call, const std::string& key) {
    if (reply.frame->body_type() != fb::Body::OkReply)
        BRAID_THROW(CommError, "{}(key \"{}\"): unexpected reply {} from the rendezvous server",
                    call, key, fb::EnumNameBody(reply.frame->body_type()));
}

} // namespace

TcpGroupClient::TcpGroupClient(std::string host, uint16_t port, TcpClientOptions options)
    : m_host(std::move(host)), m_port(port), m_options(std::move(options)) {}

TcpGroupClient::~TcpGroupClient() = default;

std::string TcpGroupClient::address() const {
    return fmt::format("tcp://{}:{}", m_host, m_port);
}

size_t TcpGroupClient::nr_idle_connections() const {
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_idle.size();
}

std::unique_ptr<TcpGroupClient::Connection> TcpGroupClient::connect(std::string_view call_name,
                                                                    const std::string& key,
                                                                    const Deadline& deadline) {
    auto give_up = std::min(deadline.at(), Clock::now() + m_options.connect_retry);
    std::error_code last;
    for (;;) {
        auto connection = std::make_unique<Connection>();
        tcp::resolver resolver(connection->io);
        std::error_code ec;
        auto endpoints = resolver.resolve(m_host, std::to_string(m_port), ec);
        if (!ec) {
            std::error_code result = asio::error::would_block;
            asio::async_connect(connection->socket, endpoints,
                                [&](std::error_code e, const tcp::endpoint&) { result = e; });
            ec = connection->run_until(give_up) ? result : asio::error::timed_out;
        }
        if (!ec) {
            std::error_code ignored;
            connection->socket.set_option(tcp::no_delay(true), ignored);
            m_reached = true;
            return connection;
        }
        last = ec;
        // A refused connection usually means the server is still starting: retry a while. A
        // server this client reached before has stopped instead.
        if (ec == asio::error::connection_refused && m_reached)
            BRAID_THROW(CommError,
                        "{}(key \"{}\"): the rendezvous server {} refuses connections: {} (it "
                        "was reachable before; did the server stop?)",
                        call_name, key, address(), ec.message());
        if (ec != asio::error::connection_refused || Clock::now() >= give_up) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (last == asio::error::timed_out && deadline.passed())
        throw TimeoutError(timeout_message(
            call_name, key, deadline.span(),
            fmt::format("could not connect to the rendezvous server {}", address())));
    BRAID_THROW(CommError, "{}(key \"{}\"): cannot connect to the rendezvous server {}: {}",
                call_name, key, address(), last.message());
}

template <typename Build>
TcpGroupClient::Reply TcpGroupClient::call(std::string_view call_name, const std::string& key,
                                           Timeout timeout, Build&& build) {
    Deadline deadline = Deadline::from(timeout);
    uint64_t request_id;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        request_id = m_next_request++;
    }
    for (int attempt = 0;; ++attempt) {
        std::unique_ptr<Connection> connection;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            if (!m_idle.empty()) {
                connection = std::move(m_idle.back());
                m_idle.pop_back();
            }
        }
        bool reused = connection != nullptr;
        if (!connection) connection = connect(call_name, key, deadline);
        // The server holds the request at most this long and then answers with what was
        // missing; the client waits a grace period longer for that answer.
        FrameMeta meta;
        meta.request_id = request_id;
        meta.token = m_options.token;
        meta.timeout_ms = uint64_t(std::max<int64_t>(deadline.remaining().count(), 1));
        meta.timeout_span_ms = uint64_t(std::max<int64_t>(deadline.span().count(), 1));
        std::vector<uint8_t> request = build(meta);
        if (!reused && request.size() - FRAME_HEADER_SIZE > MIN_FIRST_FRAME_BYTES) {
            // A server reads a large frame only on a connection that proved the token.
            flatbuffers::FlatBufferBuilder b(64 + meta.token.size());
            auto body = fb::CreateHelloRequest(b);
            auto hello = make_frame(b, meta, fb::Body::HelloRequest, body.Union());
            auto reply = exchange(call_name, key, deadline, connection, hello, request_id, false);
            expect_ok(*reply, call_name, key);
        }
        auto reply = exchange(call_name, key, deadline, connection, request, request_id,
                              reused && attempt == 0);
        // A pooled connection the server closed meanwhile: retry once on a fresh one.
        if (!reply) continue;
        give_back(std::move(connection));
        return std::move(*reply);
    }
}

std::optional<TcpGroupClient::Reply>
TcpGroupClient::exchange(std::string_view call_name, const std::string& key,
                         const Deadline& deadline, std::unique_ptr<Connection>& connection,
                         const std::vector<uint8_t>& request, uint64_t request_id, bool may_retry) {
    auto reply_until = deadline.at() + m_options.reply_grace;
    auto lost = [&](const char* what, std::error_code ec) {
        BRAID_THROW(CommError,
                    "{}(key \"{}\"): the rendezvous server {} {}: {} (did the server stop?)",
                    call_name, key, address(), what, ec.message());
    };
    std::error_code ec = connection->write(request, reply_until);
    std::array<uint8_t, FRAME_HEADER_SIZE> header{};
    if (!ec) ec = connection->read(header.data(), header.size(), reply_until);
    if (ec == asio::error::timed_out)
        throw TimeoutError(
            timeout_message(call_name, key, deadline.span(),
                            fmt::format("no reply from the rendezvous server {}", address())));
    if (ec) {
        if (may_retry) return std::nullopt;
        lost("closed the connection", ec);
    }
    std::string error;
    uint32_t length = parse_frame_header(header.data(), error);
    if (length == 0)
        BRAID_THROW(CommError, "{}(key \"{}\"): bad reply from the rendezvous server {}: {}",
                    call_name, key, address(), error);
    Reply reply;
    reply.payload.resize(length);
    ec = connection->read(reply.payload.data(), length, reply_until);
    if (ec == asio::error::timed_out)
        throw TimeoutError(timeout_message(
            call_name, key, deadline.span(),
            fmt::format("the reply from the rendezvous server {} stalled", address())));
    if (ec) lost("closed the connection mid-reply", ec);
    reply.frame = verify_frame(reply.payload.data(), reply.payload.size());
    if (!reply.frame)
        BRAID_THROW(CommError,
                    "{}(key \"{}\"): the rendezvous server {} sent a malformed reply of {} "
                    "bytes",
                    call_name, key, address(), length);
    if (reply.frame->body_type() == fb::Body::ErrorReply) {
        auto* err = reply.frame->body_as_ErrorReply();
        std::string message = err->message() ? err->message()->str() : "(no message)";
        switch (err->code()) {
        case fb::ErrorCode::TIMEOUT:
            give_back(std::move(connection));
            throw TimeoutError(message);
        case fb::ErrorCode::VALUE:
            give_back(std::move(connection));
            throw ValueError(message);
        case fb::ErrorCode::COMM:
            give_back(std::move(connection));
            throw CommError(message);
        default: // PROTOCOL, AUTH: the server closes the connection
            BRAID_THROW(CommError,
                        "{}(key \"{}\"): the rendezvous server {} refused the "
                        "request: {}",
                        call_name, key, address(), message);
        }
    }
    if (reply.frame->request_id() != request_id || reply.frame->version() != PROTOCOL_VERSION)
        BRAID_THROW(CommError,
                    "{}(key \"{}\"): the rendezvous server {} answered request {} "
                    "(protocol version {}), expected request {} (version {})",
                    call_name, key, address(), reply.frame->request_id(), reply.frame->version(),
                    request_id, PROTOCOL_VERSION);
    return reply;
}

void TcpGroupClient::give_back(std::unique_ptr<Connection> connection) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_idle.push_back(std::move(connection));
}

namespace {

//! The reply's body as `T`, or CommError naming what came instead.
template <typename T>
const T* expect_body(const fb::Frame* frame, std::string_view call, const std::string& key) {
    auto* body = frame->body_as<T>();
    if (!body)
        BRAID_THROW(CommError, "{}(key \"{}\"): unexpected reply {} from the rendezvous server",
                    call, key, fb::EnumNameBody(frame->body_type()));
    return body;
}

flatbuffers::Offset<flatbuffers::Vector<uint8_t>> bytes_vector(flatbuffers::FlatBufferBuilder& b,
                                                               std::string_view bytes) {
    return b.CreateVector(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

} // namespace

RegisterInfo TcpGroupClient::opr_register(const std::string& key, uint32_t nr_devices, bool is_root,
                                          int32_t rank, uint64_t comp_node_id, Timeout timeout) {
    auto reply = call("opr_register", key, timeout, [&](const FrameMeta& meta) {
        return make_register_frame(meta, key, nr_devices, is_root, rank, comp_node_id);
    });
    auto* body = expect_body<fb::RegisterReply>(reply.frame, "opr_register", key);
    return {body->hash(), body->rank(), body->root_rank()};
}

void TcpGroupClient::set_output_shape(const std::string& key, const TensorShape& shape,
                                      Timeout timeout) {
    auto reply = call("set_output_shape", key, timeout, [&](const FrameMeta& meta) {
        flatbuffers::FlatBufferBuilder b(128 + key.size());
        std::vector<uint64_t> dims(shape.ndim());
        for (size_t i = 0; i < shape.ndim(); ++i) dims[i] = shape[i];
        auto body = fb::CreateSetShapeRequest(b, b.CreateString(key), b.CreateVector(dims));
        return make_frame(b, meta, fb::Body::SetShapeRequest, body.Union());
    });
    expect_body<fb::OkReply>(reply.frame, "set_output_shape", key);
}

TensorShape TcpGroupClient::get_output_shape(const std::string& key, Timeout timeout) {
    auto reply = call("get_output_shape", key, timeout, [&](const FrameMeta& meta) {
        flatbuffers::FlatBufferBuilder b(128 + key.size());
        auto body = fb::CreateGetShapeRequest(b, b.CreateString(key));
        return make_frame(b, meta, fb::Body::GetShapeRequest, body.Union());
    });
    auto* body = expect_body<fb::ShapeReply>(reply.frame, "get_output_shape", key);
    std::vector<size_t> dims;
    if (body->dims())
        for (uint64_t d : *body->dims()) dims.push_back(size_t(d));
    return TensorShape(dims);
}

std::string TcpGroupClient::bcast_bytes(const std::string& key, uint32_t size, uint32_t rank,
                                        uint32_t root, std::string_view bytes, Timeout timeout) {
    auto reply = call("bcast_bytes", key, timeout, [&](const FrameMeta& meta) {
        flatbuffers::FlatBufferBuilder b(128 + key.size() + bytes.size());
        auto body = fb::CreateBcastRequest(b, b.CreateString(key), size, rank, root,
                                           bytes_vector(b, bytes));
        return make_frame(b, meta, fb::Body::BcastRequest, body.Union());
    });
    auto* body = expect_body<fb::BytesReply>(reply.frame, "bcast_bytes", key);
    return body->data() ? std::string(body->data()->begin(), body->data()->end()) : std::string();
}

void TcpGroupClient::group_barrier(const std::string& key, uint32_t size, uint32_t rank,
                                   Timeout timeout) {
    auto reply = call("group_barrier", key, timeout, [&](const FrameMeta& meta) {
        flatbuffers::FlatBufferBuilder b(128 + key.size());
        auto body = fb::CreateBarrierRequest(b, b.CreateString(key), size, rank);
        return make_frame(b, meta, fb::Body::BarrierRequest, body.Union());
    });
    expect_body<fb::OkReply>(reply.frame, "group_barrier", key);
}

void TcpGroupClient::set(const std::string& key, std::string_view value, Timeout timeout) {
    auto reply = call("set", key, timeout, [&](const FrameMeta& meta) {
        flatbuffers::FlatBufferBuilder b(128 + key.size() + value.size());
        auto body = fb::CreateKvSetRequest(b, b.CreateString(key), bytes_vector(b, value));
        return make_frame(b, meta, fb::Body::KvSetRequest, body.Union());
    });
    expect_body<fb::OkReply>(reply.frame, "set", key);
}

std::string TcpGroupClient::get(const std::string& key, Timeout timeout) {
    auto reply = call("get", key, timeout, [&](const FrameMeta& meta) {
        flatbuffers::FlatBufferBuilder b(128 + key.size());
        auto body = fb::CreateKvGetRequest(b, b.CreateString(key));
        return make_frame(b, meta, fb::Body::KvGetRequest, body.Union());
    });
    auto* body = expect_body<fb::BytesReply>(reply.frame, "get", key);
    return body->data() ? std::string(body->data()->begin(), body->data()->end()) : std::string();
}

int64_t TcpGroupClient::add(const std::string& key, int64_t delta, Timeout timeout) {
    auto reply = call("add", key, timeout, [&](const FrameMeta& meta) {
        flatbuffers::FlatBufferBuilder b(128 + key.size());
        auto body = fb::CreateKvAddRequest(b, b.CreateString(key), delta);
        return make_frame(b, meta, fb::Body::KvAddRequest, body.Union());
    });
    return expect_body<fb::IntReply>(reply.frame, "add", key)->value();
}

} // namespace braid::comm
