#include "collective/collective_comm.h"

#include "base/host_port.h"
#include "graph/operator_registry.h"

#include "base/error.h"
#include "base/log.h"
#include "collective/collective_modes.h"
#include "comm/communicator.h"
#include "graph/kernel_registry.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace braid::opr {

const char* collective_mode_name(CollectiveMode mode) {
    switch (mode) {
    case CollectiveMode::ALL_REDUCE_SUM:
        return "ALL_REDUCE_SUM";
    case CollectiveMode::ALL_REDUCE_MAX:
        return "ALL_REDUCE_MAX";
    case CollectiveMode::ALL_REDUCE_MIN:
        return "ALL_REDUCE_MIN";
    case CollectiveMode::BROADCAST:
        return "BROADCAST";
    case CollectiveMode::REDUCE_SUM:
        return "REDUCE_SUM";
    case CollectiveMode::ALL_GATHER:
        return "ALL_GATHER";
    case CollectiveMode::REDUCE_SCATTER_SUM:
        return "REDUCE_SCATTER_SUM";
    case CollectiveMode::GATHER:
        return "GATHER";
    case CollectiveMode::SCATTER:
        return "SCATTER";
    case CollectiveMode::ALL_TO_ALL:
        return "ALL_TO_ALL";
    }
    return "?";
}

namespace {

bool debug_collectives() {
    static const bool on = [] {
        const char* env = std::getenv("BRAID_DEBUG_COLLECTIVE");
        bool enabled = env && std::strcmp(env, "0") != 0 && *env;
        if (enabled && logger()->level() > spdlog::level::info)
            logger()->set_level(spdlog::level::info);
        return enabled;
    }();
    return on;
}

} // namespace

CollectiveComm::CollectiveComm(VarNode* input, CollectiveParam param, const OperatorConfig& config)
    : ParamOperator(std::move(param), config) {
    const auto& trait = mode_trait(m_param.mode);
    if (m_param.key.empty()) BRAID_THROW(GraphError, "CollectiveComm: the key is empty");
    if (m_param.nr_devices == 0)
        BRAID_THROW(ValueError, "CollectiveComm \"{}\": nr_devices must be at least 1",
                    m_param.key);
    if (!m_param.group_client)
        BRAID_THROW(GraphError, "CollectiveComm \"{}\": no group client given", m_param.key);
    bool wants_input = trait.rank_has_input(m_param.is_root);
    if (wants_input && !input)
        BRAID_THROW(GraphError, "CollectiveComm({}) \"{}\": this rank needs an input",
                    collective_mode_name(m_param.mode), m_param.key);
    if (!wants_input && input)
        BRAID_THROW(GraphError,
                    "CollectiveComm({}) \"{}\": a non-root rank takes no input (its output "
                    "shape comes from the root)",
                    collective_mode_name(m_param.mode), m_param.key);
    if (input) add_input(input);
    add_output();
    m_rank = m_param.rank >= 0 ? uint32_t(m_param.rank) : 0;
}

SymbolVar CollectiveComm::make(SymbolVar input, ComputingGraph& graph, CollectiveParam param,
                               const OperatorConfig& config) {
    OperatorConfig cfg = config;
    if (cfg.name.empty()) cfg.name = param.key;
    return graph
        .insert_opr(std::make_unique<CollectiveComm>(input.valid() ? input.node() : nullptr,
                                                     std::move(param), cfg))
        ->output(0);
}

void CollectiveComm::init_output_dtypes() {
    if (!comm::is_comm_dtype(m_param.dtype))
        BRAID_THROW(DTypeError, "{}: dtype {} cannot be communicated", describe(),
                    m_param.dtype.name());
    if (has_input() && input(0)->dtype() != m_param.dtype)
        BRAID_THROW(DTypeError, "{}: input \"{}\" is {}, but the collective was declared {}",
                    describe(), input(0)->name(), input(0)->dtype().name(), m_param.dtype.name());
    output(0)->set_dtype(m_param.dtype);
}

bool CollectiveComm::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    const TensorShape* in = has_input() ? ctx.shape(0) : nullptr;
    if (has_input() && !in) return false;
    return mode_trait(m_param.mode).output_shape(*this, in, out[0], ctx.may_block());
}

int CollectiveComm::inplace_input(size_t) const {
    return mode_trait(m_param.mode).inplace() && has_input() ? 0 : -1;
}

