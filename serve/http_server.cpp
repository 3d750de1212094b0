#include "serve/http_server.h"

#include "serve/connection_tracker.h"
#include "serve/json.h"
#include "serve/protocol.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace braid::serve {

namespace {

const char* const JSON_TYPE = "application/json";

/*!
 * httplib's task queue, one job per accepted connection: a thread per connection being served,
 * up to `max_threads`; further connections wait in order for a thread. Idle threads linger 2 s
 * for the next connection. shutdown() waits for the connections in progress until the drain
 * deadline. The state is shared with the (detached) threads, so none outlives it.
 */
class ConnectionQueue : public httplib::TaskQueue {
public:
    struct State {
        std::mutex mutex;
        std::condition_variable work_cv, done_cv;
        std::deque<std::function<void()>> pending;
        size_t threads = 0, idle = 0, busy = 0;
        size_t max_threads = 1;
        bool shutdown = false;
        //! Called (without the lock) when a new connection must wait for a thread.
        std::function<void()> on_full;
    };

    ConnectionQueue(std::shared_ptr<State> state, int drain_timeout_s, bool& drained)
        : m_state(std::move(state)), m_drain_timeout_s(drain_timeout_s), m_drained(drained) {}

    void enqueue(std::function<void()> fn) override {
        std::unique_lock lock(m_state->mutex);
        m_state->pending.push_back(std::move(fn));
        if (m_state->pending.size() > m_state->idle && m_state->threads < m_state->max_threads)
            spawn();
        m_state->work_cv.notify_one();
        bool full = m_state->pending.size() > m_state->idle;
        lock.unlock();
        if (full && m_state->on_full) m_state->on_full();
    }

    void shutdown() override {
        std::unique_lock lock(m_state->mutex);
        m_state->shutdown = true;
        m_state->work_cv.notify_all();
        m_drained = m_state->done_cv.wait_for(lock, std::chrono::seconds(m_drain_timeout_s),
                                              [&] { return m_state->threads == 0; });
    }

private:
    static void* run(void* arg) {
        std::shared_ptr<State> s(*static_cast<std::shared_ptr<State>*>(arg));
        delete static_cast<std::shared_ptr<State>*>(arg);
        std::unique_lock lock(s->mutex);
        for (;;) {
            if (!s->pending.empty()) {
                auto fn = std::move(s->pending.front());
                s->pending.pop_front();
                ++s->busy;
                lock.unlock();
                fn(); // serves the connection, then closes it
                fn = nullptr;
                lock.lock();
                --s->busy;
                continue;
            }
            if (s->shutdown) break;
            ++s->idle;
            bool woken = s->work_cv.wait_for(lock, std::chrono::seconds(2),
                                             [&] { return !s->pending.empty() || s->shutdown; });
            --s->idle;
            if (!woken) break;
        }
        --s->threads;
        s->done_cv.notify_all();
        return nullptr;
    }

    //! Starts one thread (the lock is held). A failure leaves the job queued for a running one.
    void spawn() {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
        pthread_attr_setstacksize(&attr, 4u << 20);
#else
        pthread_attr_setstacksize(&attr, 1u << 20);
#endif
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        auto* arg = new std::shared_ptr<State>(m_state);
        pthread_t thread;
        if (pthread_create(&thread, &attr, &ConnectionQueue::run, arg) == 0) {
            ++m_state->threads;
        } else {
            delete arg;
            if (m_state->threads == 0)
                std::fprintf(stderr, "braid-serve: cannot start a connection thread\n");
        }
        pthread_attr_destroy(&attr);
    }

