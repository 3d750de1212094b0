#include "comm/gloo_communicator.h"

#include "base/error.h"
#include "base/log.h"
#include "comm/peer_liveness.h"
#include "comm/reduce_kernels.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#if BRAID_WITH_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#endif

namespace braid::comm {

namespace {

//! Host and port of "tcp://HOST:PORT" (IPv6 hosts in brackets); empty host otherwise.
std::string manager_host(const std::string& address) {
    const std::string scheme = "tcp://";
    if (address.rfind(scheme, 0) != 0) return {};
    std::string rest = address.substr(scheme.size());
    auto colon = rest.rfind(':');
    std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
    if (host.size() > 1 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    return host;
}

bool is_loopback(const std::string& host) {
    return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

//! The local address of a UDP socket "connected" to `host` (no packet is sent): the address
//! of the interface the routing table picks to reach it.
std::string route_source(const std::string& host) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* found = nullptr;
    if (int rc = getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0)
        BRAID_THROW(CommError,
                    "gloo: cannot resolve the group manager's host \"{}\" to pick the address to "
                    "listen on: {}; set BRAID_GLOO_HOST or BRAID_GLOO_IFACE",
                    host, gai_strerror(rc));
    std::string result;
    for (addrinfo* ai = found; ai && result.empty(); ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype, 0);
        if (fd < 0) continue;
        sockaddr_storage local{};
        socklen_t length = sizeof(local);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
            char text[INET6_ADDRSTRLEN] = {};
            const void* raw =
                local.ss_family == AF_INET6
                    ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                    : &reinterpret_cast<sockaddr_in*>(&local)->sin_addr;
            if (inet_ntop(local.ss_family, raw, text, sizeof(text))) result = text;
        }
        close(fd);
    }
    freeaddrinfo(found);
    if (result.empty())
        BRAID_THROW(CommError,
                    "gloo: no route to the group manager's host \"{}\" to pick the address to "
                    "listen on; set BRAID_GLOO_HOST or BRAID_GLOO_IFACE",
                    host);
    return result;
}

} // namespace

GlooAddress gloo_address(const std::string& manager_address) {
    GlooAddress address;
    if (const char* iface = std::getenv("BRAID_GLOO_IFACE"); iface && *iface) {
        address.iface = iface;
        return address;
    }
    if (const char* host = std::getenv("BRAID_GLOO_HOST"); host && *host) {
        address.hostname = host;
        return address;
    }
    std::string host = manager_host(manager_address);
    address.hostname = host.empty() || is_loopback(host) ? "127.0.0.1" : route_source(host);
    return address;
}

#if !BRAID_WITH_GLOO

bool gloo_available() {
    return false;
}

std::shared_ptr<Communicator> make_gloo_communicator(const CommunicatorDesc& desc) {
    BRAID_THROW(CommError,
                "gloo communicator (key \"{}\", rank {} of {}): the gloo backend is not built: "
                "this build did not find libgloo-dev at configure time (install it, e.g. with "
                "scripts/bootstrap.sh, and re-run cmake)",
                desc.key, desc.rank, desc.nranks);
}

#else

bool gloo_available() {
    return true;
}

namespace {

//! gloo's key-value store on a GroupClient: every key under `prefix`, every wait with the
//! deadline the store was made with.
class GroupClientStore final : public gloo::rendezvous::Store {
public:
    GroupClientStore(std::shared_ptr<GroupClient> client, std::string prefix, std::string what,
                     Deadline deadline)
        : m_client(std::move(client)), m_prefix(std::move(prefix)), m_what(std::move(what)),
          m_deadline(deadline) {}

    void set(const std::string& key, const std::vector<char>& data) override {
        m_client->set(m_prefix + key, std::string_view(data.data(), data.size()), left());
    }

    std::vector<char> get(const std::string& key) override { return get_within(key, left()); }

    void wait(const std::vector<std::string>& keys) override { wait(keys, left()); }

    void wait(const std::vector<std::string>& keys,
              const std::chrono::milliseconds& span) override {
        for (auto& key : keys) get_within(key, std::min<Duration>(span, left()));
    }

