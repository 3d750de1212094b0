// braid's embedding API (C++): load a model once, run it from many threads.
//
//     auto model = braid::embed::Model::load("mlp.braid");
//     auto ctx = model->create_context();             // one per in-flight request
//     ctx->set_input("x", x.data(), braid::embed::DType::FLOAT32, {4, 784});
//     ctx->run();                                      // on this thread
//     auto y = ctx->output("y");                       // y.data, y.shape
//
// Threading: a Model is immutable and shared by its contexts; any number of contexts run at
// the same time, each from one thread at a time. Runs execute on the calling thread; kernels
// share one process-wide pool of sleeping workers (RunOptions::max_threads caps a run).
// Lifetime: a context keeps its model alive; destroying a context waits for its run.
// Errors: every failure throws braid::embed::Error with a Code and a message naming the input,
// output, file or operator and the values seen versus expected.
// See docs/embedding.md. This header needs only the C++20 standard library.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace braid::embed {

//! Version of this library ("MAJOR.MINOR.PATCH"); see docs/embedding.md for the ABI policy.
const char* version();

//! What went wrong; the same values as the C API's braid_code.
enum class Code : int {
    OK = 0,
    INVALID_ARGUMENT = 1,    //!< a wrong name, dtype, shape, size or null argument
    NOT_FOUND = 2,           //!< a file that does not exist or cannot be read
    INVALID_MODEL = 3,       //!< a model file that fails verification or cannot be built
    FAILED_PRECONDITION = 4, //!< a call out of order (e.g. an output read before a run)
    CANCELLED = 5,           //!< the run's cancel token was set
    DEADLINE_EXCEEDED = 6,   //!< the run passed its deadline
    OUT_OF_MEMORY = 7,       //!< the memory budget or the system ran out
    INTERNAL = 8,            //!< a bug in braid
};

//! The name of a code ("CANCELLED").
const char* code_name(Code code);

//! The error every call of this API throws.
class Error : public std::runtime_error {
public:
    Error(Code code, const std::string& message) : std::runtime_error(message), m_code(code) {}
    Code code() const { return m_code; }

private:
    Code m_code;
};

//! Element types; the same values as the C API's braid_dtype.
enum class DType : int {
    FLOAT32 = 0,
    FLOAT16 = 1,
    BFLOAT16 = 2,
    INT32 = 3,
    INT64 = 4,
    INT8 = 5,
    UINT8 = 6,
    BOOL = 7,
    FLOAT64 = 8, //!< IEEE binary64 (double)
    INT16 = 9,
    UINT16 = 10,
    UINT32 = 11,
    UINT64 = 12
};

//! Bytes per element.
size_t dtype_size(DType dtype);

/*!
 * Converts `count` elements of dtype `from` at `src` to dtype `to` at `dst`, as braid's own
 * kernels convert: float16 and bfloat16 round to nearest even, once (from float64 as well), and
 * overflow to infinity; float to integer truncates toward zero; bool is `value != 0`. `src` and
 * `dst` must not overlap. Throws Error (INVALID_ARGUMENT) for a dtype value out of range.
 */
void convert_elements(DType from, const void* src, DType to, void* dst, size_t count);

//! What a model input or output holds: a tensor, or (ONNX models) a sequence of tensors, an
//! optional tensor or an optional sequence; the same values as the C API's braid_value_kind.
enum class ValueKind : int { TENSOR = 0, SEQUENCE = 1, OPTIONAL = 2, OPTIONAL_SEQUENCE = 3 };

//! A model input or output: its name, dtype and shape (-1 for a dim fixed at run time). For a
//! sequence, dtype and shape are its elements'; an empty shape with `any_shape` set fits any.
struct TensorInfo {
    std::string name;
    DType dtype = DType::FLOAT32;
    std::vector<int64_t> shape;
    ValueKind kind = ValueKind::TENSOR;
    bool any_shape = false;
};

//! An output after a run: braid's memory, valid until the context's next run or trim(). Also an
//! element of a sequence input (set_sequence_input; `bytes` is not read there).
struct TensorView {
    const void* data = nullptr;
    DType dtype = DType::FLOAT32;
    std::vector<int64_t> shape;
    size_t bytes = 0;
};

//! Set from any thread to stop the runs that use it (they end with Code::CANCELLED).
class CancelToken {
public:
    void cancel() { m_flag.store(true, std::memory_order_relaxed); }
    void reset() { m_flag.store(false, std::memory_order_relaxed); }
    bool cancelled() const { return m_flag.load(std::memory_order_relaxed); }
    const std::atomic<bool>& flag() const { return m_flag; }

private:
    std::atomic<bool> m_flag{false};
};

//! Options of one run.
struct RunOptions {
    //! Stops the run when set (checked before every operator and between chunks of parallel
    //! kernels). Must outlive the run.
    const CancelToken* cancel = nullptr;
    //! The run fails with Code::DEADLINE_EXCEEDED once this passes; max(): none.
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    //! Most kernel threads this run uses (0: all of the shared pool).
    size_t max_threads = 0;
    //! Deterministic mode (docs/determinism.md): each output element's bits depend only on the
    //! model and on that element's own inputs, not on the batch, the threads or the comp node.
    //! Also on for every run when BRAID_DETERMINISTIC=1.
    bool deterministic = false;
};

