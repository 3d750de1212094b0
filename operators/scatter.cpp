#include "operators/scatter.h"
#include "graph/operator_registry.h"

#include "base/error.h"
#include "base/hash.h"
#include "operators/kernel_utils.h"

#include <cstring>

namespace braid::opr {

namespace {

//! Columns of one work item: items never write the same output element.
constexpr size_t COLS = 256;

void check_dtypes(const OperatorNode& opr) {
    VarNode *x = opr.input(0), *index = opr.input(1), *value = opr.input(2);
    if (index->dtype() != dtype::Int32())
        BRAID_THROW(DTypeError, "{}: index \"{}\" has dtype {}; expected int32", opr.describe(),
                    index->name(), index->dtype().name());
    DType dt = x->dtype();
    if (!dt.is_float() && dt != dtype::Int32() && dt != dtype::Int64())
        BRAID_THROW(DTypeError, "{}: input \"{}\" has dtype {}; expected {}", opr.describe(),
                    x->name(), dt.name(),
                    dtype_list({dtype::Float32(), dtype::Float16(), dtype::BFloat16(),
                                dtype::Float64(), dtype::Int32(), dtype::Int64()}));
    if (value->dtype() != dt)
        BRAID_THROW(DTypeError, "{}: value \"{}\" has dtype {}; expected the input's {}",
                    opr.describe(), value->name(), value->dtype().name(), dt.name());
}

[[noreturn]] void bad_index(const std::string& who, int32_t k, size_t pos, size_t axis, size_t n) {
    BRAID_THROW(ValueError,
                "{}: index {} at position {} is out of range for axis {} of size {} (valid: "
                "0..{})",
                who, k, pos, axis, n, long(n) - 1);
}

//! Runs `add(acc, value)` where acc is a contiguous tensor of x's values in the compute type
//! (the output itself for float32, float64 and integers, a float32 copy for float16/bfloat16) and
//! stores the result into `out`.
template <typename Fn>
void accumulate(const Tensor& x, const Tensor& value, Tensor& out, Fn&& add) {
    DType dt = out.dtype();
    if (dt == dtype::Float32() || dt == dtype::Float64() || dt == dtype::Int32() ||
        dt == dtype::Int64()) {
        if (out.raw_ptr() != x.raw_ptr()) parallel_copy(out, x);
        switch (dt.enumv()) {
        case DTypeEnum::FLOAT32:
            return add(out.ptr<float>(), value.ptr<float>());
        case DTypeEnum::FLOAT64:
            return add(out.ptr<double>(), value.ptr<double>());
        case DTypeEnum::INT32:
            return add(out.ptr<int32_t>(), value.ptr<int32_t>());
        default:
            return add(out.ptr<int64_t>(), value.ptr<int64_t>());
        }
    }
    Tensor acc = as_float32(x), vf = as_float32(value);
    add(acc.ptr<float>(), vf.ptr<float>());
    store_float32(acc, out);
}

} // namespace

// ---------------------------------------------------------------- ScatterAdd
ScatterAdd::ScatterAdd(VarNode* x, VarNode* index, VarNode* value, int axis,
                       const OperatorConfig& config)
    : ParamOperator({axis}, config) {
    add_input(x);
    add_input(index);
    add_input(value);
    add_output();
}

SymbolVar ScatterAdd::make(SymbolVar x, SymbolVar index, SymbolVar value, int axis,
                           const OperatorConfig& config) {
    return x.graph()
        .insert_opr(
            std::make_unique<ScatterAdd>(x.node(), index.node(), value.node(), axis, config))
        ->output(0);
}

void ScatterAdd::init_output_dtypes() {
    check_dtypes(*this);
    output(0)->set_dtype(input(0)->dtype());
}

bool ScatterAdd::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1) || !ctx.shape(2)) return false;
    const TensorShape &xs = *ctx.shape(0), &is = *ctx.shape(1), &vs = *ctx.shape(2);
    size_t axis = normalize_axis(m_param.axis, xs.ndim(), describe());
    if (is != vs)
        BRAID_THROW(ShapeError, "{}: index shape {} and value shape {} differ", describe(),
                    is.to_string(), vs.to_string());
    bool ok = is.ndim() == xs.ndim();
    for (size_t d = 0; ok && d < xs.ndim(); ++d) ok = d == axis || is[d] == xs[d];
    if (!ok)
        BRAID_THROW(ShapeError,
                    "{}: index shape {} does not fit input shape {}: it needs the input's rank "
                    "and dims on every axis but {}",
                    describe(), is.to_string(), xs.to_string(), m_param.axis);
    out[0] = xs;
    return true;
}