    std::shared_ptr<State> m_state;
    int m_drain_timeout_s;
    bool& m_drained;
};

//! The path's segments: "/v2/models/mlp/infer" -> {"v2", "models", "mlp", "infer"}.
std::vector<std::string> split_path(const std::string& path) {
    std::vector<std::string> parts;
    size_t i = 0;
    while (i < path.size()) {
        while (i < path.size() && path[i] == '/') ++i;
        size_t j = path.find('/', i);
        if (j == std::string::npos) j = path.size();
        if (j > i) parts.push_back(path.substr(i, j - i));
        i = j;
    }
    return parts;
}

void reply_json(httplib::Response& res, int status, std::string body) {
    res.status = status;
    res.body = std::move(body);
    res.set_header("Content-Type", JSON_TYPE);
}

void reply_error(httplib::Response& res, int status, std::string_view message) {
    reply_json(res, status, error_body(message));
}

/*!
 * Answers `status` with a JSON error, then closes the connection: what the client still sends
 * (a body refused before reading, requests after a drain began) is never read. httplib closes a
 * connection when writing its response fails, so the body goes out through a content provider
 * that reports failure after its last byte. The error handler leaves such responses alone
 * (they carry "Connection: close").
 */
//! Set when this thread's request was refused with reply_error_and_close(): its connection is
//! closed with a linger (see Server::process_and_close_socket).
thread_local bool t_refused = false;

void reply_error_and_close(httplib::Response& res, int status, std::string_view message) {
    t_refused = true;
    auto body = std::make_shared<std::string>(error_body(message));
    res.status = status;
    res.set_header("Connection", "close");
    res.set_content_provider(body->size(), JSON_TYPE,
                             [body](size_t offset, size_t length, httplib::DataSink& sink) {
                                 sink.write(body->data() + offset, length);
                                 return false; // the response is out: close the connection
                             });
}

bool parse_int64(const std::string& text, int64_t& out) {
    auto r = std::from_chars(text.data(), text.data() + text.size(), out);
    return r.ec == std::errc() && r.ptr == text.data() + text.size() && out >= 0;
}

std::string join(const std::vector<std::string>& names) {
    std::string s;
    for (auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? "none" : s;
}

/*!
 * httplib's server with its listening socket reachable: the library listens with a backlog of
 * 5, so a burst of new connections (a load generator starting, hundreds of clients at once)
 * overflows the accept queue and each dropped SYN costs its client a 1 s retransmission.
 * listen() again on the bound socket raises the backlog.
 */
class Server : public httplib::Server {
public:
    Server(ConnectionTracker& tracker, std::chrono::microseconds poll_budget)
        : m_tracker(tracker), m_pollers(poll_budget) {}

    void raise_backlog(int backlog) {
        socket_t sock = svr_sock_;
        if (sock != INVALID_SOCKET) ::listen(sock, backlog);
    }

    /*!
     * Stops accepting connections while the open ones go on being served (httplib's stop()
     * would end every connection after its current request, dropping requests already on the
     * wire). The accept loop fails on the shut socket and closes it; the connection threads
     * run until their connections close, which the drain waits for.
     */
    void stop_accepting() {
        socket_t sock = svr_sock_;
        if (sock != INVALID_SOCKET) ::shutdown(sock, SHUT_RDWR);
    }

    //! After listen returned: the socket is closed, so nothing may use its number again.
    void forget_socket() { svr_sock_ = INVALID_SOCKET; }

private:
    /*!
     * One connection, on its connection thread, in place of httplib's loop (which this
     * overrides): requests one after the other while the connection is kept alive. The tracker
     * knows the socket while it is served, and the wait for the next request sleeps in poll()
     * until bytes arrive or the idle timeout passes (httplib's loop wakes every 10 ms).
     */
    bool process_and_close_socket(socket_t sock) override {
        m_tracker.open(sock);
        SocketStream stream(sock, read_timeout_sec_, write_timeout_sec_);
        bool ok = false;
        for (size_t left = keep_alive_max_count_; left > 0; --left) {
            if (!m_pollers.poll(stream) &&
                !stream.wait_readable(int(keep_alive_timeout_sec_) * 1000))
                break;
            bool closed = false;
            m_pollers.begin_request();
            ok = process_request(stream, left == 1, closed, nullptr);
            ok = stream.flush() && ok;
            m_pollers.end_request();
            if (!ok || closed) break;
        }
        m_tracker.close();
        if (t_refused) linger(sock);
        t_refused = false;
        ::shutdown(sock, SHUT_RDWR);
        ::close(sock);
        return ok;
    }

    /*!
     * After a refusal, the client may still be sending the body it announced. Closing a socket
     * with unread bytes sends a reset, which can reach the client before it has read the
     * refusal. So: end our side, then read and discard what still comes, for at most 500 ms
     * and 4 MiB, before closing (nginx's lingering close, bounded).
     */
    static void linger(socket_t sock) {
        ::shutdown(sock, SHUT_WR);
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
        char buf[16384];
        for (size_t left = size_t(4) << 20; left > 0;) {
            auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now())
                          .count();
            pollfd p{sock, POLLIN, 0};
            if (ms <= 0 || ::poll(&p, 1, int(ms)) <= 0) return;
            ssize_t n = ::recv(sock, buf, std::min(sizeof buf, left), 0);
            if (n <= 0) return;
            left -= size_t(n);
        }
    }

    /*!
     * httplib's Stream over a connected socket. Reads go through a 16 KiB buffer (a typical
     * request arrives in one recv) and wait at most the read timeout for bytes. Writes are
     * gathered and sent by flush(), which the connection loop calls after each request, so a
     * response's headers and body leave in one send (two sends would wake the client twice);
     * they are also flushed before a read must wait (a "100 Continue" reaches the client) and
     * once 64 KiB are gathered. A send waits at most the write timeout for room (the connection
     * counts as broken then). Calls try the socket first and poll only when it would block.
     */
    class SocketStream : public httplib::Stream {
    public:
        SocketStream(socket_t sock, time_t read_timeout_s, time_t write_timeout_s)
            : m_sock(sock), m_read_ms(int(read_timeout_s) * 1000),
              m_write_ms(int(write_timeout_s) * 1000) {}

        //! True when bytes (or end of file) arrived within `ms`, or were buffered already.
        bool wait_readable(int ms) const { return m_off < m_len || poll_for(POLLIN, ms); }
        //! Checks for bytes without sleeping until they come or `budget` passed.
        bool poll_readable(std::chrono::microseconds budget) const {
            auto until = std::chrono::steady_clock::now() + budget;
            do {
                if (wait_readable(0)) return true;
            } while (std::chrono::steady_clock::now() < until);
            return false;
        }
        bool is_readable() const override { return wait_readable(m_read_ms); }
        //! Writes are gathered (send_all() waits for room): writable until the connection broke.
        bool is_writable() const override { return !m_broken; }
        ssize_t read(char* ptr, size_t size) override {
            if (m_off == m_len) {
                if (!flush()) return -1;
                ssize_t n =
                    retry([&] { return ::recv(m_sock, m_buf, sizeof m_buf, MSG_DONTWAIT); });
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                    if (!poll_for(POLLIN, m_read_ms)) return -1;
                    n = retry([&] { return ::recv(m_sock, m_buf, sizeof m_buf, MSG_DONTWAIT); });
                }
                if (n <= 0) return n;
                m_off = 0;
                m_len = size_t(n);
            }
            size_t n = std::min(size, m_len - m_off);
            std::memcpy(ptr, m_buf + m_off, n);
            m_off += n;
            return ssize_t(n);
        }
        ssize_t write(const char* ptr, size_t size) override {
            if (m_broken) return -1;
            if (m_out.size() + size > MAX_GATHERED) {
                if (!flush()) return -1;
                if (size > MAX_GATHERED) return send_all(ptr, size) ? ssize_t(size) : -1;
            }
            m_out.append(ptr, size);
            return ssize_t(size);
        }
        //! Sends what write() gathered; false once the connection is broken.
        bool flush() {
            if (m_out.empty()) return !m_broken;
            bool ok = send_all(m_out.data(), m_out.size());
            m_out.clear();
            return ok;
        }
        void get_remote_ip_and_port(std::string& ip, int& port) const override {
            if (m_remote_port < 0) address_of(::getpeername, m_remote_ip, m_remote_port);
            ip = m_remote_ip;
            port = m_remote_port;
        }
        void get_local_ip_and_port(std::string& ip, int& port) const override {
            if (m_local_port < 0) address_of(::getsockname, m_local_ip, m_local_port);
            ip = m_local_ip;
            port = m_local_port;
        }
        socket_t socket() const override { return m_sock; }

    private:
        static constexpr size_t MAX_GATHERED = size_t(64) << 10;

        bool send_all(const char* p, size_t size) {
            while (size > 0 && !m_broken) {
                ssize_t n =
                    retry([&] { return ::send(m_sock, p, size, MSG_NOSIGNAL | MSG_DONTWAIT); });
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                    if (!poll_for(POLLOUT, m_write_ms)) m_broken = true;
                    continue;
                }
                if (n <= 0) {
                    m_broken = true;
                    break;
                }
                p += n;
                size -= size_t(n);
            }
            return !m_broken;
        }
        bool poll_for(short events, int ms) const {
            pollfd p{m_sock, events, 0};
            int r = int(retry([&] { return ssize_t(::poll(&p, 1, ms)); }));
            return r > 0 && !(p.revents & POLLNVAL) && (events == POLLIN || !(p.revents & POLLERR));
        }
        template <typename F> static ssize_t retry(F fn) {
            ssize_t r;
            do r = fn();
            while (r < 0 && errno == EINTR);
            return r;
        }
        template <typename Get> void address_of(Get get, std::string& ip, int& port) const {
            sockaddr_storage addr{};
            socklen_t len = sizeof addr;
            ip.clear();
            port = 0;
            if (get(m_sock, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
            char host[INET6_ADDRSTRLEN] = "";
            if (addr.ss_family == AF_INET) {
                auto* a = reinterpret_cast<sockaddr_in*>(&addr);
                ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
                port = ntohs(a->sin_port);
            } else if (addr.ss_family == AF_INET6) {
                auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
                ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
                port = ntohs(a->sin6_port);
            }
            ip = host;
        }

        socket_t m_sock;
        int m_read_ms, m_write_ms;
        bool m_broken = false;
        char m_buf[16384];
        size_t m_off = 0, m_len = 0;
        std::string m_out;
        // The connection's addresses, read once (httplib asks for them on every request).
        mutable std::string m_remote_ip, m_local_ip;
        mutable int m_remote_port = -1, m_local_port = -1;
    };

    /*!
     * Polling before sleeping, for a connection that answered a request and waits for the next:
     * waking a thread that sleeps in poll() costs tens of microseconds (more in a virtual
     * machine), as much as the rest of a small request, twice per round trip. So the thread
     * first checks its socket for up to the poll budget, but only while cores would otherwise be
     * idle: the threads handling requests and the ones polling stay fewer than the cores less
     * one (kept for the clients and the rest of the process). Under load no thread polls.
     */
    class Pollers {
    public:
        explicit Pollers(std::chrono::microseconds budget)
            : m_budget(budget), m_cores(std::max(1, int(std::thread::hardware_concurrency()) - 1)) {
        }
        //! True when the next request's bytes came within the budget; false when they did not
        //! or the thread did not poll (no budget, or no idle core).
        bool poll(const SocketStream& stream) {
            if (m_budget.count() <= 0) return false;
            int polling = m_polling.fetch_add(1, std::memory_order_relaxed);
            bool ready = false;
            if (polling + m_busy.load(std::memory_order_relaxed) < m_cores)
                ready = stream.poll_readable(m_budget);
            m_polling.fetch_sub(1, std::memory_order_relaxed);
            return ready;
        }
        //! Brackets the handling of one request, from its first bytes to its sent response.
        void begin_request() { m_busy.fetch_add(1, std::memory_order_relaxed); }
        void end_request() { m_busy.fetch_sub(1, std::memory_order_relaxed); }

    private:
        std::chrono::microseconds m_budget;
        int m_cores;
        std::atomic<int> m_polling{0}, m_busy{0};
    };

    ConnectionTracker& m_tracker;
    Pollers m_pollers;
};

//! Marks the calling thread's connection as having a request in a handler, for its scope.
struct RequestScope {
    ConnectionTracker& tracker;
    explicit RequestScope(ConnectionTracker& t) : tracker(t) { tracker.enter_request(); }
    ~RequestScope() { tracker.leave_request(); }
};

} // namespace