//! How a model is loaded.
struct ModelOptions {
    //! Bytes the model's contexts may plan, as "8G" / "512M" / a number ("" : the
    //! BRAID_MEMORY_BUDGET environment variable, else physical memory).
    std::string memory_budget;
};

class Context;

//! A loaded model: immutable, shared by every context created from it. Thread-safe.
class Model : public std::enable_shared_from_this<Model> {
public:
    //! Maps the file at `path` (weights are used in place from the mapping, never copied). A
    //! path ending in ".onnx" is imported as ONNX (docs/onnx.md).
    static std::shared_ptr<Model> load(const std::string& path, const ModelOptions& options = {});
    //! An ONNX model whose shape inputs (graph inputs an op reads as a shape, axes, sizes or
    //! scales: docs/onnx.md) get the values in `shape_inputs` when it is imported; those inputs
    //! become constants and are not among inputs(). Values are converted to each input's dtype.
    static std::shared_ptr<Model>
    load(const std::string& path, const ModelOptions& options,
         const std::map<std::string, std::vector<double>>& shape_inputs);
    //! A model in memory. With `copy` false the buffer is used in place (no copy; a 64-byte
    //! aligned buffer also serves the weights in place): keep it alive and unchanged while the
    //! model lives. With `copy` true the bytes may be freed on return.
    static std::shared_ptr<Model> load_buffer(const void* data, size_t size, bool copy,
                                              const ModelOptions& options = {});
    ~Model();

    const std::vector<TensorInfo>& inputs() const;
    const std::vector<TensorInfo>& outputs() const;
    //! A new context (no weight copy).
    std::unique_ptr<Context> create_context();
    //! A context from the model's pool (created when the pool is empty); it returns to the
    //! pool when the last reference goes.
    std::shared_ptr<Context> acquire_context();
    //! Bytes of the model's weights (shared by all contexts).
    size_t weight_bytes() const;
    //! Frees the idle contexts of the pool.
    void trim();

    struct Impl;
    explicit Model(std::unique_ptr<Impl> impl);
    Impl& impl() { return *m_impl; }

private:
    std::unique_ptr<Impl> m_impl;
};

//! The state of one request: bound inputs and outputs, and the memory of its runs. Use from
//! one thread at a time; many contexts of one model run at the same time.
class Context {
public:
    ~Context(); //!< waits for a run in flight

    //! Binds input `name` to caller memory (zero copy): `data` holds a dense row-major tensor of
    //! `dtype` and `shape`, and must stay unchanged until the next run returns.
    void set_input(const std::string& name, const void* data, DType dtype,
                   const std::vector<int64_t>& shape);
    //! Binds input `name` to memory braid allocates for `shape`; returns it for the caller to
    //! fill (valid until the input is bound again).
    void* input_buffer(const std::string& name, const std::vector<int64_t>& shape);
    //! Binds sequence input `name` to `elements` (caller memory, zero copy, each unchanged until
    //! the next run returns); none is an empty sequence. A model imported per sequence length
    //! and element shapes (docs/onnx.md) compiles once per distinct one.
    void set_sequence_input(const std::string& name, const std::vector<TensorView>& elements);
    //! Binds optional input `name` to no value (set_input or set_sequence_input give it one).
    void set_input_none(const std::string& name);
    //! Each run copies output `name` into caller memory of `bytes` (checked at the run).
    void bind_output(const std::string& name, void* data, size_t bytes);
    //! Output `name`'s shape for the bound inputs, by static inference (before running).
    std::vector<int64_t> output_shape(const std::string& name);

    //! Runs the model on the calling thread.
    void run(const RunOptions& options = {});
    //! Runs on another thread; the future rethrows the run's Error.
    std::future<void> run_async(const RunOptions& options = {});
    //! Runs on another thread and calls `done` there with Code::OK or the error.
    void run_async(const RunOptions& options, std::function<void(Code, const std::string&)> done);

    //! Output `name` of the last run (a tensor, or an optional holding one).
    TensorView output(const std::string& name) const;
    //! Sequence output `name` of the last run (a sequence, or an optional holding one), element
    //! by element.
    std::vector<TensorView> sequence_output(const std::string& name) const;
    //! Whether output `name` holds a value after the last run (false only for an optional
    //! output without one; output() and sequence_output() of that are FAILED_PRECONDITION).
    bool has_output(const std::string& name) const;
    //! Bytes of the context's own memory: its planned arena and the outputs it keeps.
    size_t arena_bytes() const;
    //! Frees the context's arena and compiled plan; the next run rebuilds them.
    void trim();

    struct Impl;
    explicit Context(std::shared_ptr<Impl> impl);
    Impl& impl() { return *m_impl; }

private:
    std::shared_ptr<Impl> m_impl;
};

} // namespace braid::embed
