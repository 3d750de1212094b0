// Context: one request's bindings and its own Executable of the model's shared graph.
#include "embed_internal.h"

#include "base/determinism.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "graph/input_node.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace braid::embed {

namespace {

std::string names_of(const std::vector<TensorInfo>& infos) {
    std::string s;
    for (auto& t : infos) s += (s.empty() ? "" : ", ") + t.name;
    return s.empty() ? "none" : s;
}

std::vector<int64_t> dims_of(const TensorShape& s) {
    std::vector<int64_t> dims(s.ndim());
    for (size_t i = 0; i < s.ndim(); ++i) dims[i] = int64_t(s[i]);
    return dims;
}

} // namespace

// ---------------------------------------------------------------- Context::Impl
size_t Context::Impl::input_index(std::string_view name) const {
    auto& ins = model->impl().inputs;
    for (size_t i = 0; i < ins.size(); ++i)
        if (ins[i].name == name) return i;
    throw Error(
        Code::INVALID_ARGUMENT,
        fmt::format("the model has no input named \"{}\" (inputs: {})", name, names_of(ins)));
}

size_t Context::Impl::output_index(std::string_view name) const {
    auto& outs = model->impl().outputs;
    for (size_t i = 0; i < outs.size(); ++i)
        if (outs[i].name == name) return i;
    throw Error(
        Code::INVALID_ARGUMENT,
        fmt::format("the model has no output named \"{}\" (outputs: {})", name, names_of(outs)));
}

Executable& Context::Impl::executable() {
    auto& m = model->impl();
    // The variant changes only with what is bound anew, or with a shape input's value (which the
    // caller may change in place).
    bool rebound = dirty.size() != fed.size() || std::count(dirty.begin(), dirty.end(), true);
    if (m.variants && (!variant || rebound || m.variants->reads_values())) {
        require_bound("");
        auto v = m.variants->get(fed);
        if (v != variant) {
            variant = std::move(v);
            exec.reset();
        }
    }
    if (!exec) {
        exec = graph_model().compile();
        dirty.assign(fed.size(), true);
    }
    return *exec;
}

void Context::Impl::require_bound(std::string_view what) const {
    for (size_t i = 0; i < fed.size(); ++i) {
        if (fed[i].bound()) continue;
        const ModelIO& io = model->impl().input_io[i];
        throw Error(Code::FAILED_PRECONDITION,
                    fmt::format("{}input \"{}\" is not bound; call {}() first", what, io.name,
                                holds_sequence(io.kind) ? "set_sequence_input" : "set_input"));
    }
}

const LoadedModel& Context::Impl::graph_model() const {
    return model->impl().variants ? *variant : model->impl().loaded;
}

void Context::Impl::run(const RunOptions& options) {
    std::lock_guard lk(run_mutex);
    if (closed)
        throw Error(Code::FAILED_PRECONDITION,
                    "the context was destroyed before this run started; nothing was computed");
    require_bound("");
    auto& ios = model->impl().input_io;
    Executable& e = executable();
    const LoadedModel& loaded = graph_model();
    for (size_t i = 0; i < fed.size(); ++i) {
        if (!dirty[i]) continue;
        // By name: a variant's graph has no input for a shape input (a constant there), and an
        // input no output depends on is not an input of the executable. A sequence's elements
        // are inputs of their own; an optional without a value has none.
        auto feed = [&](const std::string& name, const Tensor& value) {
            for (auto& io : loaded.inputs)
                if (io.name == name && e.takes(io.var)) e.feed(io.var, value);
        };
        if (fed[i].sequence)
            for (size_t k = 0; k < fed[i].elements.size(); ++k)
                feed(onnx_import::element_name(ios[i].name, k), fed[i].elements[k]);
        else if (!fed[i].none)
            feed(ios[i].name, fed[i].tensor);
        dirty[i] = false;
    }
    ran = false;
    dense.clear();
    control.reset();
    control.watch(options.cancel ? &options.cancel->flag() : nullptr);
    control.set_deadline(options.deadline);
    e.set_run_control(&control);
    {
        KernelThreadCap cap(options.max_threads ? options.max_threads : SIZE_MAX);
        DeterministicScope mode(options.deterministic || deterministic_kernels());
        e.execute();
        e.wait();
    }
    for (size_t i = 0; i < out_data.size(); ++i) {
        if (!out_data[i]) continue;
        auto where = graph_outputs_of(loaded, model->impl().output_io[i]);
        if (!where)
            throw Error(Code::FAILED_PRECONDITION,
                        fmt::format("output \"{}\": a buffer is bound, but the optional output "
                                    "has no value in this run",
                                    model->impl().output_io[i].name));
        const Tensor& t = e.output(loaded.outputs.at(where->at(0)).var);
        if (t.nr_bytes() != out_bytes[i])
            throw Error(Code::INVALID_ARGUMENT,
                        fmt::format("output \"{}\": the bound buffer has {} bytes; the output is "
                                    "{} {} ({} bytes)",
                                    model->impl().output_io[i].name, out_bytes[i], t.dtype().name(),
                                    t.shape().to_string(), t.nr_bytes()));
        std::memcpy(out_data[i], t.contiguous().raw_ptr(), out_bytes[i]);
    }
    ran = true;
}

