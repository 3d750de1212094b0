#include "operators/cumsum.h"

#include "graph/operator_registry.h"
#include "operators/elemwise.h"
#include "operators/kernel_utils.h"

namespace braid::opr {

CumSum::CumSum(VarNode* x, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(x);
    add_output();
}

SymbolVar CumSum::make(SymbolVar x, Param param, const OperatorConfig& config) {
    return x.graph().insert_opr(std::make_unique<CumSum>(x.node(), param, config))->output(0);
}

SymbolVar cumsum(SymbolVar x, int axis) {
    return CumSum::make(x, {axis, false, false});
}

void CumSum::init_output_dtypes() {
    DType dt = input(0)->dtype();
    if (!dt.is_float() && dt != dtype::Int32() && dt != dtype::Int64())
        BRAID_THROW(DTypeError, "{}: input \"{}\" has dtype {}; expected {}", describe(),
                    input(0)->name(), dt.name(),
                    dtype_list({dtype::Float32(), dtype::Float16(), dtype::BFloat16(),
                                dtype::Float64(), dtype::Int32(), dtype::Int64()}));
    output(0)->set_dtype(dt);
}

bool CumSum::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    normalize_axis(m_param.axis, ctx.shape(0)->ndim(), describe());
    out[0] = *ctx.shape(0);
    return true;
}

namespace {

//! Running sums of `n` elements `inner` apart, for each of `outer` x `inner` lines.
template <typename T, typename Acc>
void cumsum_lines(const T* x, T* y, const AxisSplit& s, bool exclusive, bool reverse) {
    parallel_range(s.outer, s.n * s.inner, [&](size_t begin, size_t end) {
        for (size_t o = begin; o < end; ++o)
            for (size_t i = 0; i < s.inner; ++i) {
                size_t base = o * s.n * s.inner + i;
                Acc sum = 0;
                for (size_t k = 0; k < s.n; ++k) {
                    size_t at = base + (reverse ? s.n - 1 - k : k) * s.inner;
                    if (exclusive) {
                        T v = x[at];
                        y[at] = T(sum);
                        sum = Acc(sum + Acc(v));
                    } else {
                        sum = Acc(sum + Acc(x[at]));
                        y[at] = T(sum);
                    }
                }
            }
    });
}

} // namespace

void CumSum::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (x.shape().is_empty()) return;
    size_t axis = normalize_axis(m_param.axis, x.shape().ndim(), describe());
    AxisSplit s = split_shape(x.shape(), axis, axis + 1);
    DType dt = x.dtype();
    if (dt == dtype::Int32()) {
        // Sums wrap like int32 arithmetic: accumulate in uint32.
        cumsum_lines<int32_t, uint32_t>(x.ptr<int32_t>(), y.ptr<int32_t>(), s, m_param.exclusive,
                                        m_param.reverse);
    } else if (dt == dtype::Int64()) {
        cumsum_lines<int64_t, uint64_t>(x.ptr<int64_t>(), y.ptr<int64_t>(), s, m_param.exclusive,
                                        m_param.reverse);
    } else if (dt == dtype::Float64()) {
        cumsum_lines<double, double>(x.ptr<double>(), y.ptr<double>(), s, m_param.exclusive,
                                     m_param.reverse);
    } else {
        Tensor xf = as_float32(x), yf = float32_like(y);
        cumsum_lines<float, float>(xf.ptr<float>(), yf.ptr<float>(), s, m_param.exclusive,
                                   m_param.reverse);
        store_float32(yf, y);
    }
}

namespace {

VarNode* cumsum_grad(OperatorNode& opr, size_t, const VarNodeArray& out_grads) {
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    auto p = static_cast<CumSum&>(opr).param();
    // Each x[j] adds into y[i] for the i the sum reaches: the same sums in the other direction.
    p.reverse = !p.reverse;
    return CumSum::make(g, p).node();
}

// Running sums along the last axis, and exclusive integer sums in reverse along the first.
SymbolVarArray cumsum_example(SymbolVar x) {
    auto ints = (x * 100.0).astype(dtype::Int32());
    return {cumsum(x, -1), CumSum::make(ints, {0, true, true})};
}

} // namespace

void register_cumsum_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("CumSum", "cumsum", dump_param<CumSum>, load_param<CumSum>, cumsum_example);
    register_grad_rule("CumSum", cumsum_grad);
}

} // namespace braid::opr
