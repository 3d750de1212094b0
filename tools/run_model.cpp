#include "tools/run_model.h"

#include "base/thread_pool.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_rendezvous.h"
#include "embed/embed_internal.h"
#include "onnx_import/onnx_import.h"
#include "serialization/npy.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <regex>
#include <set>
#include <thread>

namespace braid::tools {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

//! Error messages are printed on one line.
std::string one_line(std::string s) {
    std::replace(s.begin(), s.end(), '\n', ' ');
    return s;
}

//! Runs `fn`; any error but a ToolError becomes a ToolError with `code` and `prefix`.
template <typename Fn> auto stage(int code, const std::string& prefix, Fn&& fn) -> decltype(fn()) {
    try {
        return fn();
    } catch (const ToolError&) {
        throw;
    } catch (const std::exception& e) {
        throw ToolError(code, one_line(prefix + e.what()));
    }
}

//! The comp node of rank `rank` when ranks run as threads: cpuK -> cpu(K+rank),
//! cudaK -> cuda(K+rank); cpu:default stays (each rank's thread runs its own kernels).
std::string rank_comp_node(const std::string& base, int rank) {
    static const std::regex pattern(R"((cpu|cuda)(\d+)(:\d+)?)");
    std::smatch m;
    if (rank == 0 || !std::regex_match(base, m, pattern)) return base;
    return fmt::format("{}{}{}", m[1].str(), std::stoi(m[2].str()) + rank, m[3].str());
}

Tensor random_tensor(const TensorShape& shape, DType dtype, uint32_t seed) {
    std::mt19937 rng(seed);
    Tensor t(shape, dtype);
    size_t n = shape.total_nr_elems();
    if (dtype.is_float()) {
        std::uniform_real_distribution<double> dist(-1.0, 1.0);
        for (size_t i = 0; i < n; ++i) store_from_double(dtype, t.raw_ptr(), i, dist(rng));
    } else {
        std::uniform_int_distribution<int> dist(0, dtype == dtype::Bool() ? 1 : 9);
        for (size_t i = 0; i < n; ++i) store_from_double(dtype, t.raw_ptr(), i, dist(rng));
    }
    return t;
}

std::vector<ResolvedInput> resolve_inputs(const RunConfig& cfg, const std::vector<ModelIO>& ios,
                                          const std::vector<std::string>& shape_inputs) {
    std::string known;
    for (auto& io : ios) known += (known.empty() ? "" : ", ") + io.name;
    for (size_t i = 0; i < cfg.inputs.size(); ++i) {
        auto& spec = cfg.inputs[i];
        bool found = false;
        for (auto& io : ios) found |= io.name == spec.name;
        if (!found)
            throw ToolError(EXIT_USAGE,
                            fmt::format("--input {}: the model has no input named \"{}\" "
                                        "(inputs: {})",
                                        spec.name, spec.name, known.empty() ? "none" : known));
        for (size_t j = 0; j < i; ++j)
            if (cfg.inputs[j].name == spec.name)
                throw ToolError(EXIT_USAGE, fmt::format("--input {} given twice", spec.name));
    }
    std::vector<ResolvedInput> res;
    uint32_t seed = cfg.seed;
    auto budget = MemoryBudget::resolve(cfg.memory_budget);
    for (auto& io : ios) {
        ResolvedInput in;
        in.name = io.name;
        in.model_shape = io.shape_string();
        const InputSpec* spec = nullptr;
        for (auto& s : cfg.inputs)
            if (s.name == io.name) spec = &s;
        std::string what = fmt::format("input \"{}\": ", io.name);
        bool optional = io.kind == ValueKind::OPTIONAL || io.kind == ValueKind::OPTIONAL_SEQUENCE;
        bool sequence = io.kind == ValueKind::SEQUENCE || io.kind == ValueKind::OPTIONAL_SEQUENCE;
        if (spec && spec->none) {
            if (!optional)
                throw ToolError(EXIT_USAGE, fmt::format("--input {}=none: the input is a {}, not "
                                                        "an optional; it needs a value",
                                                        io.name, value_kind_name(io.kind)));
            in.source = "none";
            in.none = true;
        } else if (sequence) {
            // Each element from a file: NAME=A.npy,B.npy (one file: a sequence of one).
            if (!spec || spec->file.empty())
                throw ToolError(
                    EXIT_USAGE,
                    fmt::format("{}a sequence: give its elements with --input "
                                "{}=A.npy,B.npy,...{}",
                                what, io.name,
                                optional ? fmt::format(" or --input {}=none", io.name) : ""));
            in.source = spec->file;
            in.sequence = true;
            std::vector<std::string> files = spec->files;
            if (files.empty()) files.push_back(spec->file);
            for (size_t k = 0; k < files.size(); ++k) {
                std::string element = fmt::format("{}element {}: ", what, k);
                Tensor t = stage(EXIT_BAD_FILE, element, [&] { return read_npy(files[k]); });
                if (t.dtype() != io.dtype || !io.accepts(t.shape()))
                    throw ToolError(EXIT_BAD_FILE,
                                    fmt::format("{}{} holds {} {}, the model expects {} {}",
                                                element, files[k], t.dtype().name(),
                                                t.shape().to_string(), io.dtype.name(),
                                                io.shape_string()));
                in.elements.push_back(t);
            }
        } else if (spec && !spec->file.empty()) {
            in.source = spec->file;
            in.value = stage(EXIT_BAD_FILE, what, [&] { return read_npy(spec->file); });
            if (in.value.dtype() != io.dtype)
                throw ToolError(EXIT_BAD_FILE,
                                fmt::format("{}{} holds {}, the model expects {}", what, spec->file,
                                            in.value.dtype().name(), io.dtype.name()));
            if (!io.accepts(in.value.shape()))
                throw ToolError(EXIT_BAD_FILE,
                                fmt::format("{}{} has shape {}, the model expects {}", what,
                                            spec->file, in.value.shape().to_string(),
                                            io.shape_string()));
        } else if (std::count(shape_inputs.begin(), shape_inputs.end(), io.name)) {
            throw ToolError(
                EXIT_USAGE,
                fmt::format("{}the model reads its value as a shape argument, so a "
                            "random value does not do: give it with --input {}=FILE.npy "
                            "or --bind {}=V,...",
                            what, io.name, io.name));
        } else {
            TensorShape shape = io.default_shape;
            in.source = "random";
            if (spec && spec->shape) {
                shape = *spec->shape;
                auto dims = shape.dims();
                in.source = "random:";
                for (size_t i = 0; i < dims.size(); ++i)
                    in.source += (i ? "x" : "") + std::to_string(dims[i]);
                if (!io.accepts(shape))
                    throw ToolError(EXIT_USAGE,
                                    fmt::format("--input {}=random: shape {} does not fit the "
                                                "model's {}",
                                                io.name, shape.to_string(), io.shape_string()));
            }
            // The model's default shape is the file's doing, a --input shape the user's.
            int code = spec && spec->shape ? EXIT_USAGE : EXIT_BAD_FILE;
            stage(code, what, [&] {
                budget.check(shape.nr_bytes(io.dtype),
                             fmt::format("random {} {}", io.dtype.name(), shape.to_string()));
            });
            in.value = random_tensor(shape, io.dtype, seed++);
        }
        res.push_back(std::move(in));
    }
    return res;
}

//! Collects timed operator executions from every comp node thread.
class TraceCollector {
public:
    explicit TraceCollector(Clock::time_point origin) : m_origin(origin) {}
    void add(const OperatorNode& opr, int rank, Clock::time_point begin, Clock::time_point end) {
        TraceEvent e;
        e.name = opr.describe();
        e.type = opr.type_name();
        e.comp_node = opr.comp_node().locator();
        e.rank = rank;
        e.begin_us = std::chrono::duration<double, std::micro>(begin - m_origin).count();
        e.duration_us = std::chrono::duration<double, std::micro>(end - begin).count();
        std::lock_guard lk(m_mutex);
        m_events.push_back(std::move(e));
    }
    void add_iteration(size_t i, int rank, Clock::time_point begin, Clock::time_point end) {
        TraceEvent e;
        e.name = fmt::format("iteration {}", i);
        e.type = "iteration";
        e.comp_node = "host";
        e.rank = rank;
        e.begin_us = std::chrono::duration<double, std::micro>(begin - m_origin).count();
        e.duration_us = std::chrono::duration<double, std::micro>(end - begin).count();
        std::lock_guard lk(m_mutex);
        m_events.push_back(std::move(e));
    }
    std::vector<TraceEvent> take() {
        std::lock_guard lk(m_mutex);
        return std::move(m_events);
    }

private:
    Clock::time_point m_origin;
    std::mutex m_mutex;
    std::vector<TraceEvent> m_events;
};

//! Runs one loaded model through a context of the embedding API, as every caller does:
//! compile, warm-up, timed iterations, outputs.
RankResult run_rank(const RunConfig& cfg, int rank, embed::Model& model, double load_ms,
                    const std::vector<ResolvedInput>& inputs, Clock::time_point origin) {
    RankResult r;
    r.rank = rank;
    r.load_ms = load_ms;
    bool many_ranks = cfg.devices > 1 || !cfg.server.empty() || cfg.backend == "mpi";
    std::string prefix = many_ranks ? fmt::format("rank {}: ", rank) : "";
    auto t0 = Clock::now();
    // Compiling fails as a bad file (exit 3) when the model asks for more memory than it may,
    // or when an ONNX file imported for the fed inputs does not fit them.
    auto compile = [&](auto&& fn) {
        return stage(EXIT_RUN_FAILED, prefix + "compile: ", [&] {
            try {
                return fn();
            } catch (const embed::Error& e) {
                if (e.code() == embed::Code::OUT_OF_MEMORY)
                    throw ToolError(EXIT_BAD_FILE, one_line(prefix + "compile: " + e.what()));
                throw;
            } catch (const MemoryBudgetError& e) {
                throw ToolError(EXIT_BAD_FILE, one_line(prefix + "compile: " + e.what()));
            } catch (const SerializationError& e) {
                throw ToolError(EXIT_BAD_FILE, one_line(prefix + e.what()));
            }
        });
    };
    auto ctx = compile([&] { return model.create_context(); });
    for (auto& in : inputs) {
        auto view = [](const Tensor& t) {
            auto dims = t.shape().dims();
            return embed::TensorView{t.raw_ptr(), embed::to_embed(t.dtype()),
                                     std::vector<int64_t>(dims.begin(), dims.end()), t.nr_bytes()};
        };
        stage(EXIT_RUN_FAILED, prefix, [&] {
            if (in.none) {
                ctx->set_input_none(in.name);
            } else if (in.sequence) {
                std::vector<embed::TensorView> elements;
                for (auto& e : in.elements) elements.push_back(view(e));
                ctx->set_sequence_input(in.name, elements);
            } else {
                auto v = view(in.value);
                ctx->set_input(in.name, v.data, v.dtype, v.shape);
            }
            return 0;
        });
    }
    // The graph for these inputs (an ONNX model whose graph depends on the fed shapes or
    // shape-input values is imported for them now).
    Executable& exec = *compile([&] { return &ctx->impl().executable(); });
    r.compile_ms = ms_since(t0);
    const LoadedModel& loaded = ctx->impl().graph_model();
    // (A model whose outputs are all optionals without a value has no graph output.)
    r.comp_node =
        loaded.outputs.empty() ? "cpu:default" : loaded.outputs[0].var.comp_node().locator();
    stage(EXIT_RUN_FAILED, prefix, [&] {
        for (size_t i = 0; i < cfg.warmup; ++i) ctx->run();
        std::optional<TraceCollector> trace;
        if (!cfg.profile_path.empty()) {
            trace.emplace(origin);
            exec.set_step_observer([&](const OperatorNode& opr, Clock::time_point b,
                                       Clock::time_point e) { trace->add(opr, rank, b, e); });
        }
        for (size_t i = 0; i < cfg.iterations; ++i) {
            auto begin = Clock::now();
            ctx->run();
            auto end = Clock::now();
            r.iteration_ms.push_back(
                std::chrono::duration<double, std::milli>(end - begin).count());
            if (trace) trace->add_iteration(i, rank, begin, end);
        }
        if (trace) {
            exec.set_step_observer(nullptr);
            r.trace = trace->take();
        }
        // Read before braid-run copies the outputs for its report: the model's, not the tool's.
        r.memory = read_process_memory();
        for (size_t i = 0; i < loaded.outputs.size(); ++i)
            r.outputs.emplace_back(loaded.outputs[i].name, ctx->impl().output_tensor(i).copy());
        return 0;
    });
    std::set<const uint8_t*> constants;
    for (auto& opr : loaded.graph->operators()) {
        const Tensor* t = nullptr;
        if (auto* param = dynamic_cast<opr::SharedParam*>(opr.get())) t = param->param().get();
        if (auto* imm = dynamic_cast<opr::ImmutableTensor*>(opr.get())) t = &imm->value();
        if (t && t->raw_ptr() && constants.insert(t->raw_ptr()).second)
            r.constant_bytes += t->nr_bytes();
        std::string type = opr->type_name();
        r.has_subgraphs |= type == "If" || type == "Loop";
    }
    for (auto& node : exec.memory_report().nodes) {
        r.arena_bytes += node.arena_capacity_bytes;
        r.own_allocation_bytes += node.own_allocation_bytes;
    }
    if (cfg.mem_report) {
        if (auto report = planner_report(exec)) {
            r.memory_report = *report;
            r.planner_report = true;
        } else {
            std::vector<VarNode*> outs;
            for (auto& o : loaded.outputs) outs.push_back(o.var.node());
            r.memory_report = summarize_memory(exec, outs).to_string();
        }
    }
    return r;
}

LoadOptions load_options(const RunConfig& cfg, const std::string& comp_node,
                         const CollectiveBinding& binding) {
    LoadOptions opt;
    opt.comp_node = comp_node;
    opt.graph_options.enable_memory_plan = cfg.mem_plan;
    opt.graph_options.enable_fusion = cfg.fusion;
    opt.graph_options.deterministic = cfg.deterministic;
    opt.graph_options.memory_budget = cfg.memory_budget;
    opt.collective = binding;
    opt.input_values = cfg.bound_inputs;
    // An ONNX model is imported at the shapes fed to it (--input FILE.npy or random:SHAPE),
    // so that what the importer decides from shapes fits them rather than the placeholder
    // size 1 of a symbolic dim. A file that cannot be read is reported by resolve_inputs().
    if (onnx_import::is_onnx_path(cfg.model_path))
        for (auto& spec : cfg.inputs) {
            if (spec.shape) {
                opt.input_shapes[spec.name] = *spec.shape;
            } else if (!spec.file.empty() && spec.files.empty()) {
                try {
                    opt.input_shapes[spec.name] = read_npy(spec.file).shape();
                } catch (const std::exception&) {
                }
            }
        }
    return opt;
}

//! `--devices N`: N ranks as threads of this process, rank r on its own comp node (a
//! collective blocks its comp node's queue until its peers arrive, so ranks never share one).
//! Rank 0's model is already loaded; every other rank loads the file with its own binding.
std::vector<RankResult> run_ranks(const RunConfig& cfg, const std::string& comp_node,
                                  const CollectiveBinding& base, embed::Model& model0,
                                  double load0_ms, const std::vector<ResolvedInput>& inputs,
                                  Clock::time_point origin) {
    size_t n = cfg.devices;
    std::vector<RankResult> results(n);
    std::vector<std::exception_ptr> errors(n);
    std::vector<std::thread> threads;
    for (size_t r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
            try {
                if (r == 0) {
                    results[r] = run_rank(cfg, 0, model0, load0_ms, inputs, origin);
                    return;
                }
                CollectiveBinding binding = base;
                binding.rank = int(r);
                std::string cn = rank_comp_node(comp_node, int(r));
                auto t0 = Clock::now();
                auto model = stage(EXIT_BAD_FILE, fmt::format("rank {}: ", r), [&] {
                    return embed::open_model(cfg.model_path, load_options(cfg, cn, binding), true);
                });
                results[r] = run_rank(cfg, int(r), *model, ms_since(t0), inputs, origin);
            } catch (...) {
                errors[r] = std::current_exception();
            }
        });
    }
    for (auto& t : threads) t.join();
    // A rank that failed makes its peers fail too (their collectives lose a member); the
    // first failure in rank order is the one to report.
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    return results;
}

