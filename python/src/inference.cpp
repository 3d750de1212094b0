// The embedding API in Python: braid.Model, braid.Context, braid.CancelToken, braid.TensorInfo.
//
// Inputs are passed without a copy: a C-contiguous, aligned array in native byte order is bound
// where it lies (Context::set_input) and kept referenced by the context until it is bound
// again, so braid never reads freed memory; any other array-like is made contiguous first (one
// copy). Outputs come back as new arrays that own their memory (one copy out of the context),
// so they stay valid after the next run. The GIL is released while a model runs, so Python
// threads run contexts at the same time, and another thread may cancel a run.
#include "bindings.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

namespace braid::python {

namespace {

using embed::Code;

//! embed::DType <-> NumPy dtype names (embed's values follow the C API, not braid's enum).
constexpr std::pair<embed::DType, const char*> EMBED_DTYPES[] = {
    {embed::DType::FLOAT32, "float32"},   {embed::DType::FLOAT16, "float16"},
    {embed::DType::BFLOAT16, "bfloat16"}, {embed::DType::INT32, "int32"},
    {embed::DType::INT64, "int64"},       {embed::DType::INT8, "int8"},
    {embed::DType::UINT8, "uint8"},       {embed::DType::BOOL, "bool"},
    {embed::DType::FLOAT64, "float64"},   {embed::DType::INT16, "int16"},
    {embed::DType::UINT16, "uint16"},     {embed::DType::UINT32, "uint32"},
    {embed::DType::UINT64, "uint64"}};

const char* embed_dtype_name(embed::DType d) {
    for (auto& [e, name] : EMBED_DTYPES)
        if (e == d) return name;
    return "?";
}

embed::DType embed_dtype(const py::dtype& dt, const std::string& what) {
    const char* name = braid_dtype(dt, what).name();
    for (auto& [e, n] : EMBED_DTYPES)
        if (std::strcmp(n, name) == 0) return e;
    throw embed::Error(Code::INVALID_ARGUMENT, what + ": dtype " + name + " is not taken here");
}

//! The embed dtype of an array's elements, read from its descriptor without calling into
//! Python (the hot path of every run); other dtypes go the named way, which explains them.
embed::DType embed_dtype_of(const py::array& arr, const std::string& input) {
    using api = py::detail::npy_api;
    const auto* d = py::detail::array_descriptor_proxy(py::detail::array_proxy(arr.ptr())->descr);
    constexpr int NPY_HALF = 23; // not among pybind11's constants
    if (d->byteorder != '>') {
        bool wide = d->elsize == 8;
        switch (d->type_num) {
        case api::NPY_BOOL_:
            return embed::DType::BOOL;
        case api::NPY_BYTE_:
            return embed::DType::INT8;
        case api::NPY_UBYTE_:
            return embed::DType::UINT8;
        case api::NPY_SHORT_:
            return embed::DType::INT16;
        case api::NPY_USHORT_:
            return embed::DType::UINT16;
        case api::NPY_INT_:
            return embed::DType::INT32;
        case api::NPY_UINT_:
            return embed::DType::UINT32;
        case api::NPY_LONG_:
        case api::NPY_LONGLONG_:
            return wide ? embed::DType::INT64 : embed::DType::INT32;
        case api::NPY_ULONG_:
        case api::NPY_ULONGLONG_:
            return wide ? embed::DType::UINT64 : embed::DType::UINT32;
        case api::NPY_FLOAT_:
            return embed::DType::FLOAT32;
        case api::NPY_DOUBLE_:
            return embed::DType::FLOAT64;
        case NPY_HALF:
            return embed::DType::FLOAT16;
        default:
            break;
        }
    }
    return embed_dtype(arr.dtype(), "input \"" + input + "\"");
}

//! The NumPy dtype of an embed dtype, made once per dtype.
const py::dtype& numpy_dtype_of(embed::DType d) {
    // Never destroyed: the objects must not be released after the interpreter is gone.
    static auto* cached = new py::dtype[std::size(EMBED_DTYPES)];
    auto& slot = cached[size_t(d)];
    if (!slot) slot = py::dtype(embed_dtype_name(d));
    return slot;
}

//! The value as an array braid can read in place: itself when it is one already.
py::array readable(const py::handle& value, const std::string& name) {
    if (py::isinstance<py::array>(value)) {
        auto arr = py::reinterpret_borrow<py::array>(value);
        int flags = arr.flags();
        if ((flags & py::array::c_style) && (flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_))
            return arr;
    }
    if (py::hasattr(value, "__dlpack__")) {
        // A DLPack producer (a tensor of another library): NumPy takes its memory as it is.
        // Never destroyed: it must not be released after the interpreter is gone.
        static auto* from_dlpack = new py::object(py::module_::import("numpy").attr("from_dlpack"));
        py::array arr = (*from_dlpack)(value);
        if (arr.flags() & py::array::c_style) return arr;
        return py::array::ensure(arr, py::array::c_style);
    }
    py::array arr = py::array::ensure(value, py::array::c_style);
    if (!arr)
        throw embed::Error(Code::INVALID_ARGUMENT, "input \"" + name + "\": a " +
                                                       std::string(py::str(value.get_type())) +
                                                       " cannot be read as an array");
    return arr;
}

std::vector<int64_t> shape_of(const py::array& arr) {
    return std::vector<int64_t>(arr.shape(), arr.shape() + arr.ndim());
}

py::object dtype_object(embed::DType d) {
    if (d == embed::DType::BFLOAT16) return py::str("bfloat16");
    return numpy_dtype_of(d);
}

//! A new array holding a copy of `view`.
py::array to_array(const embed::TensorView& view) {
    if (view.dtype == embed::DType::BFLOAT16) {
        // NumPy has no bfloat16: widen to float32 (exact).
        py::array_t<float> out(view.shape);
        embed::convert_elements(view.dtype, view.data, embed::DType::FLOAT32, out.mutable_data(),
                                size_t(out.size()));
        return out;
    }
    py::array out(numpy_dtype_of(view.dtype), view.shape);
    if (view.bytes) std::memcpy(out.mutable_data(), view.data, view.bytes);
    return out;
}

const char* kind_name(embed::ValueKind k) {
    switch (k) {
    case embed::ValueKind::SEQUENCE:
        return "sequence";
    case embed::ValueKind::OPTIONAL:
        return "optional";
    case embed::ValueKind::OPTIONAL_SEQUENCE:
        return "optional_sequence";
    default:
        return "tensor";
    }
}

struct TensorInfo {
    std::string name;
    py::object dtype;
    py::tuple shape;
    std::string kind;
};

TensorInfo info_of(const embed::TensorInfo& t) {
    py::tuple shape(t.shape.size());
    for (size_t i = 0; i < t.shape.size(); ++i) shape[i] = t.shape[i];
    return {t.name, dtype_object(t.dtype), shape, kind_name(t.kind)};
}

struct CancelToken {
    embed::CancelToken token;
};

//! One context and what its bound inputs hold on to.
class PyContext {
public:
    PyContext(std::shared_ptr<embed::Model> model, std::shared_ptr<embed::Context> ctx)
        : m_model(std::move(model)), m_ctx(std::move(ctx)) {}