// ---------------------------------------------------------------- Context
Context::Context(std::shared_ptr<Impl> impl) : m_impl(std::move(impl)) {}

Context::~Context() {
    m_impl->close();
}

void Context::Impl::close() {
    wait_idle();                   // asynchronous runs end first
    std::lock_guard lk(run_mutex); // as does a run in flight on another thread
    closed = true;                 // and a run that has not taken the lock yet never starts
}

void Context::set_input(const std::string& name, const void* data, DType dtype,
                        const std::vector<int64_t>& shape) {
    translate([&] {
        auto& m = *m_impl;
        std::lock_guard lk(m.run_mutex);
        m.bind_input(m.input_index(name), data, dtype, shape.data(), shape.size());
    });
}

void Context::Impl::bind_input(size_t i, const void* data, DType dtype, const int64_t* dims,
                               size_t ndim) {
    const ModelIO& io = model->impl().input_io[i];
    if (holds_sequence(io.kind))
        throw Error(Code::INVALID_ARGUMENT,
                    fmt::format("input \"{}\" is a {}; bind it with set_sequence_input()", io.name,
                                value_kind_name(io.kind)));
    bind(i, InputValue{.tensor = wrap_input(i, -1, data, dtype, dims, ndim)});
}

void Context::Impl::bind(size_t i, InputValue value) {
    fed[i] = std::move(value);
    if (dirty.size() == fed.size()) dirty[i] = true;
}

Tensor Context::Impl::wrap_input(size_t i, long element, const void* data, DType dtype,
                                 const int64_t* dims, size_t ndim) {
    const ModelIO& io = model->impl().input_io[i];
    std::string what = element < 0 ? fmt::format("input \"{}\"", io.name)
                                   : fmt::format("input \"{}\", element {}", io.name, element);
    braid::DType dt = from_embed(dtype);
    if (dt != io.dtype)
        throw Error(Code::INVALID_ARGUMENT, fmt::format("{}: dtype {} given; the model expects {}",
                                                        what, dt.name(), io.dtype.name()));
    if (ndim > TensorShape::MAX_NDIM)
        throw Error(Code::INVALID_ARGUMENT, fmt::format("{}: {} dims given; at most {}", what, ndim,
                                                        TensorShape::MAX_NDIM));
    if (!dims && ndim) throw Error(Code::INVALID_ARGUMENT, what + ": shape is null");
    TensorShape s;
    s.set_ndim(ndim);
    for (size_t d = 0; d < ndim; ++d) {
        if (dims[d] < 0)
            throw Error(Code::INVALID_ARGUMENT,
                        fmt::format("{}: dim {} is {}; dims are >= 0", what, d, dims[d]));
        s[d] = size_t(dims[d]);
    }
    if (!io.accepts(s))
        throw Error(Code::INVALID_ARGUMENT, fmt::format("{}: shape {} given; the model expects {}",
                                                        what, s.to_string(), io.shape_string()));
    TensorLayout layout(s, dt);
    auto bytes = s.packed_bytes(dt);
    if (!bytes)
        throw Error(Code::INVALID_ARGUMENT,
                    fmt::format("{}: shape {} is too large", what, s.to_string()));
    if (!data && *bytes) // an empty tensor (a dim of 0) may come without memory
        throw Error(Code::INVALID_ARGUMENT, what + ": data is null");
    void* p = const_cast<void*>(data);
    return Tensor(Storage::wrap(p, *bytes, Device::cpu(), std::shared_ptr<void>(anchor, p)), 0,
                  layout);
}

