#include "operators/fill.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "operators/kernel_utils.h"
#include "operators/tensor_manip.h"

#include <cmath>
#include <cstring>

namespace braid::opr {

namespace {

template <typename T> void fill_elems(uint8_t* p, const void* bits, size_t n) {
    T v;
    std::memcpy(&v, bits, sizeof(T));
    T* q = reinterpret_cast<T*>(p);
    parallel_range(n, 1, [&](size_t b, size_t e) { std::fill(q + b, q + e, v); });
}

//! Fills a contiguous tensor with `value` converted to its dtype.
void fill_tensor(Tensor& t, double value) {
    size_t n = t.shape().total_nr_elems();
    if (!n) return;
    uint64_t bits = 0;
    store_from_double(t.dtype(), &bits, 0, value);
    switch (t.dtype().size()) {
    case 1:
        return fill_elems<uint8_t>(t.raw_ptr(), &bits, n);
    case 2:
        return fill_elems<uint16_t>(t.raw_ptr(), &bits, n);
    case 4:
        return fill_elems<uint32_t>(t.raw_ptr(), &bits, n);
    default:
        return fill_elems<uint64_t>(t.raw_ptr(), &bits, n);
    }
}

} // namespace

// ---------------------------------------------------------------- Fill
Fill::Fill(VarNode* shape_var, const TensorShape& shape, double value, DType dtype,
           const OperatorConfig& config)
    : ParamOperator({value, dtype, shape_var ? std::nullopt : std::optional(shape)}, config) {
    if (shape_var) add_input(shape_var);
    add_output();
}

SymbolVar Fill::make(ComputingGraph& graph, const TensorShape& shape, double value, DType dtype,
                     const OperatorConfig& config) {
    return graph.insert_opr(std::make_unique<Fill>(nullptr, shape, value, dtype, config))
        ->output(0);
}

SymbolVar Fill::make(SymbolVar shape_var, double value, DType dtype, const OperatorConfig& config) {
    return shape_var.graph()
        .insert_opr(std::make_unique<Fill>(shape_var.node(), TensorShape{}, value, dtype, config))
        ->output(0);
}

void Fill::init_output_dtypes() {
    if (!m_param.dtype.valid()) BRAID_THROW(DTypeError, "{}: the dtype is invalid", describe());
    if (!inputs().empty() && !input(0)->dtype().is_integer())
        BRAID_THROW(DTypeError, "{}: the shape var \"{}\" has dtype {}; expected an integer type",
                    describe(), input(0)->name(), input(0)->dtype().name());
    output(0)->set_dtype(m_param.dtype);
}

bool Fill::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (ctx.nr_inputs() == 0) {
        out[0] = *m_param.shape;
        return true;
    }
    if (!ctx.value(0)) return false;
    std::vector<size_t> dims;
    for (long v : shape_value_to_dims(*ctx.value(0), describe())) {
        if (v < 0)
            BRAID_THROW(ShapeError, "{}: negative dim {} in the target shape", describe(), v);
        dims.push_back(size_t(v));
    }
    out[0] = TensorShape(dims);
    return true;
}

void Fill::execute(ExecCtx& ctx) {
    fill_tensor(ctx.output(0), m_param.value);
}

SymbolVar fill(ComputingGraph& graph, const TensorShape& shape, double value, DType dtype) {
    return Fill::make(graph, shape, value, dtype);
}
SymbolVar zeros(ComputingGraph& graph, const TensorShape& shape, DType dtype) {
    return Fill::make(graph, shape, 0.0, dtype);
}
SymbolVar ones(ComputingGraph& graph, const TensorShape& shape, DType dtype) {
    return Fill::make(graph, shape, 1.0, dtype);
}
SymbolVar full_like(SymbolVar x, double value) {
    return Fill::make(x.symshape(), value, x.dtype());
}
SymbolVar zeros_like(SymbolVar x) {
    return full_like(x, 0.0);
}
SymbolVar ones_like(SymbolVar x) {
    return full_like(x, 1.0);
}