//! MPI launchers tell each process its rank and the world size through the environment.
std::optional<std::pair<int, int>> mpi_env_rank() {
    for (auto [rank_var, size_var] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                      std::pair{"PMI_RANK", "PMI_SIZE"}}) {
        const char* r = std::getenv(rank_var);
        const char* s = std::getenv(size_var);
        if (r && s) return std::pair{std::atoi(r), std::atoi(s)};
    }
    return std::nullopt;
}

//! Flag combinations that the parser cannot see; each is one line and exit status 2.
void check_rank_flags(const RunConfig& cfg) {
    bool mpi = cfg.backend == "mpi";
    if (cfg.devices > 1 && (!cfg.server.empty() || cfg.rank >= 0 || cfg.world_size > 0))
        throw ToolError(EXIT_USAGE, "--devices runs every rank in this process; it excludes "
                                    "--server, --rank and --world-size");
    if (cfg.devices > 1 && mpi)
        throw ToolError(EXIT_USAGE, "--backend mpi runs one rank per process; it excludes "
                                    "--devices (launch with mpirun -np N instead)");
    if (mpi) return; // rank and world size come from MPI; --server is optional
    if (cfg.rank >= 0 && cfg.world_size <= 0)
        throw ToolError(EXIT_USAGE, "--rank needs --world-size N (and --server HOST:PORT)");
    if (cfg.world_size > 0 && cfg.rank < 0)
        throw ToolError(EXIT_USAGE, "--world-size needs --rank R (and --server HOST:PORT)");
    if (cfg.rank >= 0 && cfg.server.empty())
        throw ToolError(EXIT_USAGE, "--rank and --world-size need --server HOST:PORT (or "
                                    "--backend mpi under mpirun)");
    if (!cfg.server.empty() && cfg.rank < 0)
        throw ToolError(EXIT_USAGE, "--server needs --rank R and --world-size N");
    if (cfg.world_size > 0 && cfg.rank >= cfg.world_size)
        throw ToolError(EXIT_USAGE, fmt::format("--rank {} is out of range for --world-size {}",
                                                cfg.rank, cfg.world_size));
}

