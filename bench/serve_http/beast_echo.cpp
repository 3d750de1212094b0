// The HTTP layer alone, on Boost.Beast: an asynchronous keep-alive server that reads each
// request's body and answers a small JSON document. Its twin, httplib_echo.cpp, does the same
// on cpp-httplib; bench/serve_http/compare.sh drives both with wrk. Not part of the build
// (braid does not depend on Boost); see docs/serving.md, "The HTTP library".
//
//     beast_echo PORT THREADS
#include <utility> // before Boost 1.74's Asio, whose C++20 coroutine header misses it

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

class Session : public std::enable_shared_from_this<Session> {
public:
    explicit Session(tcp::socket socket) : m_stream(std::move(socket)) {}
    void start() { read(); }

private:
    void read() {
        m_request = {};
        m_parser.emplace();
        m_parser->body_limit(64u << 20);
        m_stream.expires_after(std::chrono::seconds(5));
        http::async_read(m_stream, m_buffer, *m_parser,
                         [self = shared_from_this()](beast::error_code ec, size_t) {
                             if (ec) return self->close();
                             self->respond();
                         });
    }
    void respond() {
        m_request = m_parser->release();
        m_response = {};
        m_response.version(m_request.version());
        m_response.result(http::status::ok);
        m_response.set(http::field::content_type, "application/json");
        m_response.body() = "{\"bytes\":" + std::to_string(m_request.body().size()) + "}";
        m_response.keep_alive(m_request.keep_alive());
        m_response.prepare_payload();
        http::async_write(m_stream, m_response,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec || !self->m_response.keep_alive()) return self->close();
                              self->read();
                          });
    }
    void close() {
        beast::error_code ec;
        m_stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    }

    beast::tcp_stream m_stream;
    beast::flat_buffer m_buffer;
    std::optional<http::request_parser<http::string_body>> m_parser;
    http::request<http::string_body> m_request;
    http::response<http::string_body> m_response;
};

void accept(tcp::acceptor& acceptor) {
    acceptor.async_accept([&acceptor](beast::error_code ec, tcp::socket socket) {
        if (!ec) {
            socket.set_option(tcp::no_delay(true));
            std::make_shared<Session>(std::move(socket))->start();
        }
        accept(acceptor);
    });
}

int main(int argc, char** argv) {
    int port = argc > 1 ? std::atoi(argv[1]) : 8001;
    int threads = argc > 2 ? std::atoi(argv[2]) : 2;
    net::io_context io(threads);
    tcp::acceptor acceptor(io, {net::ip::make_address("127.0.0.1"), (unsigned short)port});
    acceptor.listen(net::socket_base::max_listen_connections);
    accept(acceptor);
    std::vector<std::thread> pool;
    for (int i = 1; i < threads; ++i) pool.emplace_back([&] { io.run(); });
    io.run();
}