void ScatterAdd::execute(ExecCtx& ctx) {
    const Tensor &x = ctx.input(0), &idx = ctx.input(1), &value = ctx.input(2);
    Tensor& out = ctx.output(0);
    if (out.shape().is_empty()) return;
    size_t axis = normalize_axis(m_param.axis, x.shape().ndim(), describe());
    AxisSplit xs = split_shape(x.shape(), axis, axis + 1);
    size_t m = idx.shape()[axis];
    size_t chunks = (xs.inner + COLS - 1) / COLS;
    const int32_t* ip = idx.ptr<int32_t>();
    std::string who = describe();
    accumulate(x, value, out, [&](auto* o, const auto* v) {
        parallel_range(xs.outer * chunks, m * COLS, [&](size_t b, size_t e) {
            for (size_t item = b; item < e; ++item) {
                size_t outer = item / chunks, c0 = (item % chunks) * COLS;
                size_t c1 = std::min(xs.inner, c0 + COLS);
                auto* oo = o + outer * xs.n * xs.inner;
                for (size_t j = 0; j < m; ++j) {
                    size_t row = (outer * m + j) * xs.inner;
                    for (size_t i = c0; i < c1; ++i) {
                        int32_t k = ip[row + i];
                        if (k < 0 || size_t(k) >= xs.n) bad_index(who, k, row + i, axis, xs.n);
                        oo[size_t(k) * xs.inner + i] += v[row + i];
                    }
                }
            }
        });
    });
}

SymbolVar scatter_add(SymbolVar x, SymbolVar index, SymbolVar value, int axis) {
    return ScatterAdd::make(x, index, value, axis);
}

// ---------------------------------------------------------------- IndexAdd
IndexAdd::IndexAdd(VarNode* x, VarNode* index, VarNode* value, int axis,
                   const OperatorConfig& config)
    : ParamOperator({axis}, config) {
    add_input(x);
    add_input(index);
    add_input(value);
    add_output();
}

SymbolVar IndexAdd::make(SymbolVar x, SymbolVar index, SymbolVar value, int axis,
                         const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<IndexAdd>(x.node(), index.node(), value.node(), axis, config))
        ->output(0);
}

void IndexAdd::init_output_dtypes() {
    check_dtypes(*this);
    output(0)->set_dtype(input(0)->dtype());
}

bool IndexAdd::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1) || !ctx.shape(2)) return false;
    const TensorShape &xs = *ctx.shape(0), &is = *ctx.shape(1), &vs = *ctx.shape(2);
    size_t axis = normalize_axis(m_param.axis, xs.ndim(), describe());
    if (is.ndim() != 1)
        BRAID_THROW(ShapeError, "{}: index has shape {}; expected 1-D", describe(), is.to_string());
    bool ok = vs.ndim() == xs.ndim();
    for (size_t d = 0; ok && d < xs.ndim(); ++d) ok = vs[d] == (d == axis ? is[0] : xs[d]);
    if (!ok)
        BRAID_THROW(ShapeError,
                    "{}: value shape {} does not fit input {} and index {}: it needs the input's "
                    "dims, with the index length on axis {}",
                    describe(), vs.to_string(), xs.to_string(), is.to_string(), m_param.axis);
    out[0] = xs;
    return true;
}

void IndexAdd::execute(ExecCtx& ctx) {
    const Tensor &x = ctx.input(0), &idx = ctx.input(1), &value = ctx.input(2);
    Tensor& out = ctx.output(0);
    if (out.shape().is_empty()) return;
    size_t axis = normalize_axis(m_param.axis, x.shape().ndim(), describe());
    AxisSplit xs = split_shape(x.shape(), axis, axis + 1);
    size_t m = idx.shape()[0];
    const int32_t* ip = idx.ptr<int32_t>();
    for (size_t j = 0; j < m; ++j)
        if (ip[j] < 0 || size_t(ip[j]) >= xs.n) bad_index(describe(), ip[j], j, axis, xs.n);
    size_t chunks = (xs.inner + COLS - 1) / COLS;
    accumulate(x, value, out, [&](auto* o, const auto* v) {
        parallel_range(xs.outer * chunks, m * COLS, [&](size_t b, size_t e) {
            for (size_t item = b; item < e; ++item) {
                size_t outer = item / chunks, c0 = (item % chunks) * COLS;
                size_t c1 = std::min(xs.inner, c0 + COLS);
                for (size_t j = 0; j < m; ++j) {
                    auto* orow = o + (outer * xs.n + size_t(ip[j])) * xs.inner;
                    const auto* vrow = v + (outer * m + j) * xs.inner;
                    for (size_t i = c0; i < c1; ++i) orow[i] += vrow[i];
                }
            }
        });
    });
}

SymbolVar index_add(SymbolVar x, SymbolVar index, SymbolVar value, int axis) {
    return IndexAdd::make(x, index, value, axis);
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

void register_scatter_operators() {
    auto& reg = OperatorRegistry::instance();
    // Loaded by make(), which checks the axis, the shapes and the dtypes.
    reg.add("ScatterAdd", "scatter", dump_param<ScatterAdd>, load_param<ScatterAdd>);
    reg.add("IndexAdd", "scatter", dump_param<IndexAdd>, load_param<IndexAdd>);
    register_grad_rule("ScatterAdd", ScatterAdd::grad_rule);
    register_grad_rule("IndexAdd", IndexAdd::grad_rule);
}

} // namespace braid::opr
