// The C API: handles checked against a registry of live objects, every exception turned into
// a braid_status (NULL on success, so a successful call allocates nothing).
#include "braid/braid_c.h"

#include "embed_internal.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>

struct braid_status {
    braid_code code;
    std::string message;
};

struct braid_model {
    std::shared_ptr<braid::embed::Model> model;
};

struct braid_context {
    std::shared_ptr<braid::embed::Context> ctx;
};

struct braid_cancel_token {
    braid::embed::CancelToken token;
};

static_assert(sizeof(braid_dtype) == sizeof(int), "braid_dtype is read as an int");

namespace {

using namespace braid::embed;

//! Every live handle and what it is. A handle is a number never used twice (not an address
//! that a later object could reuse), so a call with a destroyed handle is always an error; an
//! object in use by a call stays alive until that call returns.
class Registry {
public:
    enum Kind { MODEL, CONTEXT, TOKEN };

    //! A new handle for `obj`.
    const void* add(Kind kind, std::shared_ptr<void> obj) {
        std::lock_guard lk(m_mutex);
        const void* h = reinterpret_cast<const void*>(m_next += 16);
        m_live[h] = {kind, std::move(obj)};
        return h;
    }
    //! The object behind `h`, or null when `h` is not a live handle of `kind`.
    std::shared_ptr<void> find(const void* h, Kind kind) {
        std::lock_guard lk(m_mutex);
        auto it = m_live.find(h);
        if (it == m_live.end() || it->second.first != kind) return nullptr;
        return it->second.second;
    }
    //! Removes `h`; returns its object (null when it was not live).
    std::shared_ptr<void> remove(const void* h, Kind kind) {
        std::lock_guard lk(m_mutex);
        auto it = m_live.find(h);
        if (it == m_live.end() || it->second.first != kind) return nullptr;
        auto obj = std::move(it->second.second);
        m_live.erase(it);
        return obj;
    }

private:
    std::mutex m_mutex;
    uintptr_t m_next = 0x10000;
    std::unordered_map<const void*, std::pair<Kind, std::shared_ptr<void>>> m_live;
};

Registry& registry() {
    static Registry* r = new Registry; // never destroyed: handles may be released at exit
    return *r;
}

//! Returned when a status itself cannot be allocated; never freed.
braid_status g_no_memory{BRAID_OUT_OF_MEMORY, "out of memory"};

braid_status* make_status(braid_code code, std::string message) {
    try {
        return new braid_status{code, std::move(message)};
    } catch (...) {
        return &g_no_memory;
    }
}

const char* kind_name(Registry::Kind k) {
    return k == Registry::MODEL ? "model" : k == Registry::CONTEXT ? "context" : "cancel token";
}

Error bad_handle(const void* h, Registry::Kind kind, const char* fn) {
    if (!h)
        return Error(Code::INVALID_ARGUMENT,
                     fmt::format("{}: the {} is null", fn, kind_name(kind)));
    return Error(
        Code::INVALID_ARGUMENT,
        fmt::format("{}: {} {} is not live (destroyed, or never created)", fn, kind_name(kind), h));
}

//! The live object behind handle `h`, kept alive for the call.
template <typename H> std::shared_ptr<H> live(const H* h, Registry::Kind kind, const char* fn) {
    auto obj = h ? registry().find(h, kind) : nullptr;
    if (!obj) throw bad_handle(h, kind, fn);
    return std::static_pointer_cast<H>(obj);
}

template <typename T> void require(T* out, const char* what, const char* fn) {
    if (!out) throw Error(Code::INVALID_ARGUMENT, fmt::format("{}: {} is null", fn, what));
}

//! Runs `fn`; NULL on success, else the status of the exception.
template <typename Fn> braid_status* call(Fn&& fn) {
    try {
        translate(fn);
        return nullptr;
    } catch (const Error& e) {
        return make_status(braid_code(e.code()), e.what());
    } catch (...) {
        return make_status(BRAID_INTERNAL, "unknown exception");
    }
}

//! A new handle owning `obj`.
template <typename H> H* publish(H* obj, Registry::Kind kind) {
    std::shared_ptr<H> owned(obj);
    return static_cast<H*>(const_cast<void*>(registry().add(kind, std::move(owned))));
}

//! `dims` into the caller's `shape` (room for `capacity`; may be null) and `ndim`.
void write_dims(const std::vector<int64_t>& dims, int64_t* shape, size_t capacity, size_t* ndim,
                const char* fn, const std::string& name) {
    if (ndim) *ndim = dims.size();
    if (!shape) return;
    if (capacity < dims.size())
        throw Error(Code::INVALID_ARGUMENT, fmt::format("{}: \"{}\" has {} dims; shape_capacity "
                                                        "is {}",
                                                        fn, name, dims.size(), capacity));
    std::copy(dims.begin(), dims.end(), shape);
}

//! Input or output `index` of `m` (which the caller keeps alive while it reads the info).
const TensorInfo& info_at(const std::shared_ptr<braid_model>& m, size_t index, bool input,
                          const char* fn) {
    auto& list = input ? m->model->inputs() : m->model->outputs();
    if (index >= list.size())
        throw Error(Code::INVALID_ARGUMENT,
                    fmt::format("{}: index {} is out of range: the model has {} {}", fn, index,
                                list.size(), input ? "inputs" : "outputs"));
    return list[index];
}

braid_status* io_info(const braid_model* model, size_t index, bool input, const char** name,
                      braid_dtype* dtype, int64_t* shape, size_t shape_capacity, size_t* ndim,
                      const char* fn) {
    return call([&] {
        auto m = live(model, Registry::MODEL, fn);
        const TensorInfo& t = info_at(m, index, input, fn);
        if (name) *name = t.name.c_str();
        if (dtype) *dtype = braid_dtype(t.dtype);
        write_dims(t.shape, shape, shape_capacity, ndim, fn, t.name);
    });
}

braid_status* io_kind(const braid_model* model, size_t index, bool input, braid_value_kind* out,
                      const char* fn) {
    return call([&] {
        require(out, "out", fn);
        auto m = live(model, Registry::MODEL, fn);
        *out = braid_value_kind(info_at(m, index, input, fn).kind);
    });
}

} // namespace