void CollectiveComm::join(const Tensor* input, const TensorShape& output) {
    auto membership =
        comm::join_group(m_param.group_client, m_param.backend, m_param.key, m_param.nr_devices,
                         m_param.is_root, m_param.rank, comp_node().id(), comp_node());
    m_comm = membership.communicator;
    m_rank = membership.info.rank;
    m_root = membership.info.root_rank;
    Device::Kind memory = comp_node().device().kind;
    if (m_comm->buffer_kind() != memory) {
        auto comm = std::move(m_comm);
        BRAID_THROW(CommError,
                    "{}: backend \"{}\" works on {} memory, but the operator runs on comp node {} "
                    "({} memory); use backend \"nccl\" on CUDA comp nodes and \"local\" or "
                    "\"mpi\" on CPU ones",
                    describe(), m_param.backend, device_kind_name(comm->buffer_kind()),
                    comp_node().locator(), device_kind_name(memory));
    }
    if (mode_trait(m_param.mode).rooted() && (m_rank == m_root) != m_param.is_root)
        BRAID_THROW(CommError,
                    "{}: rank {} was built as {} but the group's root is rank {}; rooted modes "
                    "need is_root = true on exactly one peer",
                    describe(), m_rank, m_param.is_root ? "root" : "non-root", m_root);
    if (m_param.check_consistency) check_peers(input, output);
}

void CollectiveComm::check_peers(const Tensor* input, const TensorShape& output) {
    // Each rank publishes what it is about to do; every rank compares all of them, so a
    // mismatch is the same error everywhere instead of a hang or corrupted data. Mode, dtype
    // and group size must agree everywhere; input shapes among the ranks that have inputs
    // (only the root, for BROADCAST and SCATTER). Checks are numbered: the first run checks,
    // and so does every later run whose input shape changed (a re-inference), so steady-state
    // runs pay nothing.
    std::string header =
        fmt::format("mode {} dtype {} nr_devices {}", collective_mode_name(m_param.mode),
                    m_param.dtype.name(), m_param.nr_devices);
    std::string shape = input ? input->shape().to_string() : "-";
    std::string mine = header + "\n" + shape;
    uint64_t check = m_checks + 1;
    auto slot = [&](uint64_t n, uint32_t r) {
        return fmt::format("{}:check:{:016x}:{}:{}", m_param.key, m_comm->hash(), n, r);
    };
    m_param.group_client->set(slot(check, m_rank), mine);
    m_checks = check;
    m_checked_input = input ? input->shape() : TensorShape{};
    m_checked_output = output;
    std::vector<std::string> values(m_param.nr_devices);
    std::string late;
    for (uint32_t r = 0; r < m_param.nr_devices; ++r) {
        if (r == m_rank) {
            values[r] = mine;
            continue;
        }
        try {
            values[r] = m_param.group_client->get(slot(check, r));
        } catch (const TimeoutError& e) {
            if (check == 1) throw;
            // A peer that still runs with the shapes of the previous check never checks again:
            // name it with what it last published, instead of communicating with mismatched
            // buffers (wrong values on one side, a truncation error or abort on the other).
            std::string before = m_param.group_client->get(slot(check - 1, r));
            auto nl = before.find('\n');
            late +=
                fmt::format("{}rank {} (still at check {}: input {})", late.empty() ? "" : ", ", r,
                            check - 1, nl == std::string::npos ? "-" : before.substr(nl + 1));
        }
    }
    if (!late.empty())
        BRAID_THROW(
            CommError,
            "CollectiveComm \"{}\": rank {}'s input changed to {} (check {}), but peers did "
            "not check again: {}; every rank must run a collective with matching shapes",
            m_param.key, m_rank, shape, check, late);
    std::vector<std::string> headers, shapes;
    for (uint32_t r = 0; r < m_param.nr_devices; ++r) {
        const std::string& v = values[r];
        auto nl = v.find('\n');
        headers.push_back(v.substr(0, nl));
        shapes.push_back(nl == std::string::npos ? "-" : v.substr(nl + 1));
    }
    bool same = true;
    std::string first_shape;
    for (uint32_t r = 0; r < m_param.nr_devices; ++r) {
        same &= headers[r] == headers[0];
        if (shapes[r] == "-") continue;
        if (first_shape.empty()) first_shape = shapes[r];
        same &= shapes[r] == first_shape;
    }
    if (same) return;
    std::string detail;
    for (uint32_t r = 0; r < m_param.nr_devices; ++r)
        detail += fmt::format("; rank {}: {} input {}", r, headers[r], shapes[r]);
    BRAID_THROW(CommError, "CollectiveComm \"{}\": peers disagree{}", m_param.key, detail);
}