void Context::set_sequence_input(const std::string& name, const std::vector<TensorView>& elements) {
    translate([&] {
        auto& m = *m_impl;
        std::lock_guard lk(m.run_mutex);
        size_t i = m.input_index(name);
        const ModelIO& io = m.model->impl().input_io[i];
        if (!holds_sequence(io.kind))
            throw Error(Code::INVALID_ARGUMENT,
                        fmt::format("input \"{}\" is a {}, not a sequence; bind it with "
                                    "set_input()",
                                    name, value_kind_name(io.kind)));
        InputValue v{.sequence = true};
        for (size_t k = 0; k < elements.size(); ++k)
            v.elements.push_back(m.wrap_input(i, long(k), elements[k].data, elements[k].dtype,
                                              elements[k].shape.data(), elements[k].shape.size()));
        m.bind(i, std::move(v));
    });
}

void Context::set_input_none(const std::string& name) {
    translate([&] {
        auto& m = *m_impl;
        std::lock_guard lk(m.run_mutex);
        size_t i = m.input_index(name);
        const ModelIO& io = m.model->impl().input_io[i];
        if (!is_optional(io.kind))
            throw Error(Code::INVALID_ARGUMENT,
                        fmt::format("input \"{}\" is a {}, not an optional: it needs a value", name,
                                    value_kind_name(io.kind)));
        m.bind(i, InputValue{.none = true});
    });
}

void* Context::input_buffer(const std::string& name, const std::vector<int64_t>& shape) {
    return translate([&] {
        auto& m = *m_impl;
        std::lock_guard lk(m.run_mutex);
        size_t i = m.input_index(name);
        const ModelIO& io = m.model->impl().input_io[i];
        TensorShape s;
        s.set_ndim(std::min(shape.size(), TensorShape::MAX_NDIM));
        for (size_t d = 0; d < s.ndim(); ++d) s[d] = size_t(std::max<int64_t>(shape[d], 0));
        Tensor own(s, io.dtype);
        // The same checks as caller memory, then the binding keeps braid's tensor.
        m.bind_input(i, own.raw_ptr(), to_embed(io.dtype), shape.data(), shape.size());
        m.fed[i].tensor = own;
        return own.raw_ptr();
    });
}

void Context::bind_output(const std::string& name, void* data, size_t bytes) {
    translate([&] {
        auto& m = *m_impl;
        std::lock_guard lk(m.run_mutex);
        size_t i = m.output_index(name);
        braid::ValueKind kind = m.model->impl().output_io[i].kind;
        if (holds_sequence(kind))
            throw Error(Code::INVALID_ARGUMENT,
                        fmt::format("output \"{}\" is a {}; read it with sequence_output()", name,
                                    value_kind_name(kind)));
        if (!data && bytes)
            throw Error(Code::INVALID_ARGUMENT,
                        fmt::format("output \"{}\": data is null for {} bytes", name, bytes));
        m.out_data[i] = data;
        m.out_bytes[i] = bytes;
    });
}

std::vector<int64_t> Context::output_shape(const std::string& name) {
    return translate([&] { return m_impl->output_shape(m_impl->output_index(name)); });
}

