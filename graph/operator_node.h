// OperatorNode: the base of every operator. Its lifecycle, in order:
//
//  1. construction: the operator's make() creates it with its params and inputs
//     (add_input) and declares its outputs (add_output);
//  2. dtype: init_output_dtypes() sets each output's dtype or throws DTypeError;
//  3. shape inference: infer_output_shapes() computes output shapes from input shapes
//     (and input values where shape_needs_value() says so), returns false when a
//     dependency is not known yet, and throws ShapeError for incompatible inputs;
//     static values follow through value_inference();
//  4. memory hints: output_mem() says whether an output is planned memory, a read-only
//     view of an input, or bound by the operator itself; inplace_input() names an input
//     whose memory the output may take over when the input dies here; workspace_bytes() asks
//     for scratch memory the kernel uses during its step;
//  5. execute(): the CPU kernel, run on the operator's comp node with the tensors in ExecCtx;
//     kernels for other devices are registered per type (graph/kernel_registry.h) and may keep
//     state in the operator's kernel_state();
//  6. gradient: a rule registered for the operator type (graph/grad.h) builds each input's
//     gradient from the output gradients; types without a rule are not differentiable.
//
// An operator type is described once, in its own file pair in operators/: its descriptor
// (graph/operator_registry.h: params functions, gradient rule, kernels) is registered by the
// file's register_<family>_operators(), and a Param declared with fields() gets its hash,
// equality, description, dump and load from graph/param_fields.h (ParamOperator). The recipe:
// docs/adding_an_operator.md.
#pragma once

#include "graph/var_node.h"
#include "memory/workspace.h"

#include <memory>
#include <string>
#include <vector>

namespace braid {

namespace comm {
class GroupClient;
}
class Hasher;

//! Where an operator's output tensor comes from during execution.
enum class OutputMem : uint8_t {
    PLANNED,          //!< allocated by the executable's memory plan before the kernel runs
    READONLY_FORWARD, //!< a view of input forward_input(); execute() assigns it
    BOUND,            //!< the operator binds it in execute() (inputs, params, constants)
};

//! Name and comp node of an operator; unset fields are derived (comp node from the first
//! input, else the graph's default; name from the type and an id).
struct OperatorConfig {
    std::string name;
    CompNode comp_node;