struct HttpServer::Impl {
    ServerOptions options;
    Repository& repository;
    Metrics& metrics;
    ConnectionTracker tracker;
    Server server;
    std::shared_ptr<ConnectionQueue::State> connections =
        std::make_shared<ConnectionQueue::State>();
    bool drained = true;
    std::atomic<bool> draining{false};
    // The slot keeper: while connections wait for a thread, it shuts stalled ones (idle, or
    // sending their headers for longer than the stall timeout), every 50 ms.
    std::thread keeper;
    std::mutex keeper_mutex;
    std::condition_variable keeper_cv;
    bool keeper_stop = false;
    bool keeper_woken = false; //!< a connection started waiting since the keeper last looked

    Impl(const ServerOptions& o, Repository& r, Metrics& m)
        : options(o), repository(r), metrics(m),
          tracker(std::chrono::milliseconds(o.stall_timeout_ms)),
          server(tracker, std::chrono::microseconds(o.poll_us)) {}
    ~Impl() { stop_keeper(); }

    //! Connections waiting for a thread beyond the idle threads.
    size_t waiting_connections() {
        std::lock_guard lock(connections->mutex);
        return connections->pending.size() > connections->idle
                   ? connections->pending.size() - connections->idle
                   : 0;
    }
    void keep_slots() {
        std::unique_lock lk(keeper_mutex);
        while (!keeper_stop) {
            keeper_woken = false;
            size_t waiting = waiting_connections();
            if (waiting == 0) {
                keeper_cv.wait(lk, [&] { return keeper_woken || keeper_stop; });
                continue;
            }
            lk.unlock();
            for (size_t i = 0; i < waiting && tracker.evict_stalled(); ++i) {
            }
            lk.lock();
            keeper_cv.wait_for(lk, std::chrono::milliseconds(50));
        }
    }
    void stop_keeper() {
        {
            std::lock_guard lk(keeper_mutex);
            keeper_stop = true;
        }
        keeper_cv.notify_all();
        if (keeper.joinable()) keeper.join();
    }