    //! Adds `delta` to the counter `key`; returns the new value.
    int64_t add(const std::string& key, int64_t delta) {
        return m_client->add(m_prefix + key, delta, left());
    }

private:
    Duration left() const { return std::max(m_deadline.remaining(), Duration(1)); }

    std::vector<char> get_within(const std::string& key, Duration span) {
        try {
            std::string value = m_client->get(m_prefix + key, span);
            return std::vector<char>(value.begin(), value.end());
        } catch (const TimeoutError& e) {
            // gloo's keys are a rank ("2") or "rank_2": say which peer never showed up.
            std::string rank = key.rfind("rank_", 0) == 0 ? key.substr(5) : key;
            throw TimeoutError(fmt::format("{}: rank {} never published its address (key "
                                           "\"{}\" at the group manager {}): {}",
                                           m_what, rank, m_prefix + key, m_client->address(),
                                           e.what()));
        }
    }

    std::shared_ptr<GroupClient> m_client;
    std::string m_prefix, m_what;
    Deadline m_deadline;
};

//! gloo writes to its peers with writev(), which raises SIGPIPE when a peer has died: left at
//! its default action, that would end this process before the call could fail and name the
//! peer. Ignoring it (only where the program kept the default) makes the write fail with EPIPE.
void ignore_sigpipe_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction current {};
        if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
            ::signal(SIGPIPE, SIG_IGN);
    });
}

//! One transport device (an event-loop thread) per listening address, shared by the
//! communicators of a process while any of them lives.
std::shared_ptr<gloo::transport::Device> device_for(const GlooAddress& address) {
    ignore_sigpipe_once();
    static std::mutex mutex;
    static std::map<std::string, std::weak_ptr<gloo::transport::Device>> devices;
    std::string key = address.iface.empty() ? "host:" + address.hostname : "iface:" + address.iface;
    std::lock_guard<std::mutex> lock(mutex);
    if (auto device = devices[key].lock()) return device;
    gloo::transport::tcp::attr attr;
    if (address.iface.empty())
        attr.hostname = address.hostname;
    else
        attr.iface = address.iface;
    std::shared_ptr<gloo::transport::Device> device;
    try {
        device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
        BRAID_THROW(CommError, "gloo: cannot listen on {} \"{}\": {}",
                    address.iface.empty() ? "address" : "interface",
                    address.iface.empty() ? address.hostname : address.iface, e.what());
    }
    devices[key] = device;
    return device;
}

template <typename T> void reduce_typed(T* out, const T* in, size_t n, ReduceOp op) {
    switch (op) {
    case ReduceOp::SUM:
        for (size_t i = 0; i < n; ++i) out[i] = T(out[i] + in[i]);
        break;
    case ReduceOp::MAX:
        for (size_t i = 0; i < n; ++i) out[i] = out[i] < in[i] ? in[i] : out[i];
        break;
    case ReduceOp::MIN:
        for (size_t i = 0; i < n; ++i) out[i] = in[i] < out[i] ? in[i] : out[i];
        break;
    }
}

//! gloo's reduction function, out = a op b (out may be a or b), for a dtype that is not
//! float16/bfloat16 (those reduce in float32 copies).
gloo::AllreduceOptions::Func reduce_function(DType dt, ReduceOp op) {
    return [dt, op](void* out, const void* a, const void* b, size_t n) {
        const void* other = b;
        if (out == b)
            other = a; // every op is commutative
        else if (out != a)
            std::memcpy(out, a, n * dt.size());
        switch (dt.enumv()) {
        case DTypeEnum::FLOAT32:
            if (op == ReduceOp::SUM)
                reduce_into(dt, op, out, other, n); // the vectorized kernel
            else
                reduce_typed(static_cast<float*>(out), static_cast<const float*>(other), n, op);
            break;
        case DTypeEnum::INT32:
            reduce_typed(static_cast<int32_t*>(out), static_cast<const int32_t*>(other), n, op);
            break;
        case DTypeEnum::INT64:
            reduce_typed(static_cast<int64_t*>(out), static_cast<const int64_t*>(other), n, op);
            break;
        case DTypeEnum::INT8:
            reduce_typed(static_cast<int8_t*>(out), static_cast<const int8_t*>(other), n, op);
            break;
        case DTypeEnum::UINT8:
            reduce_typed(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(other), n, op);
            break;
        default:
            reduce_into(dt, op, out, other, n);
        }
    };
}

