// Model: one verified image of the file and one graph, shared by every context.
#include "embed_internal.h"

#include "base/error.h"
#include "memory/memory_budget.h"
#include "onnx_import/onnx_import.h"
#include "operators/io.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

namespace braid::embed {

const char* version() {
    return "0.1.0";
}

const char* code_name(Code code) {
    switch (code) {
    case Code::OK:
        return "OK";
    case Code::INVALID_ARGUMENT:
        return "INVALID_ARGUMENT";
    case Code::NOT_FOUND:
        return "NOT_FOUND";
    case Code::INVALID_MODEL:
        return "INVALID_MODEL";
    case Code::FAILED_PRECONDITION:
        return "FAILED_PRECONDITION";
    case Code::CANCELLED:
        return "CANCELLED";
    case Code::DEADLINE_EXCEEDED:
        return "DEADLINE_EXCEEDED";
    case Code::OUT_OF_MEMORY:
        return "OUT_OF_MEMORY";
    case Code::INTERNAL:
        return "INTERNAL";
    }
    return "UNKNOWN";
}

Error current_error() {
    try {
        throw;
    } catch (const Error& e) {
        return e;
    } catch (const CancelledError& e) {
        return Error(Code::CANCELLED, e.what());
    } catch (const DeadlineExceededError& e) {
        return Error(Code::DEADLINE_EXCEEDED, e.what());
    } catch (const SerializationError& e) {
        return Error(Code::INVALID_MODEL, e.what());
    } catch (const MemoryBudgetError& e) {
        return Error(Code::OUT_OF_MEMORY, e.what());
    } catch (const InternalError& e) {
        return Error(Code::INTERNAL, e.what());
    } catch (const braid::Error& e) {
        return Error(Code::INVALID_ARGUMENT, e.what());
    } catch (const std::bad_alloc&) {
        return Error(Code::OUT_OF_MEMORY, "out of memory");
    } catch (const std::exception& e) {
        return Error(Code::INTERNAL, e.what());
    } catch (...) {
        return Error(Code::INTERNAL, "unknown exception");
    }
}

namespace {

constexpr std::pair<DType, DTypeEnum> DTYPES[] = {
    {DType::FLOAT32, DTypeEnum::FLOAT32},   {DType::FLOAT16, DTypeEnum::FLOAT16},
    {DType::BFLOAT16, DTypeEnum::BFLOAT16}, {DType::INT32, DTypeEnum::INT32},
    {DType::INT64, DTypeEnum::INT64},       {DType::INT8, DTypeEnum::INT8},
    {DType::UINT8, DTypeEnum::UINT8},       {DType::BOOL, DTypeEnum::BOOL},
    {DType::FLOAT64, DTypeEnum::FLOAT64},   {DType::INT16, DTypeEnum::INT16},
    {DType::UINT16, DTypeEnum::UINT16},     {DType::UINT32, DTypeEnum::UINT32},
    {DType::UINT64, DTypeEnum::UINT64}};

TensorInfo info_of(const ModelIO& io) {
    TensorInfo t;
    t.name = io.name;
    t.dtype = to_embed(io.dtype);
    t.shape.assign(io.shape.begin(), io.shape.end());
    t.kind = ValueKind(int(io.kind));
    t.any_shape = io.any_shape;
    return t;
}

std::shared_ptr<Model> make_model(LoadedModel loaded, std::shared_ptr<ModelImage> image,
                                  std::unique_ptr<OnnxVariants> variants = nullptr,
                                  const onnx_import::DeclaredIO* declared = nullptr) {
    auto impl = std::make_unique<Model::Impl>();
    impl->image = std::move(image);
    impl->loaded = std::move(loaded);
    impl->variants = std::move(variants);
    if (!impl->image && impl->loaded.graph) // an imported ONNX model: its constants are its weights
        for (auto& opr : impl->loaded.graph->operators())
            if (auto* c = dynamic_cast<opr::ImmutableTensor*>(opr.get()))
                impl->onnx_weight_bytes += c->value().nr_bytes();
    impl->input_io = declared ? declared->inputs : impl->loaded.inputs;
    impl->output_io = declared ? declared->outputs : impl->loaded.outputs;
    for (auto& io : impl->input_io) impl->inputs.push_back(info_of(io));
    for (auto& io : impl->output_io) impl->outputs.push_back(info_of(io));
    return std::make_shared<Model>(std::move(impl));
}

//! Whether any of `ios` is a sequence or an optional.
bool any_structured(const std::vector<ModelIO>& ios) {
    return std::any_of(ios.begin(), ios.end(),
                       [](const ModelIO& io) { return io.kind != braid::ValueKind::TENSOR; });
}

//! An ONNX model run through OnnxVariants when its graph depends on what is fed: it is imported
//! now at the given shapes (placeholder size 1 for other symbolic dims); an import that needs a
//! shape input's value, or that fails on a placeholder size, leaves the graph to the first run,
//! as does a sequence or optional input (imported per length and presence). Sequence and
//! optional outputs keep the file's declaration; the context gathers their graph outputs.
std::shared_ptr<Model> open_onnx_variants(const std::string& path,
                                          onnx_import::ImportOptions options) {
    options.initializers = std::make_shared<std::map<std::string, Tensor>>();
    options.prepared = std::make_shared<onnx_import::PreparedModel>();
    options.sequence_outputs = true;
    onnx_import::DeclaredIO file;
    std::optional<LoadedModel> now;
    std::optional<onnx_import::DeclaredIO> declared;
    std::vector<std::string> shape_inputs;
    try {
        now = onnx_import::import_file(path, options, &file);
    } catch (const onnx_import::ShapeInputError& e) {
        shape_inputs = e.inputs();
    } catch (const onnx_import::NodeError&) {
        declared = file;
        bool placeholder = false;
        for (auto& io : declared->inputs)
            placeholder =
                placeholder || (has_symbolic_dim(io) && !options.input_shapes.count(io.name));
        if (!placeholder) throw; // the shapes are the model's own: the model is wrong
    } catch (const onnx_import::UnsupportedOnnxError&) {
        if (!any_structured(file.inputs)) throw; // else imported when it runs (below)
    }
    if (any_structured(file.inputs)) { // imported per sequence length and optional presence
        now.reset();
        declared = file;
    }
    bool structured_outputs = any_structured(file.outputs);
    if (now && !structured_outputs &&
        std::none_of(now->inputs.begin(), now->inputs.end(), has_symbolic_dim))
        return make_model(std::move(*now), nullptr); // one static graph
    if (now) { // the graph's own inputs and outputs, with the shapes it was imported at
        declared.emplace(onnx_import::DeclaredIO{now->inputs, now->outputs});
        for (auto& io : declared->inputs) io.var = {};
        for (auto& io : declared->outputs) io.var = {};
        if (structured_outputs) declared->outputs = file.outputs;
    } else if (!declared) {
        declared = file;
    }
    auto variants = std::make_unique<OnnxVariants>(path, options, declared->inputs, shape_inputs);
    if (now) variants->add(std::make_shared<LoadedModel>(*now));
    auto model =
        make_model(now ? std::move(*now) : LoadedModel{}, nullptr, std::move(variants), &*declared);
    if (!model->impl().loaded.graph) // no weights counted from a graph: count the file's
        for (auto& [name, t] : *options.initializers)
            model->impl().onnx_weight_bytes += t.nr_bytes();
    return model;
}

} // namespace

LoadOptions load_options(const ModelOptions& options) {
    LoadOptions lopt;
    lopt.comp_node = "cpu:default";
    if (!options.memory_budget.empty())
        lopt.graph_options.memory_budget =
            parse_byte_size(options.memory_budget, "ModelOptions::memory_budget");
    return lopt;
}

std::shared_ptr<Model> open_model(const std::string& path, const LoadOptions& options,
                                  bool onnx_variants) {
    if (onnx_import::is_onnx_path(path)) {
        onnx_import::ImportOptions io;
        io.graph_options = options.graph_options;
        io.comp_node = options.comp_node;
        io.input_shapes = options.input_shapes;
        io.input_values = options.input_values;
        if (onnx_variants) return open_onnx_variants(path, io);
        return make_model(onnx_import::import_file(path, io), nullptr);
    }
    if (!options.input_values.empty())
        BRAID_THROW(SerializationError,
                    "{}: values are bound to inputs ({} first), but only ONNX models have shape "
                    "inputs to bind",
                    path, options.input_values.begin()->first);
    auto image = ModelImage::open(path, options.verify_integrity, options.map_min_bytes);
    return make_model(braid::load(*image, options), image);
}

DType to_embed(braid::DType dtype) {
    for (auto [e, b] : DTYPES)
        if (b == dtype.enumv()) return e;
    throw Error(Code::INTERNAL, "dtype " + std::string(dtype.name()) + " has no embed::DType");
}

braid::DType from_embed(DType dtype) {
    for (auto [e, b] : DTYPES)
        if (e == dtype) return braid::DType(b);
    throw Error(Code::INVALID_ARGUMENT,
                "dtype value " + std::to_string(int(dtype)) + " is not a braid dtype (0..12)");
}

size_t dtype_size(DType dtype) {
    return translate([&] { return from_embed(dtype).size(); });
}

void convert_elements(DType from, const void* src, DType to, void* dst, size_t count) {
    translate([&] { braid::convert_elements(from_embed(from), src, from_embed(to), dst, count); });
}

Model::Model(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

Model::~Model() = default;

std::shared_ptr<Model> Model::load(const std::string& path, const ModelOptions& options) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
        throw Error(Code::NOT_FOUND, path + ": cannot open: " + std::strerror(errno));
    return translate([&] { return open_model(path, load_options(options), true); });
}

std::shared_ptr<Model> Model::load(const std::string& path, const ModelOptions& options,
                                   const std::map<std::string, std::vector<double>>& shape_inputs) {
    if (!onnx_import::is_onnx_path(path))
        throw Error(Code::INVALID_ARGUMENT,
                    path + ": shape inputs are bound in ONNX models only (a .onnx path)");
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
        throw Error(Code::NOT_FOUND, path + ": cannot open: " + std::strerror(errno));
    return translate([&] {
        LoadOptions lopt = load_options(options);
        for (auto& [name, values] : shape_inputs) {
            Tensor t(TensorShape{values.size()}, dtype::Float64());
            std::copy(values.begin(), values.end(), t.ptr<double>());
            lopt.input_values[name] = t;
        }
        return open_model(path, lopt, true);
    });
}

std::shared_ptr<Model> Model::load_buffer(const void* data, size_t size, bool copy,
                                          const ModelOptions& options) {
    if (!data && size) throw Error(Code::INVALID_ARGUMENT, "load_buffer: data is null");
    return translate([&] {
        std::span<const uint8_t> bytes(static_cast<const uint8_t*>(data), size);
        auto image = ModelImage::from_buffer(bytes, !copy);
        return make_model(braid::load(*image, load_options(options)), image);
    });
}

const std::vector<TensorInfo>& Model::inputs() const {
    return m_impl->inputs;
}

const std::vector<TensorInfo>& Model::outputs() const {
    return m_impl->outputs;
}

size_t Model::weight_bytes() const {
    return m_impl->image ? m_impl->image->weight_bytes() : m_impl->onnx_weight_bytes;
}

std::unique_ptr<Context> Model::create_context() {
    return translate([&] {
        auto impl = std::make_shared<Context::Impl>();
        impl->model = shared_from_this();
        impl->fed.resize(m_impl->inputs.size());
        impl->out_data.resize(m_impl->outputs.size(), nullptr);
        impl->out_bytes.resize(m_impl->outputs.size(), 0);
        // Compiled now: the first run pays nothing extra (a model with ONNX variants compiles
        // the variant of the inputs bound at the first run).
        if (!m_impl->variants) impl->executable();
        return std::make_unique<Context>(std::move(impl));
    });
}

std::shared_ptr<Context> Model::acquire_context() {
    std::unique_ptr<Context> ctx;
    {
        std::lock_guard lk(m_impl->pool_mutex);
        if (!m_impl->pool.empty()) {
            ctx = std::move(m_impl->pool.back());
            m_impl->pool.pop_back();
        }
    }
    if (!ctx)
        ctx = create_context();
    else
        ctx->impl().model = shared_from_this();
    // Back to the pool when released, while the model lives. A pooled context drops its
    // reference to the model, which owns the pool.
    Context* raw = ctx.release();
    std::weak_ptr<Model> owner = shared_from_this();
    return std::shared_ptr<Context>(raw, [owner](Context* c) {
        c->impl().wait_idle(); // its asynchronous runs use the model
        if (auto model = owner.lock()) {
            c->impl().model.reset();
            std::lock_guard lk(model->m_impl->pool_mutex);
            model->m_impl->pool.emplace_back(c);
        } else {
            delete c;
        }
    });
}

void Model::trim() {
    std::vector<std::unique_ptr<Context>> idle;
    {
        std::lock_guard lk(m_impl->pool_mutex);
        idle.swap(m_impl->pool);
    }
}

} // namespace braid::embed
