#include "collective_checker.h"

#include "base/determinism.h"
#include "memory/tensor.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <optional>

namespace braid::comm::test {

const char* collective_name(Collective c) {
    switch (c) {
    case Collective::ALL_REDUCE:
        return "all_reduce";
    case Collective::REDUCE:
        return "reduce";
    case Collective::BROADCAST:
        return "broadcast";
    case Collective::ALL_GATHER:
        return "all_gather";
    case Collective::REDUCE_SCATTER:
        return "reduce_scatter";
    case Collective::GATHER:
        return "gather";
    case Collective::SCATTER:
        return "scatter";
    case Collective::ALL_TO_ALL:
        return "all_to_all";
    case Collective::SEND_RECV:
        return "send_recv";
    }
    return "?";
}

std::string CollectiveCase::to_string() const {
    return fmt::format("{} dtype {} op {} count {} root {}{}", collective_name(collective),
                       dt.name(), reduce_op_name(op), count, root, in_place ? " in-place" : "");
}

std::vector<DType> comm_dtypes() {
    return {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int32(),
            dtype::Int64(),   dtype::Int8(),    dtype::Uint8()};
}

namespace {

bool is_reduction(Collective c) {
    return c == Collective::ALL_REDUCE || c == Collective::REDUCE ||
           c == Collective::REDUCE_SCATTER;
}

bool has_root(Collective c) {
    return c == Collective::REDUCE || c == Collective::BROADCAST || c == Collective::GATHER ||
           c == Collective::SCATTER;
}

bool has_in_place(Collective c) {
    return c != Collective::ALL_TO_ALL && c != Collective::SEND_RECV;
}

//! Rank `rank`'s input element `i`: small integers, so every dtype holds every sum of up to
//! 8 ranks exactly and the reference can demand equality.
double input_value(DType dt, uint64_t seed, uint32_t rank, size_t i) {
    int64_t v = int64_t((rank * 7 + i * 13 + seed * 5) % 17) - 8;
    return double(dt.enumv() == DTypeEnum::UINT8 ? v + 8 : v);
}

double reduce_values(ReduceOp op, double a, double b) {
    switch (op) {
    case ReduceOp::SUM:
        return a + b;
    case ReduceOp::MAX:
        return std::max(a, b);
    case ReduceOp::MIN:
        return std::min(a, b);
    }
    return a;
}

//! Elements in rank `rank`'s send and recv buffers for `c` in a group of `n`.
std::pair<size_t, size_t> buffer_sizes(const CollectiveCase& c, uint32_t n, uint32_t rank) {
    size_t k = c.count;
    switch (c.collective) {
    case Collective::ALL_GATHER:
        return {k, n * k};
    case Collective::GATHER:
        return {k, rank == c.root ? n * k : 0};
    case Collective::REDUCE_SCATTER:
        return {n * k, k};
    case Collective::SCATTER:
        return {rank == c.root ? n * k : 0, k};
    case Collective::ALL_TO_ALL:
        return {n * k, n * k};
    case Collective::REDUCE:
        return {k, rank == c.root ? k : 0};
    default:
        return {k, k};
    }
}

//! Input element `i` of rank `rank`'s send buffer (as the dtype stores it).
double stored_input(const CollectiveCase& c, uint32_t rank, size_t i) {
    std::vector<uint8_t> cell(8);
    store_from_double(c.dt, cell.data(), 0, input_value(c.dt, c.seed, rank, i));
    return load_as_double(c.dt, cell.data(), 0);
}

double reduced(const CollectiveCase& c, uint32_t n, size_t i) {
    double acc = stored_input(c, 0, i);
    for (uint32_t r = 1; r < n; ++r) acc = reduce_values(c.op, acc, stored_input(c, r, i));
    return acc;
}

//! The expected element `i` of rank `me`'s result.
double expected(const CollectiveCase& c, uint32_t n, uint32_t me, size_t i) {
    size_t k = c.count;
    switch (c.collective) {
    case Collective::ALL_REDUCE:
    case Collective::REDUCE:
        return reduced(c, n, i);
    case Collective::BROADCAST:
        return stored_input(c, c.root, i);
    case Collective::ALL_GATHER:
    case Collective::GATHER:
        return stored_input(c, uint32_t(i / k), i % k);
    case Collective::REDUCE_SCATTER:
        return reduced(c, n, me * k + i);
    case Collective::SCATTER:
        return stored_input(c, c.root, me * k + i);
    case Collective::ALL_TO_ALL:
        return stored_input(c, uint32_t(i / k), me * k + i % k);
    case Collective::SEND_RECV:
        return stored_input(c, (me + n - 1) % n, i);
    }
    return 0;
}

/*!
 * Device copies of a rank's host buffers, for backends whose buffers live on their comp
 * node's device (nccl): the host buffers are copied up before the call, host pointers into
 * them are mapped to the same offsets on the device, and everything is copied back after.
 */
class DeviceMirror {
public:
    DeviceMirror(const Communicator& comm, std::vector<std::vector<uint8_t>*> host)
        : m_cn(comm.comp_node()) {
        for (auto* h : host) {
            Tensor device;
            if (!h->empty()) {
                device = Tensor(TensorShape{h->size()}, dtype::Uint8(), m_cn.allocator());
                Tensor view = host_view(*h);
                m_cn.copy(device, view);
            }
            m_pairs.push_back({h, device});
        }
    }
    //! The device address of host address `p` (inside one of the buffers, or null).
    void* map(const void* p) const {
        auto* at = static_cast<const uint8_t*>(p);
        for (auto& [h, device] : m_pairs)
            if (!h->empty() && at >= h->data() && at < h->data() + h->size())
                return static_cast<uint8_t*>(device.raw_ptr()) + (at - h->data());
        return nullptr;
    }
    //! Copies every device buffer back into its host buffer (after the calls finished).
    void copy_back() {
        for (auto& [h, device] : m_pairs) {
            if (h->empty()) continue;
            Tensor view = host_view(*h);
            m_cn.copy(view, device);
        }
        m_cn.device_sync();
    }

private:
    static Tensor host_view(std::vector<uint8_t>& h) {
        return Tensor(Storage::wrap(h.data(), h.size(), Device::cpu()), 0,
                      TensorLayout(TensorShape{h.size()}, dtype::Uint8()));
    }
    CompNode m_cn;
    std::vector<std::pair<std::vector<uint8_t>*, Tensor>> m_pairs;
};

} // namespace

std::vector<CollectiveCase> sweep(Collective collective, uint32_t nranks) {
    std::vector<CollectiveCase> cases;
    std::vector<ReduceOp> ops = {ReduceOp::SUM};
    if (is_reduction(collective)) ops = {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MIN};
    std::vector<uint32_t> roots = {0};
    if (has_root(collective)) {
        roots.clear();
        for (uint32_t r = 0; r < nranks; ++r) roots.push_back(r);
    }
    uint64_t seed = 1;
    for (DType dt : comm_dtypes())
        for (ReduceOp op : ops)
            for (size_t count : {size_t(0), size_t(1), size_t(1000)})
                for (uint32_t root : roots)
                    for (bool in_place : {false, true}) {
                        if (in_place && !has_in_place(collective)) continue;
                        cases.push_back({collective, dt, op, count, root, in_place, seed++});
                    }
    return cases;
}

std::string run_and_check(Communicator& comm, const CollectiveCase& c) {
    uint32_t n = uint32_t(comm.nranks()), me = uint32_t(comm.rank());
    size_t es = c.dt.size(), k = c.count;
    auto [send_elems, recv_elems] = buffer_sizes(c, n, me);
    // Sentinel-filled recv, so elements a call should write but did not are caught.
    std::vector<uint8_t> send_buf(send_elems * es), recv_buf(recv_elems * es, 0x5a);
    for (size_t i = 0; i < send_elems; ++i)
        store_from_double(c.dt, send_buf.data(), i, input_value(c.dt, c.seed, me, i));
    const void* send = send_elems ? send_buf.data() : nullptr;
    void* recv = recv_elems ? recv_buf.data() : nullptr;
    if (c.in_place) {
        // NCCL's in-place forms: the send data sits where the call expects it inside recv.
        switch (c.collective) {
        case Collective::ALL_REDUCE:
        case Collective::REDUCE:
        case Collective::BROADCAST:
            if (c.collective == Collective::ALL_REDUCE || me == c.root) {
                if (!send_buf.empty())
                    std::memcpy(recv_buf.data(), send_buf.data(), send_buf.size());
                send = recv;
            }
            break;
        case Collective::ALL_GATHER:
        case Collective::GATHER:
            if (c.collective == Collective::ALL_GATHER || me == c.root) {
                if (!send_buf.empty())
                    std::memcpy(recv_buf.data() + me * k * es, send_buf.data(), send_buf.size());
                send = recv_buf.data() + me * k * es;
            }
            break;
        case Collective::REDUCE_SCATTER:
            recv = send_buf.data() + me * k * es;
            break;
        case Collective::SCATTER:
            if (me == c.root) {
                recv_buf.assign(send_buf.begin(), send_buf.end());
                send = recv_buf.data();
                recv = recv_buf.data() + me * k * es;
            }
            break;
        default:
            break;
        }
    }
    // A device backend gets device copies of the buffers at the same offsets; `recv` keeps
    // pointing into the host buffers, which hold the results once copied back.
    std::optional<DeviceMirror> mirror;
    const void* host_recv = recv;
    if (comm.buffer_kind() != Device::Kind::CPU) {
        mirror.emplace(comm, std::vector<std::vector<uint8_t>*>{&send_buf, &recv_buf});
        send = mirror->map(send);
        recv = mirror->map(recv);
    }
    switch (c.collective) {
    case Collective::ALL_REDUCE:
        comm.all_reduce(send, recv, k, c.dt, c.op);
        break;
    case Collective::REDUCE:
        comm.reduce(send, me == c.root ? recv : nullptr, k, c.dt, c.op, c.root);
        break;
    case Collective::BROADCAST:
        comm.broadcast(me == c.root ? send : nullptr, recv, k, c.dt, c.root);
        break;
    case Collective::ALL_GATHER:
        comm.all_gather(send, recv, k, c.dt);
        break;
    case Collective::REDUCE_SCATTER:
        comm.reduce_scatter(send, recv, k, c.dt, c.op);
        break;
    case Collective::GATHER:
        comm.gather(send, me == c.root ? recv : nullptr, k, c.dt, c.root);
        break;
    case Collective::SCATTER:
        comm.scatter(me == c.root ? send : nullptr, recv, k, c.dt, c.root);
        break;
    case Collective::ALL_TO_ALL:
        comm.all_to_all(send, recv, k, c.dt);
        break;
    case Collective::SEND_RECV:
        if (n == 1) return {};
        if (me % 2 == 0) {
            comm.send(send, k, c.dt, (me + 1) % n);
            comm.recv(recv, k, c.dt, (me + n - 1) % n);
        } else {
            comm.recv(recv, k, c.dt, (me + n - 1) % n);
            comm.send(send, k, c.dt, (me + 1) % n);
        }
        break;
    }
    if (mirror) {
        comm.synchronize();
        mirror->copy_back();
        recv = const_cast<void*>(host_recv);
    }
    size_t out_elems =
        c.collective == Collective::REDUCE_SCATTER || c.collective == Collective::SCATTER
            ? k
            : recv_elems;
    const uint8_t* out = static_cast<const uint8_t*>(recv);
    for (size_t i = 0; i < out_elems; ++i) {
        double want = expected(c, n, me, i);
        double got = load_as_double(c.dt, out, i);
        if (got != want)
            return fmt::format("{} on rank {} of {}: element {} is {}, expected {}", c.to_string(),
                               me, n, i, got, want);
    }
    return {};
}

std::string check_rank_ordered_sums(Communicator& comm) {
    DeterministicScope mode(true);
    uint32_t n = comm.nranks(), me = comm.rank();
    // Rank r's element i, as stored in `dt`.
    auto inputs = [&](DType dt, uint32_t r, size_t count) {
        std::vector<float> f(count);
        for (size_t i = 0; i < count; ++i)
            f[i] = float(std::sin(double(r * 7919 + i) * 0.37) * (1.0 + r * 0.3) * 1000.0);
        std::vector<uint8_t> b(count * dt.size());
        convert_elements(dtype::Float32(), f.data(), dt, b.data(), count);
        return b;
    };
    // The rank-ordered sum of every rank's buffer, rounded once to `dt`.
    auto ordered_sum = [&](DType dt, size_t count) {
        std::vector<float> acc(count), x(count);
        for (uint32_t r = 0; r < n; ++r) {
            auto b = inputs(dt, r, count);
            convert_elements(dt, b.data(), dtype::Float32(), x.data(), count);
            for (size_t i = 0; i < count; ++i) acc[i] = r == 0 ? x[i] : acc[i] + x[i];
        }
        std::vector<uint8_t> out(count * dt.size());
        convert_elements(dtype::Float32(), acc.data(), dt, out.data(), count);
        return out;
    };
    // Every rank makes every call whatever it found (a rank that stopped early would leave its
    // peers waiting); the first difference is reported at the end.
    std::string first;
    auto differs = [&](std::string what) {
        if (first.empty()) first = std::move(what);
    };
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()})
        for (size_t count : {size_t(1), size_t(7), size_t(1000), size_t(4099)})
            for (bool in_place : {false, true}) {
                size_t es = dt.size();
                std::string what = fmt::format("{} of {} {}{}", "{}", count, dt.name(),
                                               in_place ? " in place" : "");
                auto mine = inputs(dt, me, count), want = ordered_sum(dt, count);
                // all_reduce
                std::vector<uint8_t> out(count * es, 0x5a);
                if (in_place) out = mine;
                comm.all_reduce(in_place ? out.data() : mine.data(), out.data(), count, dt,
                                ReduceOp::SUM);
                if (out != want) differs(fmt::format(fmt::runtime(what), "all_reduce"));
                // reduce, to the first and the last rank
                for (uint32_t root : {uint32_t(0), n - 1}) {
                    std::vector<uint8_t> r(count * es, 0x5a);
                    if (in_place && me == root) r = mine;
                    comm.reduce(in_place && me == root ? r.data() : mine.data(), r.data(), count,
                                dt, ReduceOp::SUM, root);
                    if (me == root && r != want)
                        differs(fmt::format(fmt::runtime(what), fmt::format("reduce to {}", root)));
                }
                // reduce_scatter: every rank sends n blocks of `count`
                auto all = inputs(dt, me, n * count), all_want = ordered_sum(dt, n * count);
                std::vector<uint8_t> block(count * es, 0x5a);
                void* recv = in_place ? all.data() + me * count * es : block.data();
                comm.reduce_scatter(all.data(), recv, count, dt, ReduceOp::SUM);
                if (std::memcmp(recv, all_want.data() + me * count * es, count * es) != 0)
                    differs(fmt::format(fmt::runtime(what), "reduce_scatter"));
            }
    return first;
}

} // namespace braid::comm::test