std::vector<int64_t> Context::Impl::output_shape(size_t idx) {
    std::lock_guard lk(run_mutex);
    if (model->impl().variants) {
        // The variant of the bound inputs was imported at their shapes and values.
        require_bound(fmt::format("output \"{}\": ", model->impl().output_io[idx].name));
        auto v = model->impl().variants->get(fed);
        const ModelIO& io = model->impl().output_io[idx];
        auto where = graph_outputs_of(*v, io);
        if (holds_sequence(io.kind))
            throw Error(Code::INVALID_ARGUMENT,
                        fmt::format("output \"{}\" is a {}: its elements have shapes of their "
                                    "own; run the model and read sequence_output()",
                                    io.name, value_kind_name(io.kind)));
        if (!where)
            throw Error(
                Code::FAILED_PRECONDITION,
                fmt::format("output \"{}\": the optional has no value for these inputs", io.name));
        std::lock_guard g(v->graph->inference_mutex());
        VarNode* out = v->outputs.at(where->at(0)).var.node();
        if (!out->shape_known())
            throw Error(Code::FAILED_PRECONDITION,
                        fmt::format("output \"{}\": the shape depends on values known only when "
                                    "the model runs",
                                    io.name));
        return dims_of(out->shape());
    }
    auto& loaded = model->impl().loaded;
    ComputingGraph& graph = *loaded.graph;
    // Inferred for this context's bound inputs alone: an unbound input counts with its recorded
    // shape when that has no run-time dim, and is an error otherwise (never the shape another
    // context happened to leave in the shared graph).
    std::vector<InputNode*> nodes;
    for (auto& io : loaded.inputs) nodes.push_back(static_cast<InputNode*>(io.var.node()->owner()));
    for (size_t i = 0; i < fed.size(); ++i)
        if (fed[i].tensor.empty() && has_symbolic_dim(loaded.inputs[i]))
            throw Error(Code::FAILED_PRECONDITION,
                        fmt::format("output \"{}\": input \"{}\" is not bound and its shape {} "
                                    "has dims fixed at run time; call set_input() first",
                                    loaded.outputs[idx].name, loaded.inputs[i].name,
                                    loaded.inputs[i].shape_string()));
    std::lock_guard g(graph.inference_mutex());
    FedShapeRollback rollback(nodes);
    try {
        for (size_t i = 0; i < fed.size(); ++i) {
            if (!fed[i].tensor.empty())
                nodes[i]->set_fed_shape(fed[i].tensor.shape());
            else
                nodes[i]->set_fed_shape(loaded.inputs[i].default_shape);
        }
        graph.reinfer_all();
    } catch (...) {
        rollback.restore(graph); // a rejected shape does not stay in the shared graph
        throw;
    }
    VarNode* v = loaded.outputs[idx].var.node();
    if (!v->shape_known())
        throw Error(Code::FAILED_PRECONDITION,
                    fmt::format("output \"{}\": the shape depends on values known only when the "
                                "model runs",
                                loaded.outputs[idx].name));
    return dims_of(v->shape());
}

void Context::run(const RunOptions& options) {
    translate([&] { m_impl->run(options); });
}

std::future<void> Context::run_async(const RunOptions& options) {
    auto impl = m_impl;
    impl->begin_async();
    return std::async(std::launch::async, [impl, options] {
        struct Finish {
            Context::Impl& impl;
            ~Finish() { impl.finish_async(); }
        } finish{*impl};
        translate([&] { impl->run(options); });
    });
}

void Context::run_async(const RunOptions& options,
                        std::function<void(Code, const std::string&)> done) {
    auto impl = m_impl;
    impl->begin_async();
    std::thread([impl, options, done = std::move(done)] {
        Code code = Code::OK;
        std::string message;
        try {
            translate([&] { impl->run(options); });
        } catch (const Error& e) {
            code = e.code();
            message = e.what();
        }
        impl->finish_async(); // before `done`, which may destroy the context
        if (done) done(code, message);
    }).detach();
}

const Tensor& Context::Impl::output_tensor(size_t idx) const {
    if (!ran || !exec)
        throw Error(Code::FAILED_PRECONDITION,
                    fmt::format("output \"{}\": no successful run on this context yet",
                                graph_model().outputs.at(idx).name));
    const Tensor& t = exec->output(graph_model().outputs.at(idx).var);
    if (t.layout().is_contiguous()) return t;
    dense.resize(graph_model().outputs.size());
    if (dense[idx].empty()) dense[idx] = t.contiguous();
    return dense[idx];
}