    py::dict run(const py::dict& feeds, const std::optional<std::vector<std::string>>& outputs,
                 std::optional<double> deadline_s, size_t threads, bool deterministic,
                 CancelToken* cancel) {
        if (m_busy.exchange(true))
            throw embed::Error(Code::FAILED_PRECONDITION,
                               "Context.run: this context is running on another thread; use one "
                               "context per thread (Model.context())");
        struct Release {
            std::atomic<bool>& busy;
            ~Release() { busy = false; }
        } release{m_busy};
        for (auto [key, value] : feeds) bind(py::str(key), value);
        embed::RunOptions opts;
        opts.max_threads = threads;
        opts.deterministic = deterministic;
        if (cancel) opts.cancel = &cancel->token;
        if (deadline_s) {
            if (!(*deadline_s >= 0))
                throw embed::Error(Code::INVALID_ARGUMENT,
                                   "Context.run: deadline_s must be at least 0");
            opts.deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(*deadline_s));
        }
        {
            py::gil_scoped_release unlocked;
            m_ctx->run(opts);
        }
        py::dict result;
        if (outputs) {
            for (auto& name : *outputs) result[py::str(name)] = output(name);
        } else {
            for (auto& info : m_model->outputs()) result[py::str(info.name)] = output(info.name);
        }
        return result;
    }

    py::object output(const std::string& name) const {
        if (!m_ctx->has_output(name)) return py::none();
        const embed::TensorInfo* info = nullptr;
        for (auto& o : m_model->outputs())
            if (o.name == name) info = &o;
        if (info && (info->kind == embed::ValueKind::SEQUENCE ||
                     info->kind == embed::ValueKind::OPTIONAL_SEQUENCE)) {
            py::list items;
            for (auto& v : m_ctx->sequence_output(name)) items.append(to_array(v));
            return items;
        }
        return to_array(m_ctx->output(name));
    }

