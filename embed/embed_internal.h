// What the embedding API's files share: the state behind Model and Context, and the one place
// where braid's exceptions become embed::Error codes.
#pragma once

#include "braid/embed.h"

#include "base/run_control.h"
#include "graph/executable.h"
#include "onnx_import/onnx_import.h"
#include "serialization/serializer.h"

#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>

namespace braid::embed {

//! Whether `io` has a dim fixed only when the model runs (-1).
bool has_symbolic_dim(const ModelIO& io);

//! What one model input is bound to: a tensor, the elements of a sequence, or no value.
struct InputValue {
    Tensor tensor;
    std::vector<Tensor> elements;
    bool sequence = false; //!< bound to `elements` (none: an empty sequence)
    bool none = false;     //!< an optional input bound to no value
    bool bound() const { return sequence || none || !tensor.empty(); }
};

/*!
 * An ONNX model imported once per distinct set of the run-time facts its import depends on: the
 * fed shape of every input with a symbolic dim (so that nothing is decided on a placeholder
 * size), the value of every *shape input* (a graph input an op reads as a shape, axes, sizes or
 * scales argument; onnx_import::ShapeInputError), the length and element shapes of every
 * sequence input, and whether each optional input holds a value. Each variant is a static graph
 * for those facts, built from the file with the weights it shares with every other variant.
 * Variants are kept, most recently used first, up to MAX_VARIANTS.
 */
class OnnxVariants {
public:
    static constexpr size_t MAX_VARIANTS = 16;

    //! `shape_inputs`: the inputs known to be read as shapes already (by the import at load).
    OnnxVariants(std::string path, onnx_import::ImportOptions base, std::vector<ModelIO> inputs,
                 const std::vector<std::string>& shape_inputs);
    //! The variant for the values fed to the model's inputs (in the order of `inputs`, all
    //! bound), imported on first use.
    std::shared_ptr<const LoadedModel> get(const std::vector<InputValue>& fed);
    //! Adds an import made at load time, for the shapes it was made with.
    void add(std::shared_ptr<const LoadedModel> variant);
    //! The inputs an import asked values for so far.
    std::vector<std::string> shape_inputs() const;
    //! Whether there are any (the variant then depends on values, not only on shapes).
    bool reads_values() const;
    size_t size() const;

private:
    //! The cache key of inputs of `shapes` (tensor inputs) with the values `fed` (null: tensor
    //! inputs only, and no shape input values).
    std::string key(const std::vector<TensorShape>& shapes,
                    const std::vector<InputValue>* fed) const;

    std::string m_path;
    onnx_import::ImportOptions m_base;
    std::vector<ModelIO> m_inputs;
    mutable std::mutex m_mutex;
    std::set<std::string> m_shape_inputs;
    std::list<std::pair<std::string, std::shared_ptr<const LoadedModel>>> m_variants;
};

struct Model::Impl {
    std::shared_ptr<ModelImage> image; //!< null for an imported ONNX model
    size_t onnx_weight_bytes = 0;
    //! One graph, shared by every context (each has its own Executable). An ONNX model with
    //! `variants` has a graph here only when its import at load time succeeded.
    LoadedModel loaded;
    //! ONNX models whose graph depends on fed shapes or shape-input values (null otherwise).
    std::unique_ptr<OnnxVariants> variants;
    //! The model's inputs and outputs (the loaded graph's, or the file's declarations).
    std::vector<ModelIO> input_io, output_io;
    std::vector<TensorInfo> inputs, outputs;
    std::mutex pool_mutex;
    std::vector<std::unique_ptr<Context>> pool; //!< idle contexts of acquire_context()
};

struct Context::Impl {
    std::shared_ptr<Model> model; //!< keeps the model alive
    std::mutex run_mutex;         //!< held by a run, and by the destructor (waits for it)
    //! The graph `exec` runs: the model's, or the ONNX variant for the bound inputs.
    std::shared_ptr<const LoadedModel> variant;
    std::unique_ptr<Executable> exec;
    std::vector<InputValue> fed; //!< per model input: what is bound (caller or own memory)
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
    //! Per graph output: a dense copy of an output the run left strided (a view such as a
    //! slice), made when first read after the run; callers read outputs as dense row-major.
    mutable std::vector<Tensor> dense;

    size_t input_index(std::string_view name) const;
    size_t output_index(std::string_view name) const;
    //! The executable, compiled on first use (and after trim()); for a model with ONNX
    //! variants, the one of the variant for the bound inputs (which must all be bound).
    Executable& executable();
    //! Throws FAILED_PRECONDITION naming the first input not bound (after `what`).
    void require_bound(std::string_view what) const;
    //! The graph executable() runs (after a call to it).
    const LoadedModel& graph_model() const;
    //! Checks and binds caller memory to input `i` (zero copy).
    void bind_input(size_t i, const void* data, DType dtype, const int64_t* dims, size_t ndim);
    //! Binds `value` to input `i`, to be fed at the next run.
    void bind(size_t i, InputValue value);
    //! Checks caller memory as a tensor of input `i` (element `element` of a sequence input
    //! when not negative), zero copy.
    Tensor wrap_input(size_t i, long element, const void* data, DType dtype, const int64_t* dims,
                      size_t ndim);
    std::vector<int64_t> output_shape(size_t idx);
    //! Output `idx` of the graph (graph_model().outputs) of the last successful run, dense.
    const Tensor& output_tensor(size_t idx) const;
    //! Model output `idx` of the last successful run: a sequence's elements, a tensor (or an
    //! optional's value) alone, or none (an optional without a value).
    std::optional<std::vector<const Tensor*>> model_output(size_t idx) const;
    //! Model output `idx` as one tensor (a tensor, or an optional holding one).
    const Tensor& model_output_tensor(size_t idx) const;
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
 * values bound to shape inputs); any other file is mapped and verified as a braid model. With
 * `onnx_variants`, an ONNX model with symbolic dims or shape inputs is imported again for each
 * distinct fed shape and shape-input value (OnnxVariants), as the embedding API, braid-run and
 * braid-serve run it; without, it is one graph and an unbound shape input is an error (the
 * tools that print or convert one graph). The
 * embedding API's Model::load, braid-run, braid-inspect, braid-convert and braid-serve all
 * load through it. Throws braid's errors (translate() turns them into embed::Error).
 */
std::shared_ptr<Model> open_model(const std::string& path, const LoadOptions& options,
                                  bool onnx_variants = false);

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

/*!
 * Where model output `io` is among `graph`'s outputs: the indices of a sequence's elements, of
 * a tensor (or an optional's value) alone, or none for an optional without a value (ONNX
 * sequence and optional outputs: onnx_import::ImportOptions::sequence_outputs).
 */
std::optional<std::vector<size_t>> graph_outputs_of(const LoadedModel& graph, const ModelIO& io);

DType to_embed(braid::DType dtype);
braid::DType from_embed(DType dtype);

} // namespace braid::embed