std::optional<std::vector<const Tensor*>> Context::Impl::model_output(size_t idx) const {
    const ModelIO& io = model->impl().output_io[idx];
    if (!ran || !exec)
        throw Error(Code::FAILED_PRECONDITION,
                    fmt::format("output \"{}\": no successful run on this context yet", io.name));
    auto where = graph_outputs_of(graph_model(), io);
    if (!where) return std::nullopt;
    std::vector<const Tensor*> res;
    for (size_t k : *where) res.push_back(&output_tensor(k));
    return res;
}

const Tensor& Context::Impl::model_output_tensor(size_t idx) const {
    const ModelIO& io = model->impl().output_io[idx];
    if (holds_sequence(io.kind))
        throw Error(Code::INVALID_ARGUMENT,
                    fmt::format("output \"{}\" is a {}; read it with sequence_output()", io.name,
                                value_kind_name(io.kind)));
    auto out = model_output(idx);
    if (!out)
        throw Error(Code::FAILED_PRECONDITION,
                    fmt::format("output \"{}\": the optional has no value in the last run; "
                                "has_output() tells",
                                io.name));
    return *out->at(0);
}

std::optional<std::vector<size_t>> graph_outputs_of(const LoadedModel& graph, const ModelIO& io) {
    if (graph.none_outputs.count(io.name)) return std::nullopt;
    if (auto it = graph.sequence_outputs.find(io.name); it != graph.sequence_outputs.end())
        return it->second;
    for (size_t k = 0; k < graph.outputs.size(); ++k)
        if (graph.outputs[k].name == io.name) return std::vector<size_t>{k};
    throw Error(Code::INTERNAL,
                fmt::format("output \"{}\": not an output of the model's graph", io.name));
}

namespace {

TensorView view_of(const Tensor& t) {
    TensorView v;
    v.data = t.raw_ptr();
    v.dtype = to_embed(t.dtype());
    v.shape = dims_of(t.shape());
    v.bytes = t.nr_bytes();
    return v;
}

} // namespace

TensorView Context::output(const std::string& name) const {
    return translate([&] {
        std::lock_guard lk(m_impl->run_mutex);
        return view_of(m_impl->model_output_tensor(m_impl->output_index(name)));
    });
}

std::vector<TensorView> Context::sequence_output(const std::string& name) const {
    return translate([&] {
        std::lock_guard lk(m_impl->run_mutex);
        size_t idx = m_impl->output_index(name);
        const ModelIO& io = m_impl->model->impl().output_io[idx];
        if (!holds_sequence(io.kind))
            throw Error(Code::INVALID_ARGUMENT,
                        fmt::format("output \"{}\" is a {}, not a sequence; read it with "
                                    "output()",
                                    name, value_kind_name(io.kind)));
        auto out = m_impl->model_output(idx);
        if (!out)
            throw Error(Code::FAILED_PRECONDITION,
                        fmt::format("output \"{}\": the optional has no value in the last run; "
                                    "has_output() tells",
                                    name));
        std::vector<TensorView> views;
        for (const Tensor* t : *out) views.push_back(view_of(*t));
        return views;
    });
}

bool Context::has_output(const std::string& name) const {
    return translate([&] {
        std::lock_guard lk(m_impl->run_mutex);
        return m_impl->model_output(m_impl->output_index(name)).has_value();
    });
}

size_t Context::arena_bytes() const {
    std::lock_guard lk(m_impl->run_mutex);
    if (!m_impl->exec) return 0;
    size_t total = 0;
    for (auto& n : m_impl->exec->memory_report().nodes)
        total += n.arena_capacity_bytes + n.own_allocation_bytes;
    return total;
}

void Context::trim() {
    std::lock_guard lk(m_impl->run_mutex);
    m_impl->exec.reset();
    m_impl->variant.reset();
    m_impl->dense.clear();
    m_impl->ran = false;
}

} // namespace braid::embed