/*!
 * Calls `fn(tag)` with an element type of `dt`'s size, so gloo's typed setters count
 * elements right (gloo only moves bytes; reductions go through reduce_function()).
 */
template <typename Fn> void with_element(DType dt, Fn&& fn) {
    switch (dt.size()) {
    case 1:
        return fn(uint8_t{});
    case 2:
        return fn(uint16_t{});
    case 4:
        return fn(uint32_t{});
    case 8:
        return fn(uint64_t{});
    default:
        BRAID_THROW(DTypeError, "gloo: dtype {} of {} bytes is not supported", dt.name(),
                    dt.size());
    }
}

//! Slots of send/recv (gloo's collectives use prefixes 1..n): the size header and the data.
constexpr uint8_t P2P_HEADER_SLOT = 0x70, P2P_DATA_SLOT = 0x71;

} // namespace

GlooCommunicator::GlooCommunicator(const CommunicatorDesc& desc)
    : Communicator(desc), m_prefix(fmt::format("braid.gloo.{:016x}/", desc.hash)) {
    if (!desc.group_client)
        BRAID_THROW(ValueError,
                    "gloo communicator (key \"{}\"): a group client is needed to meet the peers",
                    desc.key);
    Deadline deadline = Deadline::after(timeout());
    std::string what = fmt::format("gloo communicator (key \"{}\", rank {} of {})", desc.key,
                                   desc.rank, desc.nranks);
    GlooAddress address = gloo_address(desc.group_client->address());
    auto device = device_for(address);
    GroupClientStore store(desc.group_client, m_prefix, what, deadline);
    auto context = std::make_shared<gloo::rendezvous::Context>(int(desc.rank), int(desc.nranks));
    context->setTimeout(std::max(deadline.remaining(), Duration(1)));
    try {
        context->connectFullMesh(store, device);
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        BRAID_THROW(CommError, "{}: connecting to the peers (listening on {}) failed: {}", what,
                    device->str(), e.what());
    }
    context->setTimeout(timeout());
    m_context = std::move(context);
    logger()->debug("{}: connected, listening on {}", what, device->str());
    m_liveness_id =
        PeerLiveness::instance().join({desc.group_client, m_prefix, desc.rank,
                                       [this](const char* call) { return describe(call); }});
}

GlooCommunicator::~GlooCommunicator() {
    if (m_liveness_id) PeerLiveness::instance().leave(m_liveness_id);
    if (!m_context || broken()) return;
    // gloo closes its sockets with a reset, which drops bytes still queued for a peer: meet
    // once more, briefly, so that every peer has read everything before the sockets go.
    try {
        gloo::BarrierOptions options(m_context);
        options.setTag(m_tag++);
        options.setTimeout(std::min<Duration>(timeout(), std::chrono::seconds(5)));
        gloo::barrier(options);
    } catch (const std::exception& e) {
        logger()->debug("{}: the closing barrier failed: {}", describe("close"), e.what());
    }
}