void CollectiveComm::execute(ExecCtx& ctx) {
    if (m_param.disable) {
        int v = m_param.disable->load();
        if (v == 1) return;
        if (v != 0)
            BRAID_THROW(ValueError, "{}: the disable flag is {}; expected 0 (run) or 1 (skip)",
                        describe(), v);
    }
    const Tensor* in = has_input() ? &ctx.input(0) : nullptr;
    Tensor& out = ctx.output(0);
    // Checked again when this rank's input or output shape changed: a rank without an input
    // (a BROADCAST or SCATTER non-root) sees the change in the output shape it learned from
    // the root.
    if (!m_comm)
        join(in, out.shape());
    else if (m_param.check_consistency &&
             ((in && in->shape() != m_checked_input) || out.shape() != m_checked_output))
        check_peers(in, out.shape());
    auto start = std::chrono::steady_clock::now();
    mode_trait(m_param.mode).execute(*m_comm, in, out, m_rank, m_root);
    if (debug_collectives()) {
        double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count();
        logger()->info("collective {} key={} rank={}/{} shape={} dtype={} time={:.1f}us",
                       collective_mode_name(m_param.mode), m_param.key, m_rank, m_param.nr_devices,
                       out.shape().to_string(), m_param.dtype.name(), us);
    }
}

// ---- kernels: CollectiveComm is device-agnostic (its communicator reads and writes the
// memory of the comp node's device: a stream backend queues on the comp node's stream), so
// its CUDA kernel is execute(), as its CPU kernel is.
namespace {
void collective_kernel(OperatorNode& opr, ExecCtx& ctx) {
    opr.execute(ctx);
}
} // namespace

void register_collective_kernels() {
    register_kernel("CollectiveComm", Device::Kind::CUDA, &collective_kernel);
}

void CollectiveComm::wait_queued_work() {
    if (m_comm) m_comm->synchronize(); // bounded by the communicator's deadline
}

CollectiveParam Group::param(CollectiveMode mode, DType dtype, const std::string& name) const {
    CollectiveParam p;
    p.key = key_prefix + ":" + (name.empty() ? std::to_string((*counter)++) : name);
    p.nr_devices = size;
    p.rank = rank;
    p.is_root = rank >= 0 && uint32_t(rank) == root;
    p.group_client = client;
    p.mode = mode;
    p.dtype = dtype;
    p.backend = backend;
    return p;
}

namespace {
OperatorConfig config_for(SymbolVar x, const Group& g) {
    if (g.comp_node.valid()) return OperatorConfig::on(g.comp_node);
    return x.valid() ? OperatorConfig::on(x.comp_node()) : OperatorConfig{};
}
SymbolVar with_input(SymbolVar x, const Group& g, CollectiveMode mode, const std::string& name) {
    return CollectiveComm::make(x, x.graph(), g.param(mode, x.dtype(), name), config_for(x, g));
}
} // namespace

SymbolVar all_reduce_sum(SymbolVar x, const Group& g, const std::string& name) {
    return with_input(x, g, CollectiveMode::ALL_REDUCE_SUM, name);
}
SymbolVar all_reduce_max(SymbolVar x, const Group& g, const std::string& name) {
    return with_input(x, g, CollectiveMode::ALL_REDUCE_MAX, name);
}
SymbolVar all_reduce_min(SymbolVar x, const Group& g, const std::string& name) {
    return with_input(x, g, CollectiveMode::ALL_REDUCE_MIN, name);
}
SymbolVar all_gather(SymbolVar x, const Group& g, const std::string& name) {
    return with_input(x, g, CollectiveMode::ALL_GATHER, name);
}
SymbolVar reduce_scatter_sum(SymbolVar x, const Group& g, const std::string& name) {
    return with_input(x, g, CollectiveMode::REDUCE_SCATTER_SUM, name);
}
SymbolVar all_to_all(SymbolVar x, const Group& g, const std::string& name) {
    return with_input(x, g, CollectiveMode::ALL_TO_ALL, name);
}
SymbolVar reduce_sum_to_root(SymbolVar x, const Group& g, const std::string& name) {
    return with_input(x, g, CollectiveMode::REDUCE_SUM, name);
}
SymbolVar gather_to_root(SymbolVar x, const Group& g, const std::string& name) {
    return with_input(x, g, CollectiveMode::GATHER, name);
}
SymbolVar broadcast_from_root(SymbolVar x, ComputingGraph& graph, const Group& g, DType dtype,
                              const std::string& name) {
    return CollectiveComm::make(x, graph, g.param(CollectiveMode::BROADCAST, dtype, name),
                                config_for(x, g));
}
SymbolVar scatter_from_root(SymbolVar x, ComputingGraph& graph, const Group& g, DType dtype,
                            const std::string& name) {
    return CollectiveComm::make(x, graph, g.param(CollectiveMode::SCATTER, dtype, name),
                                config_for(x, g));
}

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "comm/tcp_client.h"
#include "graph/param_io.h"

#include <algorithm>
#include <map>
#include <mutex>

