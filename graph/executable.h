// Executable: a compiled graph. Holds the per-comp-node execution sequences and the
// tensors of every var, and runs them asynchronously.
//
// execute() returns at once (kernels on "cpu:default" excepted, which run in the caller);
// wait() joins and rethrows the first kernel error. An executable is driven from one thread;
// several executables of one graph are independent (each holds its own fed inputs, shapes and
// memory) and may run concurrently from different threads.
#pragma once

#include "graph/computing_graph.h"
#include "graph/memory_plan.h"
#include "graph/symbol_var.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>

namespace braid {

class InputNode;
class RunControl;

//! A compiled computation. Not thread-safe: call execute()/wait()/feed() from one thread.
//! Executables compiled from one graph do not share fed values or memory: each may be driven
//! from its own thread (parameters, SharedParam tensors, are shared and read by all).
class Executable {
public:
    Executable(std::shared_ptr<ComputingGraph> graph, const std::vector<OutputSpec>& outputs);
    ~Executable();
    Executable(const Executable&) = delete;
    Executable& operator=(const Executable&) = delete;

    //! Sets the value of the input operator named `name` for this executable's next
    //! executions (waiting for a run in flight first); other executables of the graph keep
    //! their own. The tensor is shared, not copied: keep it unchanged until the run that reads
    //! it has been waited for. Throws GraphError for an unknown name or an empty tensor and
    //! DTypeError for a wrong dtype.
    Executable& feed(const std::string& name, Tensor value);
    //! Same, naming the input by its var.
    Executable& feed(const SymbolVar& input, Tensor value);
    //! Whether `input` is an input of this executable (an Input whose value no output needs,
    //! one read only for its shape say, is not, and feeding it is an error).
    bool takes(const SymbolVar& input) const;

    //! Starts one run. A run still in flight is waited for first. Throws GraphError when an
    //! input was never fed. A changed input shape re-infers shapes and re-plans memory.
    void execute();
    //! Blocks until the run finished; rethrows the first error a kernel raised.
    void wait();
    //! execute() then wait().
    void run() {
        execute();
        wait();
    }

    size_t nr_outputs() const { return m_outputs.size(); }
    //! Output i's value, always in host memory (outputs computed on a device are copied back
    //! before wait() returns). Valid after wait() until the next execute(); throws GraphError
    //! when read before wait() or for an output compiled with a callback.
    const Tensor& output(size_t i) const;
    //! The same, naming the output by its var.
    const Tensor& output(const SymbolVar& var) const;

    //! Operators in execution order, per comp node.
    std::vector<std::pair<CompNode, std::vector<OperatorNode*>>> sequences() const;
    //! Number of operators executed per run.
    size_t nr_operators() const;
    //! What the memory plan of the current shapes did, per comp node. Replaced when a new
    //! input shape makes execute() re-plan.
    const MemoryReport& memory_report() const { return m_memory_plan->report(); }
    ComputingGraph& graph() const { return *m_graph; }

    //! Called right after each operator ran, on its comp node's thread, with the kernel's
    //! start and end times (profilers). Must be thread-safe: comp nodes call it concurrently.
    using StepObserver =
        std::function<void(const OperatorNode& opr, std::chrono::steady_clock::time_point begin,
                           std::chrono::steady_clock::time_point end)>;
    //! Runs started from now on check `rc` before every operator and inside parallel kernels,
    //! and fail with CancelledError or DeadlineExceededError (naming the operator) once it
    //! says stop; null (the default): never stopped. `rc` must outlive those runs.
    void set_run_control(const RunControl* rc) { m_run_control = rc; }
    //! Installs `observer` (null: none, the default, which costs one branch per operator).
    //! Call between runs, not while one is in flight.
    void set_step_observer(StepObserver observer) { m_step_observer = std::move(observer); }

private:
    struct Step;
    struct NodeSeq;

    void build_sequences(const std::vector<OutputSpec>& outputs);
    void prepare();
    void feed_input(size_t i, Tensor value);
    void allocate_memory();
    void run_node(NodeSeq& seq, uint64_t gen);
    void run_step(Step& step);
    void finish_device_run(NodeSeq& seq);
    bool wait_progress(NodeSeq& node, uint64_t target);
    void record_error(std::exception_ptr err, OperatorNode* opr);
    size_t var_index(VarNode* var) const;

    std::shared_ptr<ComputingGraph> m_graph;
    std::vector<VarNode*> m_vars; //!< every var the executable touches
    std::unordered_map<VarNode*, size_t> m_var_idx;
    std::vector<Tensor> m_tensors; //!< runtime tensor of m_vars[i]
    const RunControl* m_run_control = nullptr;
    bool m_deterministic = false; //!< this run's kernel mode (base/determinism.h)
    std::vector<std::unique_ptr<NodeSeq>> m_nodes;
    std::vector<InputNode*> m_inputs;
    std::vector<Tensor> m_fed; //!< fed tensor of m_inputs[i]; the Input steps read it
    std::vector<TensorShape> m_planned_input_shapes;
    std::vector<OutputSpec> m_outputs;
    std::vector<size_t> m_output_idx;
    std::unique_ptr<MemoryPlan> m_memory_plan;
    std::vector<Tensor> m_fetched; //!< host copies of outputs computed on a device

    enum class State { NEVER_RUN, RUNNING, DONE };
    State m_state = State::NEVER_RUN;
    uint64_t m_generation = 0;
    std::atomic<uint32_t> m_running_nodes{0};
    std::atomic<bool> m_failed{false};
    std::mutex m_error_mutex;
    std::exception_ptr m_error;
    StepObserver m_step_observer;
};

} // namespace braid