/*!
 * The binding every rank of this process loads the model with:
 *  - `--devices N` (and the default, N = 1): rank 0 of N (run_ranks() sets the others), a
 *    group manager embedded in this process, the local backend unless --backend says;
 *  - `--server`: rank and world size from the flags, the braid-rendezvous at that address;
 *  - `--backend mpi`: rank and world size from MPI, the group manager that MPI rank 0 hosts
 *    (`rendezvous` is set), or the braid-rendezvous of --server.
 */
CollectiveBinding rank_binding(const RunConfig& cfg,
                               std::unique_ptr<comm::MpiRendezvous>& rendezvous) {
    CollectiveBinding binding;
    binding.backend = cfg.backend.empty() ? "local" : cfg.backend;
    binding.server = cfg.server;
    if (cfg.backend == "mpi") {
        if (!mpi_env_rank())
            throw ToolError(EXIT_USAGE,
                            "--backend mpi: no MPI launcher environment (OMPI_COMM_WORLD_RANK, "
                            "PMI_RANK); run under mpirun -np N");
        stage(EXIT_RUN_FAILED, "--backend mpi: ", [&] {
            if (cfg.server.empty()) {
                rendezvous = std::make_unique<comm::MpiRendezvous>();
                binding.group_client = rendezvous->client();
            }
            binding.rank = comm::mpi_world_rank();
            binding.world_size = comm::mpi_world_size();
            return 0;
        });
        if (cfg.rank >= 0 && cfg.rank != binding.rank)
            throw ToolError(EXIT_USAGE, fmt::format("--rank {} differs from this process's MPI "
                                                    "rank {}",
                                                    cfg.rank, binding.rank));
        if (cfg.world_size > 0 && cfg.world_size != binding.world_size)
            throw ToolError(EXIT_USAGE, fmt::format("--world-size {} differs from the MPI world "
                                                    "size {}",
                                                    cfg.world_size, binding.world_size));
    } else if (!cfg.server.empty()) {
        binding.rank = cfg.rank;
        binding.world_size = cfg.world_size;
    } else {
        binding.rank = 0;
        binding.world_size = int(cfg.devices);
        binding.group_client = std::make_shared<comm::InProcessGroupClient>();
    }
    return binding;
}