    void route(const httplib::Request& req, httplib::Response& res, std::string_view body);
    void infer(const std::string& name, const httplib::Request& req, httplib::Response& res,
               std::string_view body);
    void model_metadata(const std::string& name, httplib::Response& res);
    void repository_call(const std::vector<std::string>& parts, httplib::Response& res);
    std::string missing_model(const std::string& name) const;
};

std::string HttpServer::Impl::missing_model(const std::string& name) const {
    if (repository.exists(name))
        return "model \"" + name + "\" is not loaded (load it with POST /v2/repository/models/" +
               name + "/load)";
    return "no model named \"" + name.substr(0, 64) + "\" (models: " + join(repository.loaded()) +
           ")";
}

void HttpServer::Impl::model_metadata(const std::string& name, httplib::Response& res) {
    auto runner = repository.get(name);
    if (!runner) return reply_error(res, 404, missing_model(name));
    const ModelSignature& s = runner->signature();
    std::string body = "{\"name\":";
    append_json_string(body, name);
    body += ",\"versions\":[\"1\"],\"platform\":";
    append_json_string(body, runner->platform());
    auto tensors = [&](const char* key, const std::vector<embed::TensorInfo>& infos) {
        body += ",\"";
        body += key;
        body += "\":[";
        for (size_t k = 0; k < infos.size(); ++k) {
            body += k ? ",{\"name\":" : "{\"name\":";
            append_json_string(body, infos[k].name);
            body += ",\"datatype\":\"";
            body += datatype_name(infos[k].dtype);
            body += "\",\"shape\":[";
            for (size_t i = 0; i < infos[k].shape.size(); ++i) {
                if (i) body += ',';
                append_json_number(body, infos[k].shape[i]);
            }
            body += "]}";
        }
        body += ']';
    };
    tensors("inputs", s.inputs);
    tensors("outputs", s.outputs);
    const ModelConfig& c = runner->config();
    body += ",\"parameters\":{\"max_batch_size\":" + std::to_string(c.max_batch_size) +
            ",\"max_queue_delay_us\":" + std::to_string(c.max_queue_delay_us) +
            ",\"instances\":" + std::to_string(c.instances) +
            ",\"deterministic\":" + (c.deterministic ? "true" : "false") + "}}";
    reply_json(res, 200, std::move(body));
}