    //! The address braid reads input `name` from (for checking that nothing was copied).
    uintptr_t input_address(const std::string& name) const {
        auto it = m_addresses.find(name);
        if (it == m_addresses.end())
            throw embed::Error(Code::INVALID_ARGUMENT,
                               "Context.input_address: input \"" + name + "\" is not bound");
        return it->second;
    }

    //! Seconds per run of `iterations` runs from C++ alone, each binding the inputs of `feeds`
    //! again and reading every output's view, as a C++ caller of Context::run does: the anchor
    //! of bench/bench_python.py.
    double time_native(const py::dict& feeds, size_t iterations) {
        std::vector<std::pair<std::string, py::array>> arrays;
        for (auto [k, v] : feeds) arrays.emplace_back(py::str(k), readable(v, py::str(k)));
        std::vector<std::tuple<std::string, const void*, embed::DType, std::vector<int64_t>>> in;
        for (auto& [name, arr] : arrays)
            in.emplace_back(name, arr.data(), embed_dtype_of(arr, name), shape_of(arr));
        py::gil_scoped_release unlocked;
        auto t0 = std::chrono::steady_clock::now();
        size_t sink = 0;
        for (size_t i = 0; i < iterations; ++i) {
            for (auto& [name, data, dtype, shape] : in) m_ctx->set_input(name, data, dtype, shape);
            m_ctx->run();
            for (auto& o : m_model->outputs()) sink += m_ctx->output(o.name).bytes;
        }
        auto t1 = std::chrono::steady_clock::now();
        if (sink == size_t(-1)) std::abort(); // keeps the reads
        return std::chrono::duration<double>(t1 - t0).count() /
               double(std::max<size_t>(iterations, 1));
    }

    size_t arena_bytes() const { return m_ctx->arena_bytes(); }
    void trim() { m_ctx->trim(); }

private:
    void bind(const std::string& name, const py::handle& value) {
        if (value.is_none()) {
            m_ctx->set_input_none(name);
            m_bound.erase(name);
            m_addresses.erase(name);
            return;
        }
        if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
            py::list held;
            std::vector<embed::TensorView> views;
            for (auto item : value) {
                py::array arr = readable(item, name);
                embed::TensorView v;
                v.data = arr.data();
                v.dtype = embed_dtype_of(arr, name);
                v.shape = shape_of(arr);
                v.bytes = size_t(arr.nbytes());
                views.push_back(std::move(v));
                held.append(arr);
            }
            m_ctx->set_sequence_input(name, views);
            m_bound[name] = held;
            return;
        }
        py::array arr = readable(value, name);
        m_ctx->set_input(name, arr.data(), embed_dtype_of(arr, name), shape_of(arr));
        m_addresses[name] = reinterpret_cast<uintptr_t>(arr.data());
        m_bound[name] = arr; // referenced until bound again, so braid never reads freed memory
    }

    std::shared_ptr<embed::Model> m_model;
    std::shared_ptr<embed::Context> m_ctx;
    std::map<std::string, py::object> m_bound;
    std::map<std::string, uintptr_t> m_addresses;
    std::atomic<bool> m_busy{false};
};

std::shared_ptr<embed::Model> load_model(const std::string& path,
                                         const std::optional<py::dict>& shape_inputs,
                                         const std::optional<std::string>& memory_budget) {
    embed::ModelOptions options;
    if (memory_budget) options.memory_budget = *memory_budget;
    std::map<std::string, std::vector<double>> shapes;
    if (shape_inputs)
        for (auto [k, v] : *shape_inputs) {
            py::array_t<double, py::array::c_style | py::array::forcecast> values(
                py::reinterpret_borrow<py::object>(v));
            shapes[py::str(k)] = std::vector<double>(values.data(), values.data() + values.size());
        }
    py::gil_scoped_release unlocked;
    return shapes.empty() ? embed::Model::load(path, options)
                          : embed::Model::load(path, options, shapes);
}

} // namespace