//! The end of an MPI run that hosts its own group manager: every rank waits for the others
//! (with a deadline) before MPI rank 0 stops the server they all talk to.
void finish_mpi_ranks(comm::MpiRendezvous& rendezvous) {
    stage(EXIT_RUN_FAILED, "--backend mpi: ", [&] {
        rendezvous.client()->group_barrier("braid-run:finished", uint32_t(rendezvous.world_size()),
                                           uint32_t(rendezvous.world_rank()));
        // Every rank has its barrier reply once all passed the MPI barrier.
        BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        return 0;
    });
}

} // namespace

void apply_launch_environment(RunConfig& cfg) {
    const char* server = std::getenv("BRAID_SERVER");
    const char* rank = std::getenv("BRAID_RANK");
    const char* world_size = std::getenv("BRAID_WORLD_SIZE");
    if (cfg.devices > 1 || cfg.backend == "mpi" || !server || !rank || !world_size) return;
    auto number = [](const char* name, const char* text, int low) {
        std::string s = text;
        if (s.empty() || s.size() > 7 || s.find_first_not_of("0123456789") != std::string::npos ||
            std::stoi(s) < low)
            throw ToolError(EXIT_USAGE, fmt::format("{}=\"{}\" (set by braid-launch) is not a "
                                                    "number >= {}",
                                                    name, s, low));
        return std::stoi(s);
    };
    if (cfg.server.empty()) cfg.server = server;
    if (cfg.rank < 0) cfg.rank = number("BRAID_RANK", rank, 0);
    if (cfg.world_size <= 0) cfg.world_size = number("BRAID_WORLD_SIZE", world_size, 1);
    if (cfg.backend.empty()) cfg.backend = "gloo";
    cfg.launched = true;
}