    OperatorConfig() = default;
    OperatorConfig(const char* n) : name(n) {}
    OperatorConfig(std::string n) : name(std::move(n)) {}
    OperatorConfig(std::string n, CompNode cn) : name(std::move(n)), comp_node(cn) {}
    static OperatorConfig on(CompNode cn) { return OperatorConfig("", cn); }
};

//! Shapes and (optionally) values of an operator's inputs during shape inference.
class InferCtx {
public:
    InferCtx(const TensorShape* const* shapes, const Tensor* const* values, size_t n,
             bool may_block = false)
        : m_shapes(shapes), m_values(values), m_n(n), m_may_block(may_block) {}
    size_t nr_inputs() const { return m_n; }
    //! Input i's shape, or nullptr when not known yet.
    const TensorShape* shape(size_t i) const { return m_shapes[i]; }
    //! Input i's value (host-readable), or nullptr when not known yet.
    const Tensor* value(size_t i) const { return m_values[i]; }
    //! Whether a shape rule that needs peers (a collective's non-root taking the root's
    //! shape) may wait for them. False while the graph is built, so building never blocks on
    //! another rank; true when compile() re-infers the shapes still unknown.
    bool may_block() const { return m_may_block; }

private:
    const TensorShape* const* m_shapes;
    const Tensor* const* m_values;
    size_t m_n;
    bool m_may_block;
};

//! The tensors a kernel reads and writes. Outputs of kind PLANNED arrive allocated with
//! their final shape; READONLY_FORWARD and BOUND outputs are assigned by the kernel. The
//! kernel's scratch memory comes from workspace(): the step's, placed by the memory plan, or
//! (without one) a workspace of the context's own.
class ExecCtx {
public:
    ExecCtx(const Tensor* const* inputs, size_t nin, Tensor* const* outputs, size_t nout,
            Workspace* workspace = nullptr)
        : m_inputs(inputs), m_outputs(outputs), m_nin(nin), m_nout(nout), m_workspace(workspace) {}
    const Tensor& input(size_t i) const { return *m_inputs[i]; }
    Tensor& output(size_t i) const { return *m_outputs[i]; }
    size_t nr_inputs() const { return m_nin; }
    size_t nr_outputs() const { return m_nout; }
    //! The scratch memory of this execution (memory/workspace.h).
    Workspace& workspace() { return m_workspace ? *m_workspace : m_own_workspace; }

private:
    const Tensor* const* m_inputs;
    Tensor* const* m_outputs;
    size_t m_nin, m_nout;
    Workspace* m_workspace;
    Workspace m_own_workspace;
};

//! How an operator's output values may be known before execution.
enum class ValueInference : uint8_t {
    NONE,        //!< only at execution (inputs, parameters, communication)
    FROM_VALUES, //!< by running the kernel on the inputs' static values (constant folding)
    FROM_SHAPES, //!< from the inputs' shapes alone (GetVarShape); via infer_value()
};

//! Base of what a device kernel keeps in its operator between executions (cached device copies
//! of constants, staging buffers, optimizer moments); destroyed with the operator.
class KernelState {
public:
    virtual ~KernelState() = default;
};

//! Base class of every operator. Owned by its ComputingGraph; not thread-safe.
class OperatorNode {
public:
    virtual ~OperatorNode() = default;

    //! Stable type name, e.g. "Elemwise"; used in messages, hashing and serialization.
    virtual const char* type_name() const = 0;
    const std::string& name() const { return m_name; }
    ComputingGraph* graph() const { return m_graph; }
    CompNode comp_node() const { return m_comp_node; }
    const VarNodeArray& inputs() const { return m_inputs; }
    const VarNodeArray& outputs() const { return m_outputs; }
    VarNode* input(size_t i) const { return m_inputs.at(i); }
    VarNode* output(size_t i = 0) const { return m_outputs.at(i); }
    //! Unique within the graph, increasing in insertion order.
    size_t id() const { return m_id; }
    //! A short description for messages: `Elemwise(ADD) "h1"`, followed by the origin when
    //! there is one: `Reshape(target=2,96) "Reshape615" (from ONNX node "Resize_3" (Resize,
    //! opset 11))`. Every error that names an operator uses it.
    std::string describe() const;
    //! What the operator was made for, when it came from an imported model: `ONNX node
    //! "Resize_3" (Resize, opset 11)`; empty for operators of braid's own graph API. Set by
    //! ComputingGraph::OriginScope when the operator is inserted.
    const std::string& origin() const { return m_origin; }
    void set_origin(std::string origin) { m_origin = std::move(origin); }

    // ---- 1. params and deduplication ----
    //! Feeds every param that distinguishes two operators of this type into `h`.
    virtual void hash_params(Hasher& h) const {}
    //! True when `rhs` (same type) has equal params.
    virtual bool params_equal(const OperatorNode& rhs) const { return true; }
    //! False for operators that must never be merged with an equal-looking one
    //! (side effects, communication, user-fed inputs).
    virtual bool allow_dedup() const { return true; }
    //! Short params text for messages, e.g. "ADD"; empty when none.
    virtual std::string param_string() const { return {}; }
    //! The group manager's client of an operator that communicates (set at run time, never
    //! stored); an in-memory copy (graph/graph_copy.h) is bound to the same one.
    virtual std::shared_ptr<comm::GroupClient> group_client() const { return nullptr; }

    // ---- 2. dtype ----
    //! Sets every output's dtype; default: all outputs take input 0's dtype.
    virtual void init_output_dtypes();