extern "C" {

const char* braid_version(void) {
    return braid::embed::version();
}

int braid_abi_version(void) {
    return BRAID_ABI_VERSION;
}

braid_code braid_status_code(const braid_status* status) {
    return status ? status->code : BRAID_OK;
}

const char* braid_status_message(const braid_status* status) {
    return status ? status->message.c_str() : "";
}

void braid_status_free(braid_status* status) {
    if (status != &g_no_memory) delete status;
}

const char* braid_code_name(braid_code code) {
    return braid::embed::code_name(Code(code));
}

braid_status* braid_model_load_file(const char* path, braid_model** out) {
    return call([&] {
        require(path, "path", "braid_model_load_file");
        require(out, "out", "braid_model_load_file");
        *out = nullptr;
        auto model = Model::load(path);
        *out = publish(new braid_model{std::move(model)}, Registry::MODEL);
    });
}

braid_status* braid_model_load_file_bound(const char* path, size_t num_bound,
                                          const char* const* names, const double* const* values,
                                          const size_t* counts, braid_model** out) {
    return call([&] {
        const char* fn = "braid_model_load_file_bound";
        require(path, "path", fn);
        require(out, "out", fn);
        *out = nullptr;
        if (num_bound) {
            require(names, "names", fn);
            require(values, "values", fn);
            require(counts, "counts", fn);
        }
        std::map<std::string, std::vector<double>> bound;
        for (size_t i = 0; i < num_bound; ++i) {
            require(names[i], "names[i]", fn);
            if (counts[i]) require(values[i], "values[i]", fn);
            bound[names[i]].assign(values[i], values[i] + counts[i]);
        }
        auto model = Model::load(path, {}, bound);
        *out = publish(new braid_model{std::move(model)}, Registry::MODEL);
    });
}

braid_status* braid_model_load_buffer(const void* data, size_t size, int copy, braid_model** out) {
    return call([&] {
        require(out, "out", "braid_model_load_buffer");
        *out = nullptr;
        auto model = Model::load_buffer(data, size, copy != 0);
        *out = publish(new braid_model{std::move(model)}, Registry::MODEL);
    });
}

braid_status* braid_model_release(braid_model* model) {
    return call([&] {
        if (!registry().remove(model, Registry::MODEL))
            throw bad_handle(model, Registry::MODEL, "braid_model_release");
    });
}

braid_status* braid_model_num_inputs(const braid_model* model, size_t* out) {
    return call([&] {
        require(out, "out", "braid_model_num_inputs");
        *out = live(model, Registry::MODEL, "braid_model_num_inputs")->model->inputs().size();
    });
}

braid_status* braid_model_num_outputs(const braid_model* model, size_t* out) {
    return call([&] {
        require(out, "out", "braid_model_num_outputs");
        *out = live(model, Registry::MODEL, "braid_model_num_outputs")->model->outputs().size();
    });
}

braid_status* braid_model_input_info(const braid_model* model, size_t index, const char** name,
                                     braid_dtype* dtype, int64_t* shape, size_t shape_capacity,
                                     size_t* ndim) {
    return io_info(model, index, true, name, dtype, shape, shape_capacity, ndim,
                   "braid_model_input_info");
}

braid_status* braid_model_output_info(const braid_model* model, size_t index, const char** name,
                                      braid_dtype* dtype, int64_t* shape, size_t shape_capacity,
                                      size_t* ndim) {
    return io_info(model, index, false, name, dtype, shape, shape_capacity, ndim,
                   "braid_model_output_info");
}

braid_status* braid_model_input_kind(const braid_model* model, size_t index,
                                     braid_value_kind* out) {
    return io_kind(model, index, true, out, "braid_model_input_kind");
}

braid_status* braid_model_output_kind(const braid_model* model, size_t index,
                                      braid_value_kind* out) {
    return io_kind(model, index, false, out, "braid_model_output_kind");
}

braid_status* braid_model_weight_bytes(const braid_model* model, size_t* out) {
    return call([&] {
        require(out, "out", "braid_model_weight_bytes");
        *out = live(model, Registry::MODEL, "braid_model_weight_bytes")->model->weight_bytes();
    });
}

braid_status* braid_context_create(braid_model* model, braid_context** out) {
    return call([&] {
        require(out, "out", "braid_context_create");
        *out = nullptr;
        auto m = live(model, Registry::MODEL, "braid_context_create");
        std::shared_ptr<Context> ctx = m->model->create_context();
        *out = publish(new braid_context{std::move(ctx)}, Registry::CONTEXT);
    });
}

braid_status* braid_context_destroy(braid_context* ctx) {
    return call([&] {
        auto obj = registry().remove(ctx, Registry::CONTEXT);
        if (!obj) throw bad_handle(ctx, Registry::CONTEXT, "braid_context_destroy");
        // A run on another thread holds its own reference, so dropping the registry's would
        // free nothing while it runs: wait for it here, and refuse a run that looked the handle
        // up but has not started, so that nothing writes the caller's buffers after we return.
        std::static_pointer_cast<braid_context>(obj)->ctx->impl().close();
    });
}

braid_status* braid_context_set_input(braid_context* ctx, const char* name, braid_dtype dtype,
                                      const int64_t* shape, size_t ndim, const void* data) {
    return call([&] {
        auto c = live(ctx, Registry::CONTEXT, "braid_context_set_input");
        require(name, "name", "braid_context_set_input");
        if (!shape && ndim) require(shape, "shape", "braid_context_set_input");
        // A C caller may pass any int: read it as one (a C++ load of an enum value outside
        // braid_dtype's range is undefined), then check it.
        int raw;
        std::memcpy(&raw, &dtype, sizeof raw);
        auto& impl = c->ctx->impl();
        std::lock_guard lk(impl.run_mutex);
        impl.bind_input(impl.input_index(name), data, DType(raw), shape, ndim);
    });
}

braid_status* braid_context_set_sequence_input(braid_context* ctx, const char* name, size_t count,
                                               const braid_dtype* dtypes,
                                               const int64_t* const* shapes, const size_t* ndims,
                                               const void* const* data) {
    const char* fn = "braid_context_set_sequence_input";
    return call([&] {
        auto c = live(ctx, Registry::CONTEXT, fn);
        require(name, "name", fn);
        if (count) {
            require(dtypes, "dtypes", fn);
            require(shapes, "shapes", fn);
            require(ndims, "ndims", fn);
            require(data, "data", fn);
        }
        std::vector<TensorView> elements(count);
        for (size_t i = 0; i < count; ++i) {
            int raw; // read as an int, then checked (as braid_context_set_input does)
            std::memcpy(&raw, &dtypes[i], sizeof raw);
            if (!shapes[i] && ndims[i])
                throw Error(
                    Code::INVALID_ARGUMENT,
                    fmt::format("{}: input \"{}\", element {}: shape is null", fn, name, i));
            elements[i].data = data[i];
            elements[i].dtype = DType(raw);
            elements[i].shape.assign(shapes[i], shapes[i] + ndims[i]);
        }
        c->ctx->set_sequence_input(name, elements);
    });
}

braid_status* braid_context_set_input_none(braid_context* ctx, const char* name) {
    return call([&] {
        auto c = live(ctx, Registry::CONTEXT, "braid_context_set_input_none");
        require(name, "name", "braid_context_set_input_none");
        c->ctx->set_input_none(name);
    });
}

braid_status* braid_context_bind_output(braid_context* ctx, const char* name, void* data,
                                        size_t bytes) {
    return call([&] {
        auto c = live(ctx, Registry::CONTEXT, "braid_context_bind_output");
        require(name, "name", "braid_context_bind_output");
        c->ctx->bind_output(name, data, bytes);
    });
}

braid_status* braid_context_output_shape(braid_context* ctx, const char* name, int64_t* shape,
                                         size_t shape_capacity, size_t* ndim) {
    return call([&] {
        auto c = live(ctx, Registry::CONTEXT, "braid_context_output_shape");
        require(name, "name", "braid_context_output_shape");
        write_dims(c->ctx->output_shape(name), shape, shape_capacity, ndim,
                   "braid_context_output_shape", name);
    });
}

braid_status* braid_context_run(braid_context* ctx, const braid_run_options* options) {
    return call([&] {
        auto c = live(ctx, Registry::CONTEXT, "braid_context_run");
        RunOptions opt;
        std::shared_ptr<braid_cancel_token> token;
        if (options) {
            if (options->cancel) {
                token = live(options->cancel, Registry::TOKEN, "braid_context_run");
                opt.cancel = &token->token;
            }
            if (options->timeout_us > 0)
                opt.deadline = std::chrono::steady_clock::now() +
                               std::chrono::microseconds(options->timeout_us);
            opt.max_threads = options->max_threads;
            opt.deterministic = options->deterministic != 0;
        }
        c->ctx->impl().run(opt);
    });
}

braid_status* braid_context_output(braid_context* ctx, const char* name, const void** data,
                                   size_t* bytes) {
    return call([&] {
        auto c = live(ctx, Registry::CONTEXT, "braid_context_output");
        require(name, "name", "braid_context_output");
        require(data, "data", "braid_context_output");
        auto& impl = c->ctx->impl();
        std::lock_guard lk(impl.run_mutex);
        const auto& t = impl.model_output_tensor(impl.output_index(name));
        *data = t.raw_ptr();
        if (bytes) *bytes = t.nr_bytes();
    });
}

braid_status* braid_context_has_output(braid_context* ctx, const char* name, int* out) {
    return call([&] {
        auto c = live(ctx, Registry::CONTEXT, "braid_context_has_output");
        require(name, "name", "braid_context_has_output");
        require(out, "out", "braid_context_has_output");
        *out = c->ctx->has_output(name) ? 1 : 0;
    });
}

braid_status* braid_context_sequence_length(braid_context* ctx, const char* name, size_t* out) {
    return call([&] {
        auto c = live(ctx, Registry::CONTEXT, "braid_context_sequence_length");
        require(name, "name", "braid_context_sequence_length");
        require(out, "out", "braid_context_sequence_length");
        *out = c->ctx->sequence_output(name).size();
    });
}

braid_status* braid_context_sequence_element(braid_context* ctx, const char* name, size_t index,
                                             const void** data, size_t* bytes, braid_dtype* dtype,
                                             int64_t* shape, size_t shape_capacity, size_t* ndim) {
    const char* fn = "braid_context_sequence_element";
    return call([&] {
        auto c = live(ctx, Registry::CONTEXT, fn);
        require(name, "name", fn);
        require(data, "data", fn);
        auto elements = c->ctx->sequence_output(name);
        if (index >= elements.size())
            throw Error(Code::INVALID_ARGUMENT,
                        fmt::format("{}: output \"{}\": element {} is out of range: the sequence "
                                    "has {}",
                                    fn, name, index, elements.size()));
        const TensorView& e = elements[index];
        *data = e.data;
        if (bytes) *bytes = e.bytes;
        if (dtype) *dtype = braid_dtype(e.dtype);
        write_dims(e.shape, shape, shape_capacity, ndim, fn, name);
    });
}

braid_status* braid_context_arena_bytes(braid_context* ctx, size_t* out) {
    return call([&] {
        require(out, "out", "braid_context_arena_bytes");
        *out = live(ctx, Registry::CONTEXT, "braid_context_arena_bytes")->ctx->arena_bytes();
    });
}

braid_status* braid_context_trim(braid_context* ctx) {
    return call([&] { live(ctx, Registry::CONTEXT, "braid_context_trim")->ctx->trim(); });
}

braid_status* braid_cancel_token_create(braid_cancel_token** out) {
    return call([&] {
        require(out, "out", "braid_cancel_token_create");
        *out = publish(new braid_cancel_token, Registry::TOKEN);
    });
}

braid_status* braid_cancel_token_cancel(braid_cancel_token* token) {
    return call([&] { live(token, Registry::TOKEN, "braid_cancel_token_cancel")->token.cancel(); });
}

braid_status* braid_cancel_token_reset(braid_cancel_token* token) {
    return call([&] { live(token, Registry::TOKEN, "braid_cancel_token_reset")->token.reset(); });
}

braid_status* braid_cancel_token_destroy(braid_cancel_token* token) {
    return call([&] {
        if (!registry().remove(token, Registry::TOKEN))
            throw bad_handle(token, Registry::TOKEN, "braid_cancel_token_destroy");
    });
}

} // extern "C"