TensorShape parse_shape(const std::string& text, const std::string& what) {
    std::vector<size_t> dims;
    if (text.empty() || text == "scalar") return TensorShape{};
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t end = text.find_first_of("x,", pos);
        if (end == std::string::npos) end = text.size();
        std::string part = text.substr(pos, end - pos);
        if (part.empty() || part.size() > 12 ||
            !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
            throw ToolError(
                EXIT_USAGE,
                fmt::format("{}: bad shape \"{}\" (expected dims like 4x784)", what, text));
        dims.push_back(std::stoull(part));
        pos = end + 1;
    }
    if (dims.size() > TensorShape::MAX_NDIM)
        throw ToolError(EXIT_USAGE, fmt::format("{}: shape \"{}\" has more than {} dims", what,
                                                text, TensorShape::MAX_NDIM));
    return TensorShape(dims);
}

InputSpec parse_input_spec(const std::string& text) {
    size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
        throw ToolError(EXIT_USAGE,
                        fmt::format("--input \"{}\": expected NAME=FILE.npy, NAME=random or "
                                    "NAME=random:SHAPE",
                                    text));
    InputSpec spec;
    spec.name = text.substr(0, eq);
    std::string value = text.substr(eq + 1);
    if (value == "random") return spec;
    if (value.rfind("random:", 0) == 0) {
        spec.shape = parse_shape(value.substr(7), "--input " + spec.name);
        return spec;
    }
    if (value == "none") {
        spec.none = true;
        return spec;
    }
    spec.file = value;
    if (value.find(',') != std::string::npos)
        for (size_t pos = 0; pos <= value.size();) {
            size_t comma = std::min(value.find(',', pos), value.size());
            spec.files.push_back(value.substr(pos, comma - pos));
            pos = comma + 1;
        }
    return spec;
}