void HttpServer::Impl::infer(const std::string& name, const httplib::Request& req,
                             httplib::Response& res, std::string_view body) {
    auto arrival = Clock::now();
    auto runner = repository.get(name);
    ModelMetrics& m = metrics.model(runner ? name : "(unknown)");
    struct InFlight {
        Metrics& server;
        ModelMetrics& model;
        InFlight(Metrics& s, ModelMetrics& m) : server(s), model(m) {
            model.in_flight.fetch_add(1, std::memory_order_relaxed);
        }
        ~InFlight() {
            server.in_flight.fetch_sub(1, std::memory_order_relaxed);
            model.in_flight.fetch_sub(1, std::memory_order_relaxed);
        }
    };
    size_t before = size_t(metrics.in_flight.fetch_add(1, std::memory_order_relaxed));
    InFlight in_flight(metrics, m);
    auto finish = [&](int status) {
        m.count_status(status);
        m.latency.observe(std::chrono::duration<double>(Clock::now() - arrival).count());
    };
    if (!runner) {
        reply_error(res, 404, missing_model(name));
        return finish(404);
    }
    if (before >= options.max_concurrent_requests) {
        metrics.rejected_overload.fetch_add(1, std::memory_order_relaxed);
        res.set_header("Retry-After", "1");
        reply_error(res, 503,
                    "model \"" + name + "\": " + std::to_string(before) +
                        " inference requests in flight, the limit is " +
                        std::to_string(options.max_concurrent_requests) +
                        " (--max-concurrent-requests); retry later");
        return finish(503);
    }
    try {
        int64_t json_length = -1;
        if (req.has_header("Inference-Header-Content-Length")) {
            std::string v = req.get_header_value("Inference-Header-Content-Length");
            if (!parse_int64(v, json_length))
                throw RequestError(400, "model \"" + name +
                                            "\": Inference-Header-Content-Length must be a "
                                            "whole number >= 0, got \"" +
                                            v.substr(0, 32) + "\"");
        }
        InferRequest request = decode_infer_request(body, json_length, runner->signature());
        int64_t timeout_us = options.request_timeout_ms * 1000;
        if (req.has_header("Inference-Timeout-Us")) {
            std::string v = req.get_header_value("Inference-Timeout-Us");
            int64_t t;
            if (!parse_int64(v, t))
                throw RequestError(400, "model \"" + name +
                                            "\": Inference-Timeout-Us must be a whole number of "
                                            "microseconds >= 0, got \"" +
                                            v.substr(0, 32) + "\"");
            timeout_us = std::min(timeout_us, t);
        }
        if (request.timeout_us >= 0) timeout_us = std::min(timeout_us, request.timeout_us);
        auto deadline = arrival + std::chrono::microseconds(timeout_us);
        InferResult result;
        runner->infer(request, arrival, deadline, result);
        res.status = 200;
        res.body = std::move(result.body);
        if (result.json_length >= 0) {
            res.set_header("Content-Type", "application/octet-stream");
            res.set_header("Inference-Header-Content-Length", std::to_string(result.json_length));
        } else {
            res.set_header("Content-Type", JSON_TYPE);
        }
        finish(200);
    } catch (const RequestError& e) {
        reply_error(res, e.status(), e.what());
        finish(e.status());
    }
}