    // ---- 3. shape and value inference ----
    //! Whether the shape rule needs input i's value (not only its shape).
    virtual bool shape_needs_value(size_t input_idx) const { return false; }
    //! Fills `out[k]` for every output; returns false when a needed input shape or value is
    //! unknown; throws ShapeError when inputs are incompatible.
    virtual bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const = 0;
    virtual ValueInference value_inference() const { return ValueInference::FROM_VALUES; }
    //! For FROM_SHAPES operators: the values of the outputs from the input shapes.
    virtual void infer_value(const InferCtx& ctx, Tensor* out) const {}

    // ---- 4. memory hints ----
    virtual OutputMem output_mem(size_t output_idx) const { return OutputMem::PLANNED; }
    //! For READONLY_FORWARD outputs: the input whose storage the output views.
    virtual size_t forward_input(size_t output_idx) const { return 0; }
    //! For READONLY_FORWARD outputs: true when the view of a contiguous input is always the
    //! same bytes in the same order (a reshape); an in-place writer may then take over the
    //! input's memory through the view. False for views that may stride or offset.
    virtual bool forward_keeps_layout(size_t output_idx) const { return false; }
    //! An input whose memory output `output_idx` may overwrite in place (same layout, the
    //! input is not read afterwards); -1 when none.
    virtual int inplace_input(size_t output_idx) const { return -1; }
    //! Whether the kernel accepts non-contiguous inputs; otherwise it gets contiguous ones.
    virtual bool accepts_strided_inputs() const { return false; }
    //! Bytes of scratch memory execute() asks ExecCtx::workspace() for, computed from the
    //! inputs' static shapes (called only when every input's shape is known, on operators of
    //! a CPU comp node); 0: none. The memory plan places them in the arena for this step alone.
    virtual size_t workspace_bytes() const { return 0; }

    // ---- 5. execution ----
    //! Non-empty for an operator that completes only together with peers (a collective):
    //! operators of one graph sharing this key run as one step of the schedule, so that no
    //! comp node waits for a peer's result before it has started its own part.
    virtual std::string peer_group() const { return {}; }
    //! Called on a device comp node at the end of a run, before the executable waits for the
    //! device: an operator whose queued work may wait for peers (a collective) waits for it
    //! here with a deadline, so a missing peer is an error instead of an endless wait.
    virtual void wait_queued_work() {}
    //! The CPU kernel.
    virtual void execute(ExecCtx& ctx) = 0;
    //! State slot for the device kernel of this operator (empty until the kernel fills it).
    std::unique_ptr<KernelState>& kernel_state() { return m_kernel_state; }

protected:
    explicit OperatorNode(const OperatorConfig& config) : m_config(config) {}
    //! Registers an input; call in the constructor, in order.
    void add_input(VarNode* var);
    //! Declares an output; call in the constructor, in order. `suffix` names it within the
    //! operator when there are several outputs.
    VarNode* add_output(const std::string& suffix = "");

private:
    friend class ComputingGraph;
    OperatorConfig m_config;
    std::string m_name;
    std::string m_origin;
    ComputingGraph* m_graph = nullptr;
    CompNode m_comp_node;
    size_t m_id = 0;
    VarNodeArray m_inputs;
    VarNodeArray m_outputs;
    std::vector<std::unique_ptr<VarNode>> m_output_storage;
    std::vector<std::string> m_output_suffixes;
    std::unique_ptr<KernelState> m_kernel_state;
};

/*!
 * True when executables bind `opr`'s outputs to their statically inferred values instead of
 * running it: a FROM_SHAPES operator (GetVarShape) whose output values are known statically.
 * It then reads none of its inputs at execution, so they are neither computed nor kept alive
 * for it (a gradient's `zeros_like(x)` does not hold x's memory).
 */
bool bound_to_static_values(const OperatorNode& opr);

} // namespace braid