std::string ResolvedInput::description() const {
    if (none) return "none";
    if (sequence)
        return fmt::format("sequence of {}{}{}", elements.size(), elements.empty() ? "" : " ",
                           elements.empty() ? "" : elements[0].dtype().name());
    return fmt::format("{} {}", value.dtype().name(), value.shape().to_string());
}

std::pair<std::string, Tensor> parse_binding(const std::string& text) {
    size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
        throw ToolError(
            EXIT_USAGE,
            fmt::format("--bind \"{}\": expected NAME=V0,V1,... or NAME=FILE.npy", text));
    std::string name = text.substr(0, eq), value = text.substr(eq + 1);
    if (value.size() > 4 && value.compare(value.size() - 4, 4, ".npy") == 0) {
        try {
            return {name, read_npy(value)};
        } catch (const std::exception& e) {
            throw ToolError(EXIT_BAD_FILE, fmt::format("--bind {}: {}", name, e.what()));
        }
    }
    std::vector<std::string> items;
    for (size_t pos = 0; pos <= value.size();) {
        size_t comma = std::min(value.find(',', pos), value.size());
        items.push_back(value.substr(pos, comma - pos));
        pos = comma + 1;
    }
    bool is_float =
        value.find_first_of(".eE") != std::string::npos && value.find("inf") == std::string::npos;
    Tensor t(TensorShape{items.size()}, is_float ? dtype::Float32() : dtype::Int64());
    for (size_t i = 0; i < items.size(); ++i) {
        const std::string& item = items[i];
        size_t used = 0;
        try {
            if (is_float)
                t.ptr<float>()[i] = std::stof(item, &used);
            else
                t.ptr<int64_t>()[i] = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (item.empty() || used != item.size())
            throw ToolError(EXIT_USAGE,
                            fmt::format("--bind {}: \"{}\" is not a number", name, item));
    }
    return {name, t};
}

size_t RunResult::need_bytes() const {
    size_t bytes = ranks.empty() ? 0 : ranks[0].constant_bytes;
    for (auto& r : ranks) bytes += r.arena_bytes + r.own_allocation_bytes;
    for (auto& in : inputs) {
        bytes += in.value.nr_bytes();
        for (auto& e : in.elements) bytes += e.nr_bytes();
    }
    return bytes;
}

LatencyStats latency_stats(std::vector<double> samples) {
    LatencyStats s;
    s.count = samples.size();
    if (samples.empty()) return s;
    std::sort(samples.begin(), samples.end());
    auto rank = [&](double p) { // nearest-rank percentile
        size_t k = size_t(std::ceil(p * double(samples.size())));
        return samples[std::min(samples.size(), std::max<size_t>(k, 1)) - 1];
    };
    s.min = samples.front();
    s.max = samples.back();
    size_t n = samples.size();
    s.median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
    s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / double(n);
    s.p90 = rank(0.90);
    s.p99 = rank(0.99);
    return s;
}

RunResult run_model(const RunConfig& cfg) {
    RunResult result;
    result.memory_before = read_process_memory();
    check_rank_flags(cfg);
    // Declared before the model, so that the model (and its communicators) goes first.
    std::unique_ptr<comm::MpiRendezvous> rendezvous;
    CollectiveBinding binding = rank_binding(cfg, rendezvous);

    if (cfg.threads) set_kernel_threads(cfg.threads);
    result.kernel_threads = kernel_threads();
    // The embedding API's default, cpu:default (the calling thread, with the shared kernel
    // pool); ranks as threads need one comp node each: from --comp-node, else from cpu0.
    std::string comp_node = !cfg.comp_node.empty() ? cfg.comp_node
                            : cfg.devices > 1      ? "cpu0"
                                                   : "cpu:default";
    if (!comp_node.empty())
        stage(EXIT_USAGE, "--comp-node: ", [&] { return CompNode::load(comp_node); });
    for (size_t r = 1; r < cfg.devices; ++r)
        stage(EXIT_USAGE, fmt::format("--devices {}: rank {}: ", cfg.devices, r),
              [&] { return CompNode::load(rank_comp_node(comp_node, int(r))); });

    auto origin = Clock::now();
    auto model_ptr = stage(EXIT_BAD_FILE, "", [&] {
        return embed::open_model(cfg.model_path, load_options(cfg, comp_node, binding), true);
    });
    embed::Model& embedded = *model_ptr;
    const LoadedModel& model = embedded.impl().loaded;
    double load_ms = ms_since(origin);
    result.info = model.info;
    if (model.graph) // an ONNX model imported at run time has no graph yet (and no collectives)
        for (auto& opr : model.graph->operators())
            if (auto* desc = OperatorRegistry::instance().find(opr->type_name()))
                result.collectives += desc->rank_dependent;
    result.inputs =
        resolve_inputs(cfg, embedded.impl().input_io,
                       embedded.impl().variants ? embedded.impl().variants->shape_inputs()
                                                : std::vector<std::string>{});
    bool own_process = cfg.backend == "mpi" || !cfg.server.empty();
    if (own_process) {
        result.rank = binding.rank;
        result.world_size = binding.world_size;
        std::string manager =
            !cfg.server.empty() ? ", server " + cfg.server : ", group manager on MPI rank 0";
        result.note = fmt::format("rank {} of {} ({} backend{}){}", binding.rank,
                                  binding.world_size, binding.backend, manager,
                                  result.collectives ? ""
                                                     : ": the model has no collective "
                                                       "operators, so this rank runs alone");
        result.report = (cfg.backend != "mpi" && !cfg.launched) || binding.rank == 0;
        if (result.collectives && binding.backend == "local" && binding.world_size > 1)
            throw ToolError(EXIT_USAGE,
                            fmt::format("rank {} of {}: the local backend runs ranks as threads "
                                        "of one process (--devices N); ranks in processes of "
                                        "their own need --backend gloo, mpi (under mpirun) "
                                        "or nccl",
                                        binding.rank, binding.world_size));
    }
    if (cfg.devices == 1)
        result.ranks.push_back(
            run_rank(cfg, std::max(binding.rank, 0), embedded, load_ms, result.inputs, origin));
    else
        result.ranks = run_ranks(cfg, comp_node, binding, embedded, load_ms, result.inputs, origin);
    if (rendezvous) finish_mpi_ranks(*rendezvous);

    if (!cfg.profile_path.empty() && result.report) {
        std::vector<TraceEvent> all;
        for (auto& r : result.ranks) all.insert(all.end(), r.trace.begin(), r.trace.end());
        stage(EXIT_RUN_FAILED, "--profile: ", [&] {
            write_chrome_trace(cfg.profile_path, all);
            return 0;
        });
    }
    if (!cfg.output_dir.empty() && result.report) {
        stage(EXIT_RUN_FAILED, "--output-dir: ", [&] {
            std::filesystem::create_directories(cfg.output_dir);
            for (auto& [name, value] : result.ranks[0].outputs) {
                Tensor t = value;
                if (t.dtype() == dtype::BFloat16()) { // .npy has no bfloat16
                    Tensor f(t.shape(), dtype::Float32());
                    convert_elements(t.dtype(), t.raw_ptr(), f.dtype(), f.raw_ptr(),
                                     t.shape().total_nr_elems());
                    t = f;
                }
                std::string file = name;
                std::replace(file.begin(), file.end(), '/', '_');
                std::replace(file.begin(), file.end(), ':', '_');
                write_npy((std::filesystem::path(cfg.output_dir) / (file + ".npy")).string(), t);
            }
            return 0;
        });
    }
    return result;
}

void abort_mpi_job(int exit_code) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events) {
    // One track (tid) per comp node, one process (pid) per rank.
    std::map<std::pair<int, std::string>, int> tids;
    for (auto& e : events) tids.emplace(std::pair{e.rank, e.comp_node}, 0);
    int next = 0;
    for (auto& [key, tid] : tids) tid = next++;
    auto trace = nlohmann::ordered_json::array();
    std::set<int> ranks;
    for (auto& [key, tid] : tids) {
        ranks.insert(key.first);
        trace.push_back({{"ph", "M"},
                         {"name", "thread_name"},
                         {"pid", key.first},
                         {"tid", tid},
                         {"args", {{"name", key.second}}}});
    }
    for (int r : ranks)
        trace.push_back({{"ph", "M"},
                         {"name", "process_name"},
                         {"pid", r},
                         {"args", {{"name", fmt::format("rank {}", r)}}}});
    for (auto& e : events)
        trace.push_back({{"ph", "X"},
                         {"name", e.name},
                         {"cat", e.type},
                         {"pid", e.rank},
                         {"tid", tids.at({e.rank, e.comp_node})},
                         {"ts", e.begin_us},
                         {"dur", e.duration_us}});
    nlohmann::ordered_json doc = {{"displayTimeUnit", "ms"}, {"traceEvents", std::move(trace)}};
    std::ofstream f(path, std::ios::trunc);
    if (!f) throw ToolError(EXIT_RUN_FAILED, fmt::format("--profile: cannot create \"{}\"", path));
    f << doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    if (!f) throw ToolError(EXIT_RUN_FAILED, fmt::format("--profile: cannot write \"{}\"", path));
}

} // namespace braid::tools