std::string GlooCommunicator::missing_peers(const char* call, const std::string& reason) {
    auto& client = *m_desc.group_client;
    Deadline wait = Deadline::after(std::min(FAILURE_REPORT_WAIT, timeout() / 4));
    auto left = [&] { return std::max(wait.remaining(), Duration(1)); };
    try {
        std::vector<int64_t> beats(m_desc.nranks);
        for (uint32_t r = 0; r < m_desc.nranks; ++r)
            if (r != m_desc.rank) beats[r] = read_beat(client, m_prefix, r, left());
        PeerLiveness::instance().publish_failure(m_liveness_id, call, reason, wait);
        std::string missing, alive;
        std::vector<uint32_t> silent;
        for (uint32_t r = 0; r < m_desc.nranks; ++r) {
            if (r == m_desc.rank) continue;
            try {
                std::string seen = client.get(liveness_key(m_prefix, "failed", r), left());
                if (seen.starts_with(FAILED_ELSEWHERE))
                    alive += fmt::format("; peer rank {} is alive but failed in another call: {}",
                                         r, seen.substr(FAILED_ELSEWHERE.size()));
            } catch (const TimeoutError&) {
                silent.push_back(r);
            }
        }
        // A silent peer whose process raised its beat during the wait is blocked elsewhere.
        for (uint32_t r : silent) {
            if (read_beat(client, m_prefix, r, left()) > beats[r]) {
                std::string where = client.get(liveness_key(m_prefix, "waiting", r), left());
                alive += fmt::format("; peer rank {} is alive, blocked in {}", r, where);
            } else {
                missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
            }
        }
        if (missing.empty()) return alive;
        return fmt::format("; peer rank{} {} did not report this failure within {} (dead, or "
                           "never reached this call){}",
                           missing.find(',') == std::string::npos ? "" : "s", missing,
                           format_duration(wait.span()), alive);
    } catch (const Error& e) {
        return fmt::format("; the group manager {} could not be asked which peers are alive: {}",
                           client.address(), e.what());
    }
}

template <typename Body> void GlooCommunicator::run(const char* call, Body&& body) {
    Deadline deadline = Deadline::after(timeout());
    auto& liveness = PeerLiveness::instance();
    liveness.call_started(m_liveness_id, call);
    struct CallDone {
        PeerLiveness& liveness;
        uint64_t id;
        ~CallDone() { liveness.call_done(id); }
    } done{liveness, m_liveness_id};
    try {
        body(std::max(deadline.remaining(), Duration(1)));
        return;
    } catch (const CommError&) {
        m_context.reset(); // the peers fail now rather than at their deadlines
        throw;
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        std::string reason = e.what();
        // Close every connection, so that the peers blocked on this rank fail now instead of
        // at their deadlines.
        m_context.reset();
        std::string missing = missing_peers(call, reason);
        bool timed_out = reason.find("Timed out") != std::string::npos ||
                         reason.find("timeout") != std::string::npos;
        std::string message = fmt::format(
            "{} {}: {}{}; the communicator is unusable from now on", describe(call),
            timed_out ? fmt::format("timed out after {}", format_duration(deadline.span()))
                      : std::string("failed"),
            reason, missing);
        if (timed_out) throw TimeoutError(message);
        throw CommError(message);
    }
}

void GlooCommunicator::all_reduce_widened(const void* send, void* recv, size_t count, DType dt,
                                          ReduceOp op, Duration left) {
    m_scratch.resize(count);
    convert_elements(dt, send, dtype::Float32(), m_scratch.data(), count);
    gloo::AllreduceOptions options(m_context);
    options.setOutput(m_scratch.data(), count);
    options.setReduceFunction(reduce_function(dtype::Float32(), op));
    options.setTag(m_tag++);
    options.setTimeout(left);
    gloo::allreduce(options);
    convert_elements(dtype::Float32(), m_scratch.data(), dt, recv, count);
}

void GlooCommunicator::do_all_reduce(const void* send, void* recv, size_t count, DType dt,
                                     ReduceOp op) {
    if (!count) return;
    run("all_reduce", [&](Duration left) {
        if (dt.is_half()) return all_reduce_widened(send, recv, count, dt, op, left);
        with_element(dt, [&](auto t) {
            using T = decltype(t);
            gloo::AllreduceOptions options(m_context);
            if (send != recv) options.setInput(static_cast<T*>(const_cast<void*>(send)), count);
            options.setOutput(static_cast<T*>(recv), count);
            options.setReduceFunction(reduce_function(dt, op));
            options.setTag(m_tag++);
            options.setTimeout(left);
            gloo::allreduce(options);
        });
    });
}

