#include "graph/executable.h"
#include "base/determinism.h"
#include "base/run_control.h"

#include "base/error.h"
#include "base/log.h"
#include "base/poll.h"
#include "base/thread_pool.h"
#include "graph/graph_pass.h"
#include "graph/input_node.h"
#include "graph/kernel_registry.h"
#include "graph/schedule.h"

#include <algorithm>
#include <map>
#include <unordered_set>

namespace braid {

//! One operator in a comp node's sequence, with everything its dispatch needs precomputed.
struct Executable::Step {
    OperatorNode* opr;
    KernelFn kernel = nullptr; //!< resolved for the comp node's device at compile time
    std::vector<size_t> input_idx, output_idx;
    std::vector<const Tensor*> inputs;
    std::vector<Tensor*> outputs;
    //! (node index, steps that node must have finished) before this step may start.
    std::vector<std::pair<size_t, uint32_t>> waits;
    //! Waits the memory plan adds: a step reusing memory waits for its readers elsewhere.
    std::vector<std::pair<size_t, uint32_t>> memory_waits;
    //! Vars whose tensors the memory plan releases once this step finished.
    std::vector<size_t> release_after;
    bool notify = false; //!< a step on another comp node waits for this one
    //! Set after the step on a device queue when `notify`: readers on other comp nodes wait
    //! for it (a CUDA event), so the producer's thread never blocks on the device.
    DeviceMarker marker;
    bool dynamic = false; //!< some output shape is only known at execution
    //! bound_to_static_values(): the outputs are copies of `static_values`, the kernel never
    //! runs. Refreshed at each prepare(), under the graph's inference lock.
    bool static_bound = false;
    std::vector<Tensor> static_values;
    //! The inputs are part of the executable (false only for a step bound when compiled).
    bool inputs_wired = true;
    bool check_strided = false; //!< some input may arrive non-contiguous
    std::vector<std::pair<size_t, std::function<void(const Tensor&)>>> callbacks;
    std::vector<Tensor> contiguous_inputs; //!< scratch for inputs made contiguous
    //! The kernel's scratch memory: the memory plan's, or allocated by the first run that
    //! asks for more (a dynamic step) and kept.
    Workspace workspace;
};

//! The sequence of one comp node and its progress in the current run.
struct Executable::NodeSeq {
    CompNode cn;
    std::vector<Step> steps;
    //! Kernels enqueue work on a device queue (a CUDA stream) instead of running it.
    bool device_queue = false;
    //! (var index, output index) of fetched outputs produced here on a device queue: copied
    //! into host tensors at the end of each run.
    std::vector<std::pair<size_t, size_t>> fetches;
    //! Operators here that complete together with peers (see OperatorNode::peer_group).
    std::vector<OperatorNode*> collectives;
    //! (generation << 32) | steps finished in that generation.
    std::atomic<uint64_t> progress{0};
};

namespace {
constexpr uint64_t FAILED_STEPS = 0xffffffffu;
//! How long wait() polls for the end of a run before it sleeps (see there).
constexpr auto RUN_END_POLL = std::chrono::microseconds(200);

bool on_host(const Tensor& t) {
    return t.device().kind == Device::Kind::CPU;
}

//! A host copy of device tensor `t`, complete on return (ordered on `cn`'s queue).
Tensor copy_to_host(CompNode cn, const Tensor& t) {
    Tensor host(t.shape(), t.dtype(), cn.host_allocator());
    cn.copy(host, t);
    cn.device_sync();
    return host;
}
} // namespace

Executable::Executable(std::shared_ptr<ComputingGraph> graph,
                       const std::vector<OutputSpec>& outputs)
    : m_graph(std::move(graph)), m_outputs(outputs) {
    if (outputs.empty())
        BRAID_THROW(GraphError, "compile() needs at least one output var; got an empty list");
    for (auto& o : outputs) {
        if (!o.var) BRAID_THROW(GraphError, "compile(): output var is null");
        if (o.var->graph() != m_graph.get())
            BRAID_THROW(GraphError, "compile(): output var \"{}\" belongs to another graph",
                        o.var->name());
    }
    m_memory_plan = std::make_unique<MemoryPlan>(m_graph->options());
    build_sequences(outputs);
    std::lock_guard lk(m_graph->inference_mutex());
    prepare();
}

Executable::~Executable() {
    if (m_state == State::RUNNING) {
        try {
            wait();
        } catch (const std::exception& e) {
            logger()->warn("executable destroyed with a failed run: {}", e.what());
        }
    }
}

size_t Executable::var_index(VarNode* var) const {
    auto it = m_var_idx.find(var);
    BRAID_ASSERT(it != m_var_idx.end(), "var {} not part of the executable", var->name());
    return it->second;
}

void Executable::build_sequences(const std::vector<OutputSpec>& outputs) {
    // Operators the outputs depend on, in insertion order, then scheduled (graph/schedule.h).
    std::vector<OperatorNode*> stack;
    std::unordered_map<OperatorNode*, bool> needed;
    for (auto& o : outputs) stack.push_back(o.var->owner());
    while (!stack.empty()) {
        auto* opr = stack.back();
        stack.pop_back();
        if (needed[opr]) continue;
        needed[opr] = true;
        if (!bound_to_static_values(*opr))
            for (auto* in : opr->inputs()) stack.push_back(in->owner());
        for (auto* out : opr->outputs())
            for (auto* dep : m_graph->extra_deps(out)) stack.push_back(dep->owner());
    }
    std::vector<OperatorNode*> order;
    for (auto& opr : m_graph->operators())
        if (needed.count(opr.get())) order.push_back(opr.get());
    order = schedule_operators(*m_graph, order);

    // Compile-time passes (fusion) may replace operators of the order by new ones; a var they
    // removed is then an alias of the var that holds its value now.
    std::unordered_map<VarNode*, VarNode*> replaced;
    if (fusion_enabled(m_graph->options())) {
        std::unordered_set<VarNode*> pinned;
        for (auto& o : outputs) pinned.insert(o.var);
        for (auto* opr : order)
            for (auto* out : opr->outputs())
                for (auto* dep : m_graph->extra_deps(out)) pinned.insert(dep);
        // Passes insert operators into the graph: serialise them with other executables.
        std::lock_guard lk(m_graph->inference_mutex());
        replaced = run_compile_passes(*m_graph, order, pinned);
    }
    auto resolve = [&](VarNode* var) {
        auto it = replaced.find(var);
        return it == replaced.end() ? var : it->second;
    };

    for (auto* opr : order) {
        for (auto* out : opr->outputs()) {
            m_var_idx[out] = m_vars.size();
            m_vars.push_back(out);
        }
        if (auto* in = dynamic_cast<InputNode*>(opr)) m_inputs.push_back(in);
    }
    for (auto& [from, to] : replaced) m_var_idx[from] = var_index(to);
    m_tensors.resize(m_vars.size());
    m_fed.resize(m_inputs.size());

    // One sequence per comp node, in the order of first use.
    std::map<CompNode, size_t> node_idx;
    std::unordered_map<VarNode*, std::pair<size_t, uint32_t>> producer; // node, step index
    for (auto* opr : order) {
        auto [it, inserted] = node_idx.emplace(opr->comp_node(), m_nodes.size());
        if (inserted) {
            m_nodes.push_back(std::make_unique<NodeSeq>());
            m_nodes.back()->cn = opr->comp_node();
            m_nodes.back()->device_queue = opr->comp_node().device().kind != Device::Kind::CPU;
        }
        size_t ni = it->second;
        auto& seq = *m_nodes[ni];
        Step step;
        step.opr = opr;
        // An operator without a kernel for this device fails here, at compile time.
        step.kernel =
            resolve_kernel(*opr, opr->comp_node().device().kind, opr->comp_node().locator());
        std::map<size_t, uint32_t> waits;
        step.inputs_wired = std::all_of(opr->inputs().begin(), opr->inputs().end(),
                                        [&](VarNode* in) { return m_var_idx.count(in) > 0; });
        for (auto* in : step.inputs_wired ? opr->inputs() : VarNodeArray{}) {
            in = resolve(in);
            step.input_idx.push_back(var_index(in));
            auto [pn, ps] = producer.at(in);
            if (pn != ni) {
                waits[pn] = std::max(waits[pn], ps + 1);
                m_nodes[pn]->steps[ps].notify = true;
            }
            if (!opr->accepts_strided_inputs()) {
                auto* src = in->owner();
                size_t k = 0;
                while (src->output(k) != in) ++k;
                if (src->output_mem(k) != OutputMem::PLANNED) step.check_strided = true;
            }
        }
        step.waits.assign(waits.begin(), waits.end());
        for (auto* out : opr->outputs()) {
            step.output_idx.push_back(var_index(out));
            producer[out] = {ni, uint32_t(seq.steps.size())};
        }
        for (size_t i : step.input_idx) step.inputs.push_back(&m_tensors[i]);
        if (auto* in = dynamic_cast<InputNode*>(opr)) {
            size_t k = std::find(m_inputs.begin(), m_inputs.end(), in) - m_inputs.begin();
            step.inputs.push_back(&m_fed[k]); // ctx.input(0) of an InputNode (input_node.h)
        }
        for (size_t i : step.output_idx) step.outputs.push_back(&m_tensors[i]);
        step.contiguous_inputs.resize(step.inputs.size());
        if (!opr->peer_group().empty()) seq.collectives.push_back(opr);
        seq.steps.push_back(std::move(step));
    }

    m_fetched.resize(outputs.size());
    for (auto& o : outputs) {
        size_t idx = var_index(o.var);
        auto [ni, si] = producer.at(resolve(o.var));
        if (o.callback)
            m_nodes[ni]->steps[si].callbacks.emplace_back(idx, o.callback);
        else if (m_nodes[ni]->device_queue)
            m_nodes[ni]->fetches.emplace_back(idx, m_output_idx.size());
        m_output_idx.push_back(idx);
    }
}

void Executable::prepare() {
    // Shapes still unknown may depend on peers that exist by now: infer them again, this
    // time allowing rules to wait for peers.
    for (auto& node : m_nodes)
        for (auto& step : node->steps) {
            bool unknown = false;
            for (auto* out : step.opr->outputs()) unknown |= !out->shape_known();
            if (unknown) m_graph->infer_opr(step.opr, /*may_block=*/true);
        }
    for (auto& node : m_nodes)
        for (auto& step : node->steps) {
            step.dynamic = false;
            for (auto* out : step.opr->outputs())
                if (!out->shape_known()) step.dynamic = true;
            step.static_bound = bound_to_static_values(*step.opr);
            step.static_values.clear();
            if (step.static_bound)
                for (auto* out : step.opr->outputs())
                    step.static_values.push_back(*out->static_value());
            else if (!step.inputs_wired)
                BRAID_THROW(GraphError,
                            "{}: its output values were static when compiled and are not for the "
                            "shapes fed now; compile the graph again for these shapes",
                            step.opr->describe());
        }
    m_planned_input_shapes.clear();
    for (auto* in : m_inputs)
        m_planned_input_shapes.push_back(in->output(0)->shape_known() ? in->output(0)->shape()
                                                                      : TensorShape{});
    allocate_memory();
}

void Executable::allocate_memory() {
    // Memory planning lives in graph/memory_plan.cpp; here only its results are installed.
    std::vector<size_t> fetched;
    for (size_t i = 0; i < m_outputs.size(); ++i)
        if (!m_outputs[i].callback) fetched.push_back(m_output_idx[i]);
    m_memory_plan->plan(m_vars, m_var_idx, sequences(), fetched, m_tensors);
    for (size_t n = 0; n < m_nodes.size(); ++n)
        for (size_t s = 0; s < m_nodes[n]->steps.size(); ++s) {
            auto& step = m_nodes[n]->steps[s];
            const auto& hooks = m_memory_plan->hooks(n, s);
            step.memory_waits = hooks.waits;
            step.release_after = hooks.release_after;
            step.notify = step.notify || hooks.notify;
            step.workspace.assign(hooks.workspace);
        }
}

void Executable::feed_input(size_t i, Tensor value) {
    auto* in = m_inputs[i];
    if (value.empty())
        BRAID_THROW(GraphError, "input \"{}\": fed an empty tensor", in->input_name());
    if (value.dtype() != in->input_dtype())
        BRAID_THROW(DTypeError, "input \"{}\": fed a {} tensor, expected {} (shape {})",
                    in->input_name(), value.dtype().name(), in->input_dtype().name(),
                    value.shape().to_string());
    if (m_state == State::RUNNING) wait(); // the Input kernels may be reading the fed tensors
    m_fed[i] = std::move(value);
}

Executable& Executable::feed(const std::string& name, Tensor value) {
    for (size_t i = 0; i < m_inputs.size(); ++i)
        if (m_inputs[i]->input_name() == name) {
            feed_input(i, std::move(value));
            return *this;
        }
    std::string known;
    for (auto* in : m_inputs) known += (known.empty() ? "" : ", ") + in->input_name();
    BRAID_THROW(GraphError, "feed(): no input named \"{}\" in this executable (inputs: {})", name,
                known.empty() ? "none" : known);
}

bool Executable::takes(const SymbolVar& input) const {
    for (auto* in : m_inputs)
        if (in->output(0) == input.node()) return true;
    return false;
}

Executable& Executable::feed(const SymbolVar& input, Tensor value) {
    for (size_t i = 0; i < m_inputs.size(); ++i)
        if (m_inputs[i]->output(0) == input.node()) {
            feed_input(i, std::move(value));
            return *this;
        }
    BRAID_THROW(GraphError, "feed(): var \"{}\" is not an input of this executable",
                input.valid() ? input.name() : "null");
}

void Executable::execute() {
    if (m_state == State::RUNNING) wait();
    bool reshaped = false;
    for (size_t i = 0; i < m_inputs.size(); ++i) {
        auto* in = m_inputs[i];
        if (m_fed[i].empty())
            BRAID_THROW(GraphError, "input \"{}\" was never fed; call feed(\"{}\", tensor) first",
                        in->input_name(), in->input_name());
        if (m_fed[i].shape() != m_planned_input_shapes[i]) reshaped = true;
    }
    if (reshaped) {
        // The graph's shapes are shared by its executables: this one re-infers them for its own
        // fed shapes and plans from them under the lock; its runs then read only its tensors.
        std::lock_guard lk(m_graph->inference_mutex());
        FedShapeRollback rollback(m_inputs);
        for (size_t i = 0; i < m_inputs.size(); ++i) m_inputs[i]->set_fed_shape(m_fed[i].shape());
        try {
            m_graph->reinfer_all();
            prepare();
        } catch (...) {
            // Shapes this executable could not run with (a shape error, a plan over the memory
            // budget) must not stay in the shared graph, where the next executable compiled from
            // it would inherit them; and this one plans again on its next run.
            rollback.restore(*m_graph);
            m_planned_input_shapes.assign(m_inputs.size(), TensorShape{});
            throw;
        }
    }

    uint64_t gen = ++m_generation;
    // Deterministic for the graph, or for this run (the caller's thread is in the mode).
    m_deterministic = m_graph->options().deterministic || deterministic_kernels();
    m_failed.store(false);
    m_error = nullptr;
    m_state = State::RUNNING;
    m_running_nodes.store(uint32_t(m_nodes.size()));
    for (auto& node : m_nodes) {
        if (node->cn.is_inline()) continue;
        NodeSeq* seq = node.get();
        node->cn.dispatch([this, seq, gen] { run_node(*seq, gen); });
    }
    // Inline comp nodes ("cpu:default") run here, after the others were started.
    for (auto& node : m_nodes)
        if (node->cn.is_inline()) run_node(*node, gen);
}

bool Executable::wait_progress(NodeSeq& node, uint64_t target) {
    for (;;) {
        uint64_t v = node.progress.load(std::memory_order_acquire);
        if (v >= target) return !m_failed.load(std::memory_order_acquire);
        if (m_failed.load(std::memory_order_acquire)) return false;
        node.progress.wait(v, std::memory_order_acquire);
    }
}

void Executable::run_node(NodeSeq& seq, uint64_t gen) {
    uint64_t base = gen << 32;
    const RunControl* rc = m_run_control;
    RunControlScope rc_scope(rc);
    DeterministicScope mode(m_deterministic);
    for (size_t i = 0; i < seq.steps.size(); ++i) {
        auto& step = seq.steps[i];
        bool ok = true;
        for (auto* waits : {&step.waits, &step.memory_waits})
            for (auto [ni, count] : *waits)
                if (ok && !wait_progress(*m_nodes[ni], base | count)) ok = false;
        if (!ok || m_failed.load(std::memory_order_relaxed)) break;
        try {
            if (rc) rc->check();
            // Producers on device queues: this stream waits on the device for their markers; a
            // CPU comp node blocks until they are reached.
            for (auto* waits : {&step.waits, &step.memory_waits})
                for (auto [ni, count] : *waits)
                    seq.cn.wait_marker(m_nodes[ni]->steps[count - 1].marker);
            run_step(step);
            if (step.notify && seq.device_queue) seq.cn.record_marker(step.marker);
        } catch (...) {
            record_error(std::current_exception(), step.opr);
            break;
        }
        for (size_t idx : step.release_after) m_tensors[idx] = Tensor();
        seq.progress.store(base | (i + 1), std::memory_order_release);
        if (step.notify) seq.progress.notify_all();
    }
    if (seq.device_queue) finish_device_run(seq);
    if (m_failed.load()) {
        // Wake peers waiting on this node so they can stop too.
        seq.progress.store(base | FAILED_STEPS, std::memory_order_release);
        seq.progress.notify_all();
    }
    if (m_running_nodes.fetch_sub(1, std::memory_order_acq_rel) == 1) m_running_nodes.notify_all();
}

void Executable::finish_device_run(NodeSeq& seq) {
    // Fetched outputs become host tensors, and wait() returns only after the device finished.
    if (!m_failed.load(std::memory_order_acquire)) {
        try {
            // Collectives first: their waits for peers have deadlines, the stream's has none.
            for (auto* opr : seq.collectives) opr->wait_queued_work();
            for (auto [var_idx, out_idx] : seq.fetches) {
                const Tensor& dev = m_tensors[var_idx];
                Tensor& host = m_fetched[out_idx];
                if (host.empty() || host.shape() != dev.shape() || host.dtype() != dev.dtype())
                    host = Tensor(dev.shape(), dev.dtype(), seq.cn.host_allocator());
                seq.cn.copy(host, dev);
            }
            seq.cn.device_sync();
            return;
        } catch (...) {
            record_error(std::current_exception(), seq.steps.back().opr);
        }
    }
    try {
        seq.cn.device_sync(); // memory the failed run used is released only once idle
    } catch (const std::exception& e) {
        logger()->warn("comp node {} after a failed run: {}", seq.cn.locator(), e.what());
    }
}

void Executable::run_step(Step& step) {
    auto* opr = step.opr;
    if (step.static_bound) {
        for (size_t k = 0; k < step.outputs.size(); ++k) {
            Tensor& out = *step.outputs[k];
            const Tensor& value = step.static_values[k];
            if (out.empty() || out.shape() != value.shape() || out.dtype() != value.dtype())
                out = Tensor(value.shape(), value.dtype(), opr->comp_node().allocator());
            opr->comp_node().copy(out, value);
        }
        return;
    }
    if (step.check_strided) {
        for (size_t i = 0; i < step.inputs.size(); ++i) {
            const Tensor& t = m_tensors[step.input_idx[i]];
            if (t.layout().is_contiguous()) {
                step.inputs[i] = &t;
            } else if (!on_host(t)) {
                Tensor c(t.shape(), t.dtype(), opr->comp_node().allocator());
                opr->comp_node().copy(c, t);
                step.contiguous_inputs[i] = std::move(c);
                step.inputs[i] = &step.contiguous_inputs[i];
            } else {
                step.contiguous_inputs[i] = t.contiguous();
                step.inputs[i] = &step.contiguous_inputs[i];
            }
        }
    }
    if (step.dynamic) {
        // Shapes known only now: infer them from the actual input tensors.
        size_t nin = step.inputs.size();
        std::vector<const TensorShape*> shapes(nin);
        for (size_t i = 0; i < nin; ++i) shapes[i] = &step.inputs[i]->shape();
        // Shape rules read values on the host: fetch the device values they need.
        std::vector<const Tensor*> values(step.inputs.begin(), step.inputs.end());
        std::vector<Tensor> host_values(nin);
        for (size_t i = 0; i < nin; ++i)
            if (opr->shape_needs_value(i) && !on_host(*values[i])) {
                host_values[i] = copy_to_host(opr->comp_node(), *values[i]);
                values[i] = &host_values[i];
            }
        InferCtx ictx(shapes.data(), values.data(), nin);
        std::vector<TensorShape> out_shapes(step.outputs.size());
        // Every input is known now; only an operator that binds its outputs itself (a Loop,
        // whose trip count only running it tells) may still leave their shapes open.
        bool ok = opr->infer_output_shapes(ictx, out_shapes.data());
        for (size_t k = 0; k < step.outputs.size() && !ok; ++k)
            BRAID_ASSERT(opr->output_mem(k) == OutputMem::BOUND,
                         "{}: shape inference failed with every input known", opr->describe());
        for (size_t k = 0; k < step.outputs.size() && ok; ++k)
            if (opr->output_mem(k) == OutputMem::PLANNED) {
                auto* out = opr->output(k);
                Tensor& t = *step.outputs[k];
                if (t.empty() || t.shape() != out_shapes[k] || t.dtype() != out->dtype())
                    t = Tensor(out_shapes[k], out->dtype(), opr->comp_node().allocator());
            }
    }
    ExecCtx ctx(step.inputs.data(), step.inputs.size(), step.outputs.data(), step.outputs.size(),
                &step.workspace);
    if (m_step_observer) [[unlikely]] {
        auto begin = std::chrono::steady_clock::now();
        step.kernel(*opr, ctx);
        m_step_observer(*opr, begin, std::chrono::steady_clock::now());
    } else {
        step.kernel(*opr, ctx);
    }
    // A strided input's contiguous host copy is released once its kernel ran (the next run
    // makes it again): kept, every such step held one for the executable's life (176 MiB of
    // the quantized segmentation model's run). A device copy may still be read by queued work.
    if (step.check_strided)
        for (auto& c : step.contiguous_inputs)
            if (!c.empty() && on_host(c)) c = Tensor();
    for (auto& [idx, cb] : step.callbacks) {
        const Tensor& t = m_tensors[idx];
        if (on_host(t))
            cb(t);
        else
            cb(copy_to_host(opr->comp_node(), t)); // callbacks always see host tensors
    }
}

void Executable::record_error(std::exception_ptr err, OperatorNode* opr) {
    // A run asked to stop fails for that reason, also where a wait inside a kernel (a
    // collective's) gave up at the run's deadline with an error of its own.
    if (m_run_control && m_run_control->stop_requested()) {
        try {
            m_run_control->check();
        } catch (...) {
            err = std::current_exception();
        }
    }
    // Every error leaving a kernel names its operator and comp node here, in one place.
    err = with_error_context(
        err, fmt::format("{} on {}", opr->describe(), opr->comp_node().locator()), opr->describe());
    {
        std::lock_guard lk(m_error_mutex);
        if (!m_error) m_error = err;
    }
    try {
        std::rethrow_exception(err);
    } catch (const CancelledError& e) {
        logger()->debug("{}", e.what()); // asked for: not an error of the model
    } catch (const DeadlineExceededError& e) {
        logger()->debug("{}", e.what());
    } catch (const std::exception& e) {
        logger()->error("{}", e.what());
    } catch (...) {
    }
    m_failed.store(true, std::memory_order_release);
    // Nodes waiting on any progress counter must notice the failure.
    for (auto& node : m_nodes) node->progress.notify_all();
}

void Executable::wait() {
    if (m_state != State::RUNNING) return;
    // A short run ends within the poll, and its end needs no wake-up of this thread: a run on
    // `cpu0` (its comp node's thread) cost 14 us more than on `cpu:default` (the calling
    // thread) for a 1-operator graph, and 45 us more for a 41 us convolution, with this thread
    // sleeping at once; 0.2-0.6 us with the poll. The comp nodes' threads may share this CPU:
    // it yields between polls. (A poll of the comp node's worker for its next run, tried too,
    // made a 2-thread run on cpu0 4x slower: 0.26 against 0.063 ms for the small MLP.)
    if (m_running_nodes.load(std::memory_order_acquire) != 0) {
        // Not on the CPU of the pool's worker: it polls there for the run's next region, and
        // this thread, woken at the run's end, would wait for its CPU until that poll ends
        // (0.27 ms a run for the small MLP on cpu0 at 2 threads, in some processes).
        if (on_pool_worker_cpu()) move_off_current_cpu();
        poll_for(
            RUN_END_POLL, [&] { return m_running_nodes.load(std::memory_order_acquire) == 0; },
            [] { return true; }, false);
    }
    for (;;) {
        uint32_t v = m_running_nodes.load(std::memory_order_acquire);
        if (v == 0) break;
        m_running_nodes.wait(v, std::memory_order_acquire);
    }
    m_state = State::DONE;
    if (m_error) {
        auto err = m_error;
        m_error = nullptr;
        m_state = State::NEVER_RUN; // outputs of a failed run are not readable
        std::rethrow_exception(err);
    }
}

const Tensor& Executable::output(size_t i) const {
    if (i >= m_outputs.size())
        BRAID_THROW(GraphError, "output index {} out of range: the executable has {} outputs", i,
                    m_outputs.size());
    auto* var = m_outputs[i].var;
    if (m_state == State::RUNNING)
        BRAID_THROW(GraphError, "output \"{}\" read before wait(): the run is still in flight",
                    var->name());
    if (m_state == State::NEVER_RUN)
        BRAID_THROW(GraphError, "output \"{}\" read before any successful execute() and wait()",
                    var->name());
    if (m_outputs[i].callback)
        BRAID_THROW(GraphError, "output \"{}\" was compiled with a callback; it is not fetched",
                    var->name());
    if (!m_fetched[i].empty()) return m_fetched[i]; // copied from a device
    return m_tensors[m_output_idx[i]];
}

const Tensor& Executable::output(const SymbolVar& var) const {
    for (size_t i = 0; i < m_outputs.size(); ++i)
        if (m_outputs[i].var == var.node()) return output(i);
    BRAID_THROW(GraphError, "var \"{}\" is not an output of this executable",
                var.valid() ? var.name() : "null");
}

std::vector<std::pair<CompNode, std::vector<OperatorNode*>>> Executable::sequences() const {
    std::vector<std::pair<CompNode, std::vector<OperatorNode*>>> res;
    for (auto& node : m_nodes) {
        std::vector<OperatorNode*> oprs;
        for (auto& s : node->steps) oprs.push_back(s.opr);
        res.emplace_back(node->cn, std::move(oprs));
    }
    return res;
}

size_t Executable::nr_operators() const {
    size_t n = 0;
    for (auto& node : m_nodes) n += node->steps.size();
    return n;
}

} // namespace braid
