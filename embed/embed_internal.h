// What the embedding API's files share: the state behind Model and Context, and the one place
// where braid's exceptions become embed::Error codes.
#pragma once

#include "braid/embed.h"

#include "base/run_control.h"
#include "graph/executable.h"
#include "serialization/serializer.h"

#include <condition_variable>
#include <mutex>
#include <string_view>

namespace braid::embed {

struct Model::Impl {
    std::shared_ptr<ModelImage> image; //!< null for an imported ONNX model
    size_t onnx_weight_bytes = 0;
    LoadedModel loaded; //!< one graph, shared by every context (each has its own Executable)
    std::vector<TensorInfo> inputs, outputs;
    std::mutex pool_mutex;
    std::vector<std::unique_ptr<Context>> pool; //!< idle contexts of acquire_context()
};

struct Context::Impl {
    std::shared_ptr<Model> model; //!< keeps the model alive
    std::mutex run_mutex;         //!< held by a run, and by the destructor (waits for it)
    std::unique_ptr<Executable> exec;
    std::vector<Tensor> fed;     //!< per model input: the bound tensor (caller or own memory)
    std::vector<void*> out_data; //!< per model output: caller memory each run copies into
    std::vector<size_t> out_bytes;
    std::shared_ptr<int> anchor = std::make_shared<int>(0); //!< owner of wrapped caller memory
    RunControl control;
    bool ran = false;
    bool closed = false; //!< set by close(): no run starts any more
    //! Asynchronous runs started and not yet finished: destroying or pooling the context
    //! waits for them (they use the model through `model`).
    std::mutex pending_mutex;
    std::condition_variable pending_cv;
    int pending = 0;

    //! Waits for every run in flight (asynchronous, or on another thread) to end, and refuses
    //! runs after it with FAILED_PRECONDITION. Called by the destructor and by
    //! braid_context_destroy(), so that no run writes caller memory after either returns.
    void close();
    //! Waits until no asynchronous run is pending.
    void wait_idle() {
        std::unique_lock lk(pending_mutex);
        pending_cv.wait(lk, [&] { return pending == 0; });
    }
    //! Marks an asynchronous run finished.
    void finish_async() {
        std::lock_guard lk(pending_mutex);
        if (--pending == 0) pending_cv.notify_all();
    }

    std::vector<bool> dirty; //!< per model input: bound anew since the last feed

    size_t input_index(std::string_view name) const;
    size_t output_index(std::string_view name) const;
    //! The executable, compiled on first use (and after trim()).
    Executable& executable();
    //! Checks and binds caller memory to input `i` (zero copy).
    void bind_input(size_t i, const void* data, DType dtype, const int64_t* dims, size_t ndim);
    std::vector<int64_t> output_shape(size_t idx);
    //! Output `idx` of the last successful run.
    const Tensor& output_tensor(size_t idx) const;
    //! One run on this thread, under run_mutex.
    void run(const RunOptions& options);
    //! Counts an asynchronous run as pending (the Context's destructor waits for it).
    void begin_async() {
        std::lock_guard lk(pending_mutex);
        ++pending;
    }
};

/*!
 * The one way to load a model, whichever its format: an ONNX file (a path ending in ".onnx")
 * is imported with the options that apply to it (graph options, comp node, input shapes,
 * values bound to shape inputs); any other file is mapped and verified as a braid model. The
 * embedding API's Model::load, braid-run, braid-inspect, braid-convert and braid-serve all
 * load through it. Throws braid's errors (translate() turns them into embed::Error).
 */
std::shared_ptr<Model> open_model(const std::string& path, const LoadOptions& options);

//! The load options behind ModelOptions: every operator on `cpu:default` (runs execute on the
//! calling thread, with the shared kernel pool), and the memory budget.
LoadOptions load_options(const ModelOptions& options);

//! braid's exception in flight as an embed::Error (code and message); call in a catch block.
Error current_error();

//! Runs `fn`, turning every exception into an embed::Error.
template <typename Fn> auto translate(Fn&& fn) -> decltype(fn()) {
    try {
        return fn();
    } catch (...) {
        throw current_error();
    }
}

DType to_embed(braid::DType dtype);
braid::DType from_embed(DType dtype);

} // namespace braid::embed