void GlooCommunicator::do_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                                 uint32_t root) {
    if (!count) return;
    bool at_root = m_desc.rank == root;
    run("reduce", [&](Duration left) {
        if (dt.is_half()) {
            // float32 copies; gloo's ring reduce needs an output on every rank.
            m_scratch.resize(count);
            convert_elements(dt, send, dtype::Float32(), m_scratch.data(), count);
            gloo::ReduceOptions options(m_context);
            options.setOutput(m_scratch.data(), count);
            options.setRoot(int(root));
            options.setReduceFunction(reduce_function(dtype::Float32(), op));
            options.setTag(m_tag++);
            options.setTimeout(left);
            gloo::reduce(options);
            if (at_root) convert_elements(dtype::Float32(), m_scratch.data(), dt, recv, count);
            return;
        }
        with_element(dt, [&](auto t) {
            using T = decltype(t);
            // gloo's ring reduce writes partial results into every rank's output.
            void* out = recv;
            if (!at_root) {
                m_bytes.resize(count * dt.size());
                out = m_bytes.data();
            }
            gloo::ReduceOptions options(m_context);
            if (send != out) options.setInput(static_cast<T*>(const_cast<void*>(send)), count);
            options.setOutput(static_cast<T*>(out), count);
            options.setRoot(int(root));
            options.setReduceFunction(reduce_function(dt, op));
            options.setTag(m_tag++);
            options.setTimeout(left);
            gloo::reduce(options);
        });
    });
}

void GlooCommunicator::do_broadcast(const void* send, void* recv, size_t count, DType dt,
                                    uint32_t root) {
    if (!count) return;
    if (m_desc.rank == root && send != recv) std::memcpy(recv, send, count * dt.size());
    run("broadcast", [&](Duration left) {
        with_element(dt, [&](auto t) {
            using T = decltype(t);
            gloo::BroadcastOptions options(m_context);
            options.setOutput(static_cast<T*>(recv), count);
            options.setRoot(int(root));
            options.setTag(m_tag++);
            options.setTimeout(left);
            gloo::broadcast(options);
        });
    });
}

void GlooCommunicator::do_all_gather(const void* send, void* recv, size_t send_count, DType dt) {
    if (!send_count) return;
    auto* own = static_cast<uint8_t*>(recv) + m_desc.rank * send_count * dt.size();
    run("all_gather", [&](Duration left) {
        with_element(dt, [&](auto t) {
            using T = decltype(t);
            gloo::AllgatherOptions options(m_context);
            // In place (send is this rank's block of recv): no input, gloo reads recv.
            if (send != own) options.setInput(static_cast<T*>(const_cast<void*>(send)), send_count);
            options.setOutput(static_cast<T*>(recv), send_count * m_desc.nranks);
            options.setTag(m_tag++);
            options.setTimeout(left);
            gloo::allgather(options);
        });
    });
}

void GlooCommunicator::do_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                                         ReduceOp op) {
    if (!recv_count) return;
    size_t total = recv_count * m_desc.nranks, bytes = recv_count * dt.size();
    // An all-reduce of a copy, then this rank's block: twice the traffic of a ring
    // reduce-scatter, but gloo has no reduce-scatter on unbound buffers.
    m_bytes.resize(total * dt.size());
    std::memcpy(m_bytes.data(), send, total * dt.size());
    do_all_reduce(m_bytes.data(), m_bytes.data(), total, dt, op);
    std::memcpy(recv, m_bytes.data() + m_desc.rank * bytes, bytes);
}

void GlooCommunicator::do_gather(const void* send, void* recv, size_t send_count, DType dt,
                                 uint32_t root) {
    if (!send_count) return;
    bool at_root = m_desc.rank == root;
    size_t bytes = send_count * dt.size();
    const void* in = send;
    if (at_root && send == static_cast<uint8_t*>(recv) + root * bytes) {
        // gloo copies the root's input into its block of the output: not onto itself.
        m_bytes.assign(static_cast<const uint8_t*>(send),
                       static_cast<const uint8_t*>(send) + bytes);
        in = m_bytes.data();
    }
    run("gather", [&](Duration left) {
        with_element(dt, [&](auto t) {
            using T = decltype(t);
            gloo::GatherOptions options(m_context);
            options.setInput(static_cast<T*>(const_cast<void*>(in)), send_count);
            if (at_root) options.setOutput(static_cast<T*>(recv), send_count * m_desc.nranks);
            options.setRoot(int(root));
            options.setTag(m_tag++);
            options.setTimeout(left);
            gloo::gather(options);
        });
    });
}