void HttpServer::Impl::repository_call(const std::vector<std::string>& parts,
                                       httplib::Response& res) {
    if (!options.model_control)
        return reply_error(res, 403,
                           "the model repository endpoints are disabled; start braid-serve with "
                           "--model-control to enable them");
    // parts: v2 repository index | v2 repository models NAME load|unload
    if (parts.size() == 3 && parts[2] == "index") {
        std::string body = "[";
        bool first = true;
        for (auto& e : repository.index()) {
            body += first ? "{\"name\":" : ",{\"name\":";
            first = false;
            append_json_string(body, e.name);
            body += ",\"version\":\"1\",\"state\":\"";
            body += e.ready ? "READY" : "UNAVAILABLE";
            body += "\"}";
        }
        return reply_json(res, 200, body + "]");
    }
    if (parts.size() == 5 && parts[2] == "models" && (parts[4] == "load" || parts[4] == "unload")) {
        const std::string& name = parts[3];
        try {
            if (parts[4] == "load") {
                repository.load(name);
            } else if (!repository.unload(name)) {
                return reply_error(res, 404, missing_model(name));
            }
        } catch (const RequestError& e) {
            return reply_error(res, e.status(), e.what());
        }
        return reply_json(res, 200, "{}");
    }
    reply_error(res, 404, "no such repository endpoint");
}

