#include "operators/io.h"
#include "graph/operator_registry.h"

#include "base/error.h"
#include "base/hash.h"

#include <cstring>

namespace braid::opr {

Input::Input(DType dtype, const TensorShape& shape, const OperatorConfig& config)
    : InputNode(dtype, config), m_shape(shape) {
    add_output();
}

SymbolVar Input::make(ComputingGraph& graph, const std::string& name, DType dtype,
                      const TensorShape& shape, CompNode cn) {
    if (name.empty()) BRAID_THROW(GraphError, "Input: an input needs a non-empty name");
    for (auto& opr : graph.operators())
        if (dynamic_cast<InputNode*>(opr.get()) && opr->name() == name)
            BRAID_THROW(GraphError, "Input \"{}\": the graph already has an input of that name",
                        name);
    auto* opr = graph.insert_opr(std::make_unique<Input>(dtype, shape, OperatorConfig(name, cn)));
    return opr->output(0);
}

void Input::init_output_dtypes() {
    output(0)->set_dtype(input_dtype());
}

bool Input::infer_output_shapes(const InferCtx&, TensorShape* out) const {
    out[0] = fed_shape() ? *fed_shape() : m_shape;
    return true;
}

void Input::execute(ExecCtx& ctx) {
    const Tensor& fed = ctx.input(0); // the running executable's fed tensor (InputNode)
    Tensor& out = ctx.output(0);
    if (fed.device() == comp_node().device()) {
        out = fed.contiguous(); // zero copy when contiguous
    } else {
        if (out.empty() || out.shape() != fed.shape())
            out = Tensor(fed.shape(), fed.dtype(), comp_node().allocator());
        comp_node().copy(out, fed); // e.g. a tensor fed from a CUDA device
    }
}

ImmutableTensor::ImmutableTensor(Tensor value, const OperatorConfig& config)
    : OperatorNode(config), m_value(std::move(value)) {
    if (m_value.empty()) BRAID_THROW(GraphError, "ImmutableTensor: the value is an empty tensor");
    m_value = m_value.contiguous();
    add_output();
}

SymbolVar ImmutableTensor::make(ComputingGraph& graph, const Tensor& value,
                                const OperatorConfig& config) {
    return graph.insert_opr(std::make_unique<ImmutableTensor>(value, config))->output(0);
}

SymbolVar ImmutableTensor::make_scalar(ComputingGraph& graph, double value, DType dtype,
                                       const OperatorConfig& config) {
    Tensor t(TensorShape{}, dtype);
    store_from_double(dtype, t.raw_ptr(), 0, value);
    return make(graph, t, config);
}

std::optional<float> float32_scalar_constant(VarNode* var) {
    auto* c = var ? dynamic_cast<ImmutableTensor*>(var->owner()) : nullptr;
    if (!c || var->dtype() != dtype::Float32() || c->comp_node().device().kind != Device::Kind::CPU)
        return std::nullopt;
    const Tensor& t = c->value();
    if (t.layout().total_nr_elems() != 1 || !t.layout().is_contiguous()) return std::nullopt;
    return *t.ptr<float>();
}

void ImmutableTensor::hash_params(Hasher& h) const {
    h.add_pod(m_value.dtype().enumv());
    for (size_t d : m_value.shape().dims()) h.add_pod(d);
    h.add_bytes(m_value.raw_ptr(), m_value.nr_bytes());
}

bool ImmutableTensor::params_equal(const OperatorNode& rhs) const {
    auto& o = static_cast<const ImmutableTensor&>(rhs).m_value;
    return o.dtype() == m_value.dtype() && o.shape() == m_value.shape() &&
           std::memcmp(o.raw_ptr(), m_value.raw_ptr(), m_value.nr_bytes()) == 0;
}

void ImmutableTensor::init_output_dtypes() {
    output(0)->set_dtype(m_value.dtype());
}

bool ImmutableTensor::infer_output_shapes(const InferCtx&, TensorShape* out) const {
    out[0] = m_value.shape();
    return true;
}

SharedParam::SharedParam(std::shared_ptr<Tensor> param, const OperatorConfig& config)
    : OperatorNode(config), m_param(std::move(param)) {
    if (!m_param || m_param->empty())
        BRAID_THROW(GraphError, "SharedParam \"{}\": the parameter tensor is null or empty",
                    config.name);
    if (!m_param->layout().is_contiguous())
        BRAID_THROW(GraphError, "SharedParam \"{}\": the parameter tensor must be contiguous",
                    config.name);
    add_output();
}

SymbolVar SharedParam::make(ComputingGraph& graph, std::shared_ptr<Tensor> param,
                            const OperatorConfig& config) {
    return graph.insert_opr(std::make_unique<SharedParam>(std::move(param), config))->output(0);
}

void SharedParam::hash_params(Hasher& h) const {
    h.add_pod(m_param.get());
}

bool SharedParam::params_equal(const OperatorNode& rhs) const {
    return static_cast<const SharedParam&>(rhs).m_param == m_param;
}

void SharedParam::init_output_dtypes() {
    output(0)->set_dtype(m_param->dtype());
}

bool SharedParam::infer_output_shapes(const InferCtx&, TensorShape* out) const {
    out[0] = m_param->shape();
    return true;
}

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

static void dump_input(const OperatorNode& opr, ParamWriter& w) {
    auto& in = opr_cast<Input>(opr);
    w.write_dtype("dtype", in.declared_dtype());
    // The shape the graph's static shapes currently follow (a fed shape, else the declared).
    auto* var = in.output(0);
    w.write_shape("shape", var->shape_known() ? var->shape() : in.declared_shape());
}

static SymbolVarArray load_input(const OprLoadContext& ctx) {
    ctx.expect_inputs(0, 0);
    TensorShape shape = ctx.params.read_shape("shape");
    auto it = ctx.input_shapes.find(ctx.config.name);
    if (it != ctx.input_shapes.end()) shape = it->second;
    return {Input::make(ctx.graph, ctx.config.name, ctx.params.read_dtype("dtype"), shape,
                        ctx.config.comp_node)};
}

static void dump_immutable_tensor(const OperatorNode& opr, ParamWriter& w) {
    w.write_tensor("value", opr_cast<ImmutableTensor>(opr).value());
}

static SymbolVarArray load_immutable_tensor(const OprLoadContext& ctx) {
    ctx.expect_inputs(0, 0);
    return {ImmutableTensor::make(ctx.graph, ctx.params.read_tensor("value"), ctx.config)};
}

static void dump_shared_param(const OperatorNode& opr, ParamWriter& w) {
    w.write_tensor("value", *opr_cast<SharedParam>(opr).param());
}

static SymbolVarArray load_shared_param(const OprLoadContext& ctx) {
    ctx.expect_inputs(0, 0);
    return {SharedParam::make(ctx.graph, ctx.params.read_shared_tensor("value"), ctx.config)};
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_io_kernels();
}
#endif

void register_io_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("Input", "io", dump_input, load_input);
    reg.add("ImmutableTensor", "io", dump_immutable_tensor, load_immutable_tensor);
    reg.add("SharedParam", "io", dump_shared_param, load_shared_param);
#if BRAID_WITH_CUDA
    cuda::register_io_kernels(); // operators/cuda/io.cpp
#endif
}

} // namespace braid::opr