void GlooCommunicator::do_scatter(const void* send, void* recv, size_t recv_count, DType dt,
                                  uint32_t root) {
    if (!recv_count) return;
    bool at_root = m_desc.rank == root;
    size_t bytes = recv_count * dt.size();
    run("scatter", [&](Duration left) {
        with_element(dt, [&](auto t) {
            using T = decltype(t);
            gloo::ScatterOptions options(m_context);
            if (at_root) {
                std::vector<T*> blocks(m_desc.nranks);
                auto* base = static_cast<uint8_t*>(const_cast<void*>(send));
                for (uint32_t r = 0; r < m_desc.nranks; ++r)
                    blocks[r] = reinterpret_cast<T*>(base + r * bytes);
                if (static_cast<void*>(blocks[root]) == recv) {
                    // gloo copies the root's block into its output: not onto itself.
                    m_bytes.assign(base + root * bytes, base + (root + 1) * bytes);
                    blocks[root] = reinterpret_cast<T*>(m_bytes.data());
                }
                options.setInputs(blocks, recv_count);
            }
            options.setOutput(static_cast<T*>(recv), recv_count);
            options.setRoot(int(root));
            options.setTag(m_tag++);
            options.setTimeout(left);
            gloo::scatter(options);
        });
    });
}

void GlooCommunicator::do_all_to_all(const void* send, void* recv, size_t count, DType dt) {
    if (!count) return;
    run("all_to_all", [&](Duration left) {
        with_element(dt, [&](auto t) {
            using T = decltype(t);
            gloo::AlltoallOptions options(m_context);
            options.setInput(static_cast<T*>(const_cast<void*>(send)), count * m_desc.nranks);
            options.setOutput(static_cast<T*>(recv), count * m_desc.nranks);
            options.setTag(m_tag++);
            options.setTimeout(left);
            gloo::alltoall(options);
        });
    });
}

void GlooCommunicator::do_send(const void* buf, size_t count, DType dt, uint32_t peer) {
    run("send", [&](Duration left) {
        // The size first, so that the receiver checks it before accepting the data.
        uint64_t bytes = count * dt.size();
        auto header = m_context->createUnboundBuffer(&bytes, sizeof(bytes));
        header->send(int(peer), gloo::Slot::build(P2P_HEADER_SLOT, 0));
        std::unique_ptr<gloo::transport::UnboundBuffer> data;
        if (bytes) {
            data = m_context->createUnboundBuffer(const_cast<void*>(buf), bytes);
            data->send(int(peer), gloo::Slot::build(P2P_DATA_SLOT, 0));
        }
        header->waitSend(left);
        if (data) data->waitSend(left);
    });
}

void GlooCommunicator::do_recv(void* buf, size_t count, DType dt, uint32_t peer) {
    run("recv", [&](Duration left) {
        uint64_t bytes = 0;
        auto header = m_context->createUnboundBuffer(&bytes, sizeof(bytes));
        header->recv(int(peer), gloo::Slot::build(P2P_HEADER_SLOT, 0));
        header->waitRecv(left);
        if (bytes != count * dt.size())
            BRAID_THROW(CommError,
                        "{}: rank {} sends {} bytes, this rank expects {} ({} elements of {})",
                        describe("recv"), peer, bytes, count * dt.size(), count, dt.name());
        if (!bytes) return;
        auto data = m_context->createUnboundBuffer(buf, bytes);
        data->recv(int(peer), gloo::Slot::build(P2P_DATA_SLOT, 0));
        data->waitRecv(left);
    });
}

std::shared_ptr<Communicator> make_gloo_communicator(const CommunicatorDesc& desc) {
    return std::make_shared<GlooCommunicator>(desc);
}

#endif

} // namespace braid::comm
