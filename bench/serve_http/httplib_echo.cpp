// The HTTP layer alone, on cpp-httplib, configured as braid-serve configures it (keep-alive
// without a request cap, TCP_NODELAY, 5 s timeouts, the backlog raised, bodies read by the
// handler) but with httplib's own thread pool: reads each request's body and answers a small
// JSON document. See beast_echo.cpp and compare.sh.
//
//     httplib_echo PORT THREADS
#include <httplib.h>

#include <cstdlib>
#include <string>

class Server : public httplib::Server {
public:
    void raise_backlog() { ::listen(svr_sock_, SOMAXCONN); }
};

int main(int argc, char** argv) {
    int port = argc > 1 ? std::atoi(argv[1]) : 8002;
    size_t threads = argc > 2 ? size_t(std::atoi(argv[2])) : 64;
    Server server;
    server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server.set_keep_alive_max_count(1u << 30);
    server.set_tcp_nodelay(true);
    server.Post(".*", [](const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader& read) {
        std::string body;
        read([&](const char* data, size_t n) {
            body.append(data, n);
            return true;
        });
        res.body = "{\"bytes\":" + std::to_string(body.size()) + "}";
        res.set_header("Content-Type", "application/json");
    });
    if (!server.bind_to_port("127.0.0.1", port)) return 1;
    server.raise_backlog();
    server.listen_after_bind();
}