namespace braid::opr {

namespace {
//! Largest group size a model may record or a binding may ask for.
constexpr int64_t MAX_COLLECTIVE_DEVICES = 1 << 20;
} // namespace

std::shared_ptr<comm::GroupClient> binding_client(const CollectiveBinding& b,
                                                  const std::string& what) {
    if (b.group_client) return b.group_client;
    if (b.server.empty()) {
        static const auto in_process = std::make_shared<comm::InProcessGroupClient>();
        return in_process;
    }
    auto address = parse_host_port(b.server);
    if (!address)
        BRAID_THROW(ValueError, "{}: the group manager address \"{}\" is not HOST:PORT", what,
                    b.server);
    static std::mutex mutex;
    static std::map<std::string, std::weak_ptr<comm::GroupClient>> clients;
    std::lock_guard lk(mutex);
    auto& slot = clients[b.server];
    auto client = slot.lock();
    if (!client) {
        client = std::make_shared<comm::TcpGroupClient>(address->host, address->port);
        slot = client;
    }
    return client;
}

static SymbolVarArray load_collective_comm(const OprLoadContext& ctx) {
    ctx.expect_inputs(0, 1);
    const ParamReader& r = ctx.params;
    const CollectiveBinding& bind = ctx.collective;
    const std::string& what = r.context();
    auto p = read_param<CollectiveParam>(r);
    int64_t recorded_devices = p.nr_devices;
    if (recorded_devices < 1 || recorded_devices > MAX_COLLECTIVE_DEVICES)
        BRAID_THROW(SerializationError, "{}: param \"nr_devices\" is {}; expected 1..{}", what,
                    recorded_devices, MAX_COLLECTIVE_DEVICES);
    int64_t recorded_rank = p.rank;
    if (recorded_rank < comm::UNASSIGNED_RANK || recorded_rank >= recorded_devices)
        BRAID_THROW(SerializationError,
                    "{}: param \"rank\" is {}; expected -1 (unassigned) or 0..{} for a group of {}",
                    what, recorded_rank, recorded_devices - 1, recorded_devices);
    bool recorded_root = p.is_root;
    std::string recorded_backend = p.backend;
    if (recorded_backend.empty()) r.throw_bad_value("backend", recorded_backend);

    // The binding wins over what the model records: the file was dumped from one rank's graph
    // and serves every rank.
    if (bind.world_size > MAX_COLLECTIVE_DEVICES)
        BRAID_THROW(SerializationError, "{}: the binding's world size {} is above {}", what,
                    bind.world_size, MAX_COLLECTIVE_DEVICES);
    p.nr_devices = uint32_t(bind.world_size > 0 ? bind.world_size : recorded_devices);
    p.backend = bind.backend.empty() ? recorded_backend : bind.backend;
    const auto& trait = mode_trait(p.mode);
    if (bind.rank < 0) {
        p.rank = int32_t(recorded_rank);
        p.is_root = recorded_root;
    } else {
        p.rank = bind.rank;
        // The root is the rank that was root when the model was dumped (rank 0 when that
        // rank was left to the group manager). A model dumped from a non-root rank does not
        // say which rank is the root.
        if (recorded_root)
            p.is_root = p.rank == std::max<int64_t>(recorded_rank, 0);
        else if (p.rank == recorded_rank || !trait.rooted())
            p.is_root = false;
        else
            BRAID_THROW(SerializationError,
                        "{}: {} was dumped from non-root rank {}, so rank {} cannot tell which "
                        "rank is its root; dump the root's graph",
                        what, collective_mode_name(p.mode), recorded_rank, p.rank);
    }
    if (p.rank >= 0 && uint32_t(p.rank) >= p.nr_devices)
        BRAID_THROW(SerializationError, "{}: rank {} is out of range for a world size of {}", what,
                    p.rank, p.nr_devices);
    if (bind.world_size > 0 && bind.world_size != recorded_devices)
        logger()->debug("{}: recorded for {} ranks, loaded for {} (the binding's world size)", what,
                        recorded_devices, bind.world_size);

    // BROADCAST and SCATTER non-roots take no input: a model dumped from the root gives one,
    // which this rank leaves unused.
    SymbolVar input;
    if (trait.rank_has_input(p.is_root)) {
        if (ctx.inputs.empty())
            BRAID_THROW(SerializationError,
                        "{}: rank {} is the root of {} and needs an input, but the model gives "
                        "none (it was dumped from a non-root rank); dump the root's graph",
                        what, p.rank, collective_mode_name(p.mode));
        input = ctx.input(0);
    }
    p.group_client = binding_client(bind, what);
    return {CollectiveComm::make(input, ctx.graph, std::move(p), ctx.config)};
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

void register_collective_comm_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("CollectiveComm", "collective_comm", dump_param<CollectiveComm>, load_collective_comm,
            /*example=*/nullptr, /*version=*/1, /*rank_dependent=*/true);
    // Always run: every rank takes part in the gradient collective, whatever its own inputs
    // need.
    register_grad_rule("CollectiveComm", CollectiveComm::grad_rule, /*always_run=*/true);
    register_collective_kernels();
}

} // namespace braid::opr