void HttpServer::Impl::route(const httplib::Request& req, httplib::Response& res,
                             std::string_view body) {
    auto parts = split_path(req.path);
    bool get = req.method == "GET" || req.method == "HEAD";
    bool post = req.method == "POST";
    auto wrong_method = [&](const char* allowed) {
        res.set_header("Allow", allowed);
        reply_error(res, 405,
                    req.method + " " + req.path + ": method not allowed (use " + allowed + ")");
    };
    if (parts.size() == 1 && parts[0] == "metrics") {
        if (!get) return wrong_method("GET");
        res.status = 200;
        res.body = metrics.render();
        res.set_header("Content-Type", "text/plain; version=0.0.4");
        return;
    }
    if (parts.empty() || parts[0] != "v2")
        return reply_error(res, 404, "no endpoint " + req.path.substr(0, 128));
    if (parts.size() == 1) {
        if (!get) return wrong_method("GET");
        std::string body = "{\"name\":\"braid-serve\",\"version\":";
        append_json_string(body, embed::version());
        body += ",\"extensions\":[\"binary_tensor_data\"";
        if (options.model_control) body += ",\"model_repository\"";
        return reply_json(res, 200, body + "]}");
    }
    if (parts[1] == "health" && parts.size() == 3 && (parts[2] == "live" || parts[2] == "ready")) {
        if (!get) return wrong_method("GET");
        if (parts[2] == "live") return reply_json(res, 200, "{\"live\":true}");
        if (draining.load()) return reply_error(res, 503, "the server is shutting down");
        return reply_json(res, 200, "{\"ready\":true}");
    }
    if (parts[1] == "repository") {
        if (!post) return wrong_method("POST");
        return repository_call(parts, res);
    }
    if (parts[1] == "models" && parts.size() >= 3) {
        const std::string& name = parts[2];
        size_t rest = 3;
        // /v2/models/NAME/versions/V/...: the one version, "1".
        if (parts.size() >= 5 && parts[3] == "versions") {
            if (parts[4] != "1")
                return reply_error(res, 404,
                                   "model \"" + name + "\" has no version \"" +
                                       parts[4].substr(0, 32) + "\" (versions: 1)");
            rest = 5;
        }
        if (parts.size() == rest) {
            if (!get) return wrong_method("GET");
            return model_metadata(name, res);
        }
        if (parts.size() == rest + 1 && parts[rest] == "ready") {
            if (!get) return wrong_method("GET");
            if (!repository.get(name)) return reply_error(res, 404, missing_model(name));
            if (draining.load()) return reply_error(res, 503, "the server is shutting down");
            return reply_json(res, 200, "{\"ready\":true}");
        }
        if (parts.size() == rest + 1 && parts[rest] == "infer") {
            if (!post) return wrong_method("POST");
            return infer(name, req, res, body);
        }
    }
    reply_error(res, 404, "no endpoint " + req.path.substr(0, 128));
}