// ---------------------------------------------------------------- Arange
Arange::Arange(double start, double stop, double step, DType dtype, const OperatorConfig& config)
    : ParamOperator({start, stop, step, dtype}, config) {
    if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(stop))
        BRAID_THROW(ValueError,
                    "Arange: start {}, stop {}, step {}: the bounds must be finite and the step "
                    "finite and nonzero",
                    start, stop, step);
    add_output();
}

SymbolVar Arange::make(ComputingGraph& graph, double start, double stop, double step, DType dtype,
                       const OperatorConfig& config) {
    return graph.insert_opr(std::make_unique<Arange>(start, stop, step, dtype, config))->output(0);
}

void Arange::init_output_dtypes() {
    if (!m_param.dtype.valid() || m_param.dtype == dtype::Bool())
        BRAID_THROW(DTypeError, "{}: dtype {} is not supported; expected a float or integer type",
                    describe(), m_param.dtype.name());
    output(0)->set_dtype(m_param.dtype);
}

bool Arange::infer_output_shapes(const InferCtx&, TensorShape* out) const {
    double len = std::ceil((m_param.stop - m_param.start) / m_param.step);
    // Also refuses an infinite length (bounds whose difference overflows a double).
    constexpr double MAX_LEN = double(uint64_t(1) << 48);
    if (len > MAX_LEN)
        BRAID_THROW(ShapeError, "{}: {}:{}:{} has {} elements, more than 2^48", describe(),
                    m_param.start, m_param.stop, m_param.step, len);
    out[0] = TensorShape{len > 0 ? size_t(len) : size_t(0)};
    return true;
}

void Arange::execute(ExecCtx& ctx) {
    Tensor& y = ctx.output(0);
    size_t n = y.shape().total_nr_elems();
    if (y.dtype() == dtype::Float32()) {
        float* p = y.ptr<float>();
        for (size_t i = 0; i < n; ++i) p[i] = float(m_param.start + double(i) * m_param.step);
    } else {
        for (size_t i = 0; i < n; ++i)
            store_from_double(y.dtype(), y.raw_ptr(), i, m_param.start + double(i) * m_param.step);
    }
}

SymbolVar arange(ComputingGraph& graph, double start, double stop, double step, DType dtype) {
    return Arange::make(graph, start, stop, step, dtype);
}

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

static SymbolVarArray load_fill(const OprLoadContext& ctx) {
    ctx.expect_inputs(0, 1);
    auto p = read_param<Fill::Param>(ctx.params);
    if (ctx.inputs.size() == 1) return {Fill::make(ctx.input(0), p.value, p.dtype, ctx.config)};
    if (!p.shape)
        BRAID_THROW(SerializationError,
                    "{}: param \"shape\" is missing (needed without a shape input)",
                    ctx.params.context());
    return {Fill::make(ctx.graph, *p.shape, p.value, p.dtype, ctx.config)};
}

static SymbolVarArray load_arange(const OprLoadContext& ctx) {
    ctx.expect_inputs(0, 0);
    auto p = read_param<Arange::Param>(ctx.params);
    if (!std::isfinite(p.start) || !std::isfinite(p.stop) || !std::isfinite(p.step) || p.step == 0)
        BRAID_THROW(SerializationError,
                    "{}: params start {}, stop {}, step {}: the bounds must be finite and the "
                    "step finite and nonzero",
                    ctx.params.context(), p.start, p.stop, p.step);
    // make() refuses more than 2^48 elements (ShapeError).
    return {Arange::make(ctx.graph, p.start, p.stop, p.step, p.dtype, ctx.config)};
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_fill_kernels();
}
#endif

void register_fill_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("Fill", "fill", dump_param<Fill>, load_fill);
    reg.add("Arange", "fill", dump_param<Arange>, load_arange);
    // Generators: their values do not depend on any input (a Fill's only input is a shape),
    // so no input gets a gradient.
    auto no_input_grad = [](OperatorNode&, size_t, const VarNodeArray&) -> VarNode* {
        return nullptr;
    };
    register_grad_rule("Fill", no_input_grad);
    register_grad_rule("Arange", no_input_grad);
#if BRAID_WITH_CUDA
    cuda::register_fill_kernels(); // operators/cuda/fill.cpp
#endif
}

} // namespace braid::opr