void bind_inference(py::module_& m) {
    m.def("version", &embed::version, "braid's version (\"MAJOR.MINOR.PATCH\").");

    py::class_<TensorInfo>(m, "TensorInfo", "A model input or output.")
        .def_readonly("name", &TensorInfo::name)
        .def_readonly("dtype", &TensorInfo::dtype,
                      "A NumPy dtype (the string \"bfloat16\" for that dtype).")
        .def_readonly("shape", &TensorInfo::shape, "Dims, -1 where fixed at run time.")
        .def_readonly("kind", &TensorInfo::kind,
                      "\"tensor\", \"sequence\", \"optional\" or \"optional_sequence\".")
        .def("__repr__", [](const TensorInfo& t) {
            return py::str("TensorInfo(name={!r}, dtype={}, shape={}, kind={!r})")
                .format(t.name, t.dtype, t.shape, t.kind);
        });

    py::class_<CancelToken>(m, "CancelToken",
                            "Set from any thread to stop the runs given it (they raise "
                            "braid.CancelledError).")
        .def(py::init<>())
        .def("cancel", [](CancelToken& t) { t.token.cancel(); })
        .def("reset", [](CancelToken& t) { t.token.reset(); })
        .def_property_readonly("cancelled",
                               [](const CancelToken& t) { return t.token.cancelled(); });

    py::class_<PyContext>(m, "Context",
                          "The state of one request: bound inputs and the memory of its runs. Use "
                          "from one thread at a time; contexts of one model run at the same time.")
        .def("run", &PyContext::run, py::arg("feeds"), py::arg("outputs") = py::none(),
             py::kw_only(), py::arg("deadline_s") = py::none(), py::arg("threads") = 0,
             py::arg("deterministic") = false, py::arg("cancel") = nullptr,
             "Runs the model on `feeds` ({name: array}; a list of arrays for a sequence input, "
             "None for an optional one without a value) and returns {name: array} for `outputs` "
             "(all when None). C-contiguous arrays are read in place. The GIL is released while "
             "the model runs.\n\n"
             "deadline_s: seconds from now after which the run raises DeadlineExceededError.\n"
             "threads: most kernel threads for this run (0: all).\n"
             "deterministic: each output element's bits depend only on the model and its own "
             "inputs (docs/determinism.md).\n"
             "cancel: a CancelToken another thread may set.")
        .def("input_address", &PyContext::input_address, py::arg("name"),
             "The address braid reads input `name` from: the array's own data when it was "
             "passed without a copy.")
        .def("_time_native", &PyContext::time_native, py::arg("feeds"), py::arg("iterations"),
             "Seconds per run of the same runs driven from C++ (bench/bench_python.py's anchor).")
        .def_property_readonly("arena_bytes", &PyContext::arena_bytes)
        .def("trim", &PyContext::trim, "Frees the context's arena; the next run rebuilds it.");

    py::class_<embed::Model, std::shared_ptr<embed::Model>>(
        m, "Model",
        "A loaded model (.braid, or .onnx imported): immutable and shared by its contexts.")
        .def(py::init(&load_model), py::arg("path"), py::kw_only(),
             py::arg("shape_inputs") = py::none(), py::arg("memory_budget") = py::none(),
             "Loads the model at `path`. shape_inputs: {name: values} for an ONNX model's shape "
             "inputs, fixed at import. memory_budget: \"8G\", \"512M\" or a number of bytes.")
        .def_property_readonly("inputs",
                               [](const embed::Model& model) {
                                   std::vector<TensorInfo> out;
                                   for (auto& t : model.inputs()) out.push_back(info_of(t));
                                   return out;
                               })
        .def_property_readonly("outputs",
                               [](const embed::Model& model) {
                                   std::vector<TensorInfo> out;
                                   for (auto& t : model.outputs()) out.push_back(info_of(t));
                                   return out;
                               })
        .def_property_readonly("weight_bytes", &embed::Model::weight_bytes)
        .def(
            "context",
            [](std::shared_ptr<embed::Model> model) {
                std::shared_ptr<embed::Context> ctx = model->create_context();
                return std::make_unique<PyContext>(model, std::move(ctx));
            },
            "A new context (one per thread that runs the model).")
        .def(
            "run",
            [](std::shared_ptr<embed::Model> model, const py::dict& feeds,
               const std::optional<std::vector<std::string>>& outputs,
               std::optional<double> deadline_s, size_t threads, bool deterministic,
               CancelToken* cancel) {
                // A pooled context keeps its bindings; every input is bound here, so none is
                // left pointing at an array of an earlier call.
                for (auto& in : model->inputs())
                    if (!feeds.contains(in.name))
                        throw embed::Error(Code::INVALID_ARGUMENT,
                                           "Model.run: input \"" + in.name +
                                               "\" is not in the feeds (Model.run takes every "
                                               "input; a Context keeps earlier ones bound)");
                PyContext ctx(model, model->acquire_context());
                return ctx.run(feeds, outputs, deadline_s, threads, deterministic, cancel);
            },
            py::arg("feeds"), py::arg("outputs") = py::none(), py::kw_only(),
            py::arg("deadline_s") = py::none(), py::arg("threads") = 0,
            py::arg("deterministic") = false, py::arg("cancel") = nullptr,
            "Context.run on a context from the model's pool: safe from any number of threads.")
        .def("trim", &embed::Model::trim, "Frees the pool's idle contexts.");
}

} // namespace braid::python