HttpServer::HttpServer(const ServerOptions& options, Repository& repository, Metrics& metrics)
    : m_impl(std::make_unique<Impl>(options, repository, metrics)) {
    Impl& s = *m_impl;
    s.connections->max_threads = std::max<size_t>(1, options.max_connections);
    s.connections->on_full = [&s] {
        std::lock_guard lk(s.keeper_mutex);
        s.keeper_woken = true;
        s.keeper_cv.notify_one();
    };
    auto state = s.connections;
    metrics.set_connection_gauges(
        [state] {
            std::lock_guard lock(state->mutex);
            return int64_t(state->busy);
        },
        [state] {
            std::lock_guard lock(state->mutex);
            return int64_t(state->pending.size());
        });
    s.server.new_task_queue = [&s] {
        return new ConnectionQueue(s.connections, s.options.drain_timeout_s, s.drained);
    };
    s.server.set_payload_max_length(options.max_body_bytes);
    s.server.set_keep_alive_max_count(1u << 30);
    s.server.set_keep_alive_timeout(options.idle_timeout_s);
    s.server.set_read_timeout(options.read_timeout_s, 0);
    s.server.set_write_timeout(options.write_timeout_s, 0);
    s.server.set_tcp_nodelay(true);
    // While draining, every request that reaches a handler gets 503 and its connection closes,
    // so a client never has a request dropped on a connection the server closed unannounced.
    auto refuse_when_draining = [&s](httplib::Response& res) {
        if (!s.draining.load()) return false;
        res.set_header("Retry-After", "1");
        reply_error_and_close(res, 503, "the server is shutting down");
        return true;
    };
    auto handler = [&s, refuse_when_draining](const httplib::Request& req, httplib::Response& res) {
        RequestScope in_request(s.tracker);
        if (refuse_when_draining(res)) return;
        s.route(req, res, req.body);
    };
    // Bodies are read here rather than by httplib, which would parse a form-encoded body (what
    // `curl -d` declares), refuse one over 8 KiB, read and discard an announced body over the
    // limit before refusing it, and read a chunked body of any size. Here a body over
    // --max-body-bytes is refused before it is read (announced by Content-Length), or as soon as
    // the bytes read pass the limit (chunked), and the connection is closed after the 413.
    auto with_body = [&s, refuse_when_draining](const httplib::Request& req, httplib::Response& res,
                                                const httplib::ContentReader& read) {
        RequestScope in_request(s.tracker);
        if (refuse_when_draining(res)) return;
        std::string body;
        bool chunked =
            req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
        // A request with neither Content-Length nor chunked encoding has no body (RFC 9112,
        // 6.3); httplib would read one until the client closes the connection.
        if (!req.has_header("Content-Length") && !chunked) return s.route(req, res, body);
        auto over_limit = [&](const std::string& size) {
            reply_error_and_close(res, 413,
                                  "the request body (" + size + ") is over the limit of " +
                                      std::to_string(s.options.max_body_bytes) +
                                      " bytes (--max-body-bytes)");
        };
        if (!chunked) {
            const std::string& text = req.get_header_value("Content-Length");
            uint64_t length = 0;
            auto r = std::from_chars(text.data(), text.data() + text.size(), length);
            if (r.ec != std::errc() || r.ptr != text.data() + text.size())
                return reply_error_and_close(res, 400,
                                             "Content-Length \"" + text.substr(0, 32) +
                                                 "\" is not a number of bytes");
            if (length > s.options.max_body_bytes)
                return over_limit(std::to_string(length) + " bytes announced");
            body.reserve(length);
        }
        // The whole body must arrive within the read timeout, so that a client trickling it
        // cannot hold its connection's thread for longer.
        auto deadline =
            std::chrono::steady_clock::now() + std::chrono::seconds(s.options.read_timeout_s);
        bool over = false, late = false;
        if (!read([&](const char* data, size_t n) {
                if (n > s.options.max_body_bytes - body.size()) {
                    over = true;
                    return false; // stop reading: nothing more of the body is taken
                }
                if (std::chrono::steady_clock::now() > deadline) {
                    late = true;
                    return false;
                }
                body.append(data, n);
                return true;
            })) {
            if (over) return over_limit("chunked, more than the limit sent");
            if (late)
                return reply_error_and_close(
                    res, 408,
                    "the request body took longer than the read timeout of " +
                        std::to_string(s.options.read_timeout_s) + " s (--read-timeout-s)");
            return reply_error_and_close(res, 400,
                                         "the request body could not be read (malformed "
                                         "chunked encoding, or the client stopped sending)");
        }
        s.route(req, res, body);
    };
    // Every method reaches route(), which answers 404 / 405 itself.
    s.server.Get(".*", handler);
    s.server.Post(".*", with_body);
    s.server.Put(".*", with_body);
    s.server.Delete(".*", handler);
    s.server.Patch(".*", with_body);
    s.server.Options(".*", handler);
    // httplib's own errors (413 over the body limit, 400 for a malformed request) get a JSON
    // body too; responses that already have one keep it.
    s.server.set_error_handler([&s](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.get_header_value("Connection") == "close") return;
        std::string message;
        if (res.status == 413)
            message = "the request body is over the limit of " +
                      std::to_string(s.options.max_body_bytes) + " bytes (--max-body-bytes)";
        else if (res.status == 414)
            message = "the request URI is too long";
        else
            message = "HTTP status " + std::to_string(res.status) + " for " + req.method + " " +
                      req.path.substr(0, 128);
        reply_error(res, res.status, message);
    });
    s.server.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "unknown exception";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            reply_error(res, 500, "internal error: " + what);
        });
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
    Impl& s = *m_impl;
    int port;
    if (s.options.port == 0) {
        port = s.server.bind_to_any_port(s.options.host);
    } else {
        port = s.server.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1;
    }
    if (port <= 0)
        throw std::runtime_error("cannot listen on " + s.options.host + ":" +
                                 std::to_string(s.options.port) +
                                 " (address in use, or not an address of this machine)");
    s.server.raise_backlog(SOMAXCONN);
    return port;
}

bool HttpServer::serve() {
    // Returns when the accept loop ended (stop()) and the connections were drained.
    m_impl->keeper = std::thread([this] { m_impl->keep_slots(); });
    m_impl->server.listen_after_bind();
    m_impl->stop_keeper();
    m_impl->server.forget_socket();
    return m_impl->drained;
}

void HttpServer::stop() {
    m_impl->draining = true;
    m_impl->server.stop_accepting();
}

} // namespace braid::serve
