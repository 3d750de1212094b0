#include "operators/elemwise.h"

#include "base/error.h"
#include "base/hash.h"
#include "operators/io.h"

#include <cmath>

namespace braid::opr {

const char* elem_mode_name(ElemMode mode) {
    switch (mode) {
    case ElemMode::NEG:
        return "NEG";
    case ElemMode::ABS:
        return "ABS";
    case ElemMode::RELU:
        return "RELU";
    case ElemMode::EXP:
        return "EXP";
    case ElemMode::LOG:
        return "LOG";
    case ElemMode::TANH:
        return "TANH";
    case ElemMode::SIGMOID:
        return "SIGMOID";
    case ElemMode::ADD:
        return "ADD";
    case ElemMode::SUB:
        return "SUB";
    case ElemMode::MUL:
        return "MUL";
    case ElemMode::TRUE_DIV:
        return "TRUE_DIV";
    case ElemMode::FLOOR_DIV:
        return "FLOOR_DIV";
    case ElemMode::MAX:
        return "MAX";
    case ElemMode::MIN:
        return "MIN";
    }
    return "?";
}

size_t elem_mode_arity(ElemMode mode) {
    return mode >= ElemMode::ADD ? 2 : 1;
}

namespace {

bool mode_allows_int(ElemMode m) {
    switch (m) {
    case ElemMode::NEG:
    case ElemMode::ABS:
    case ElemMode::RELU:
    case ElemMode::ADD:
    case ElemMode::SUB:
    case ElemMode::MUL:
    case ElemMode::FLOOR_DIV:
    case ElemMode::MAX:
    case ElemMode::MIN:
        return true;
    default:
        return false;
    }
}

bool mode_allows_float(ElemMode m) {
    return m != ElemMode::FLOOR_DIV;
}

// ---- scalar functions, one struct per mode so loops specialise and vectorise ----
#define BRAID_UNARY(NAME, EXPR)                                                                    \
    struct NAME {                                                                                  \
        template <typename T> static T apply(T x) { return EXPR; }                                 \
    };
BRAID_UNARY(NegOp, -x)
BRAID_UNARY(AbsOp, x < T(0) ? -x : x)
BRAID_UNARY(ReluOp, x > T(0) ? x : T(0))
BRAID_UNARY(ExpOp, std::exp(x))
BRAID_UNARY(LogOp, std::log(x))
BRAID_UNARY(TanhOp, std::tanh(x))
BRAID_UNARY(SigmoidOp, T(1) / (T(1) + std::exp(-x)))
#undef BRAID_UNARY

#define BRAID_BINARY(NAME, EXPR)                                                                   \
    struct NAME {                                                                                  \
        template <typename T> static T apply(T a, T b) { return EXPR; }                            \
    };
BRAID_BINARY(AddOp, a + b)
BRAID_BINARY(SubOp, a - b)
BRAID_BINARY(MulOp, a* b)
BRAID_BINARY(DivOp, a / b)
BRAID_BINARY(MaxOp, a > b ? a : b)
BRAID_BINARY(MinOp, a < b ? a : b)
#undef BRAID_BINARY

struct FloorDivOp {
    template <typename T> static T apply(T a, T b) {
        if (b == 0) throw DTypeError("Elemwise(FLOOR_DIV): integer division by zero");
        T q = a / b;
        return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
    }
};

// Strided iteration: the output is contiguous; each input has its broadcast strides.
// Dims are walked outermost-first, with the innermost dim as a tight loop.
template <typename T, typename Op> void unary_loop(const T* x, ptrdiff_t sx, T* y, size_t n) {
    if (sx == 1)
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(x[i]);
    else
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(x[ptrdiff_t(i) * sx]);
}

template <typename T, typename Op>
void binary_loop(const T* a, ptrdiff_t sa, const T* b, ptrdiff_t sb, T* y, size_t n) {
    if (sa == 1 && sb == 1) {
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(a[i], b[i]);
    } else if (sa == 1 && sb == 0) {
        T bv = *b;
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(a[i], bv);
    } else if (sa == 0 && sb == 1) {
        T av = *a;
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(av, b[i]);
    } else {
        for (size_t i = 0; i < n; ++i) y[i] = Op::apply(a[ptrdiff_t(i) * sa], b[ptrdiff_t(i) * sb]);
    }
}

//! Calls fn(offsets_of_inputs[], out_offset, inner_len) for each innermost row of `shape`.
template <size_t N, typename Fn>
void for_each_row(const TensorShape& shape, const std::array<const TensorLayout*, N>& in, Fn&& fn) {
    size_t nd = shape.ndim();
    size_t inner = nd ? shape[nd - 1] : 1;
    size_t rows = inner ? shape.total_nr_elems() / inner : 0;
    std::array<size_t, TensorShape::MAX_NDIM> idx{};
    std::array<ptrdiff_t, N> off{};
    for (size_t r = 0; r < rows; ++r) {
        fn(off, ptrdiff_t(r * inner), inner);
        for (size_t d = nd ? nd - 1 : 0; d-- > 0;) {
            if (++idx[d] < shape[d]) {
                for (size_t k = 0; k < N; ++k) off[k] += in[k]->stride[d];
                break;
            }
            for (size_t k = 0; k < N; ++k) off[k] -= ptrdiff_t(idx[d] - 1) * in[k]->stride[d];
            idx[d] = 0;
        }
    }
}

template <typename T, typename Op> void run_unary(const Tensor& x, Tensor& y) {
    const T* xp = x.ptr<T>();
    T* yp = y.ptr<T>();
    size_t n = y.shape().total_nr_elems();
    if (x.shape() == y.shape()) {
        unary_loop<T, Op>(xp, 1, yp, n);
        return;
    }
    TensorLayout lx = x.layout().broadcast(y.shape());
    std::array<const TensorLayout*, 1> ls{&lx};
    size_t nd = lx.ndim();
    ptrdiff_t s = nd ? lx.stride[nd - 1] : 0;
    for_each_row<1>(y.shape(), ls, [&](auto& off, ptrdiff_t yoff, size_t len) {
        unary_loop<T, Op>(xp + off[0], s, yp + yoff, len);
    });
}

template <typename T, typename Op> void run_binary(const Tensor& a, const Tensor& b, Tensor& y) {
    const T* ap = a.ptr<T>();
    const T* bp = b.ptr<T>();
    T* yp = y.ptr<T>();
    size_t n = y.shape().total_nr_elems();
    const auto& ys = y.shape();
    size_t na = a.shape().total_nr_elems(), nb = b.shape().total_nr_elems();
    if (na == n && nb == n) {
        binary_loop<T, Op>(ap, 1, bp, 1, yp, n);
        return;
    }
    if (na == n && nb == 1) {
        binary_loop<T, Op>(ap, 1, bp, 0, yp, n);
        return;
    }
    if (na == 1 && nb == n) {
        binary_loop<T, Op>(ap, 0, bp, 1, yp, n);
        return;
    }
    TensorLayout la = a.layout().broadcast(ys), lb = b.layout().broadcast(ys);
    std::array<const TensorLayout*, 2> ls{&la, &lb};
    size_t nd = ys.ndim();
    ptrdiff_t sa = la.stride[nd - 1], sb = lb.stride[nd - 1];
    for_each_row<2>(ys, ls, [&](auto& off, ptrdiff_t yoff, size_t len) {
        binary_loop<T, Op>(ap + off[0], sa, bp + off[1], sb, yp + yoff, len);
    });
}

template <typename T> void dispatch_mode(ElemMode mode, const Tensor* const* in, Tensor& out) {
    switch (mode) {
    case ElemMode::NEG:
        return run_unary<T, NegOp>(*in[0], out);
    case ElemMode::ABS:
        return run_unary<T, AbsOp>(*in[0], out);
    case ElemMode::RELU:
        return run_unary<T, ReluOp>(*in[0], out);
    case ElemMode::ADD:
        return run_binary<T, AddOp>(*in[0], *in[1], out);
    case ElemMode::SUB:
        return run_binary<T, SubOp>(*in[0], *in[1], out);
    case ElemMode::MUL:
        return run_binary<T, MulOp>(*in[0], *in[1], out);
    case ElemMode::MAX:
        return run_binary<T, MaxOp>(*in[0], *in[1], out);
    case ElemMode::MIN:
        return run_binary<T, MinOp>(*in[0], *in[1], out);
    default:
        break;
    }
    if constexpr (std::is_floating_point_v<T>) {
        switch (mode) {
        case ElemMode::EXP:
            return run_unary<T, ExpOp>(*in[0], out);
        case ElemMode::LOG:
            return run_unary<T, LogOp>(*in[0], out);
        case ElemMode::TANH:
            return run_unary<T, TanhOp>(*in[0], out);
        case ElemMode::SIGMOID:
            return run_unary<T, SigmoidOp>(*in[0], out);
        case ElemMode::TRUE_DIV:
            return run_binary<T, DivOp>(*in[0], *in[1], out);
        default:
            break;
        }
    } else {
        if (mode == ElemMode::FLOOR_DIV) return run_binary<T, FloorDivOp>(*in[0], *in[1], out);
    }
    BRAID_ASSERT(false, "Elemwise mode {} not implemented for this dtype", elem_mode_name(mode));
}

Tensor to_float32(const Tensor& t) {
    Tensor r(t.shape(), dtype::Float32());
    convert_elements(t.dtype(), t.raw_ptr(), dtype::Float32(), r.raw_ptr(),
                     t.shape().total_nr_elems());
    return r;
}

} // namespace

Elemwise::Elemwise(ElemMode mode, const VarNodeArray& inputs, const OperatorConfig& config)
    : OperatorNode(config), m_mode(mode) {
    if (inputs.size() != elem_mode_arity(mode))
        BRAID_THROW(GraphError, "Elemwise({}): takes {} inputs, got {}", elem_mode_name(mode),
                    elem_mode_arity(mode), inputs.size());
    for (auto* in : inputs) add_input(in);
    add_output();
}

SymbolVar Elemwise::make(ElemMode mode, const SymbolVarArray& inputs,
                         const OperatorConfig& config) {
    if (inputs.empty() || !inputs[0].valid())
        BRAID_THROW(GraphError, "Elemwise({}): needs valid input vars", elem_mode_name(mode));
    VarNodeArray in;
    for (auto& v : inputs) in.push_back(v.node());
    return inputs[0].graph().insert_opr(std::make_unique<Elemwise>(mode, in, config))->output(0);
}

void Elemwise::hash_params(Hasher& h) const {
    h.add_pod(m_mode);
}

bool Elemwise::params_equal(const OperatorNode& rhs) const {
    return static_cast<const Elemwise&>(rhs).m_mode == m_mode;
}

void Elemwise::init_output_dtypes() {
    DType dt = input(0)->dtype();
    for (auto* in : inputs())
        if (in->dtype() != dt)
            BRAID_THROW(DTypeError, "{}: inputs have different dtypes: \"{}\" is {}, \"{}\" is {}",
                        describe(), input(0)->name(), dt.name(), in->name(), in->dtype().name());
    bool ok = dt.is_float()
                  ? mode_allows_float(m_mode)
                  : (dt == dtype::Int32() || dt == dtype::Int64()) && mode_allows_int(m_mode);
    if (!ok)
        BRAID_THROW(DTypeError, "{}: dtype {} is not supported by this mode", describe(),
                    dt.name());
    output(0)->set_dtype(dt);
}

bool Elemwise::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    std::vector<const TensorShape*> shapes;
    for (size_t i = 0; i < ctx.nr_inputs(); ++i) {
        if (!ctx.shape(i)) return false;
        shapes.push_back(ctx.shape(i));
    }
    if (!broadcast_shapes(shapes.data(), shapes.size(), out[0])) {
        std::string list;
        for (auto* s : shapes) list += (list.empty() ? "" : " with ") + s->to_string();
        BRAID_THROW(ShapeError, "{}: cannot broadcast {}", describe(), list);
    }
    return true;
}

int Elemwise::inplace_input(size_t) const {
    // Any input with the output's shape qualifies; the planner checks the shapes.
    return 0;
}

void Elemwise::execute(ExecCtx& ctx) {
    Tensor& out = ctx.output(0);
    size_t nin = ctx.nr_inputs();
    std::array<const Tensor*, 3> in{};
    for (size_t i = 0; i < nin; ++i) in[i] = &ctx.input(i);
    switch (out.dtype().enumv()) {
    case DTypeEnum::FLOAT32:
        return dispatch_mode<float>(m_mode, in.data(), out);
    case DTypeEnum::INT32:
        return dispatch_mode<int32_t>(m_mode, in.data(), out);
    case DTypeEnum::INT64:
        return dispatch_mode<int64_t>(m_mode, in.data(), out);
    case DTypeEnum::FLOAT16:
    case DTypeEnum::BFLOAT16: {
        std::array<Tensor, 3> conv;
        for (size_t i = 0; i < nin; ++i) {
            conv[i] = to_float32(*in[i]);
            in[i] = &conv[i];
        }
        Tensor tmp(out.shape(), dtype::Float32());
        dispatch_mode<float>(m_mode, in.data(), tmp);
        convert_elements(dtype::Float32(), tmp.raw_ptr(), out.dtype(), out.raw_ptr(),
                         out.shape().total_nr_elems());
        return;
    }
    default:
        BRAID_ASSERT(false, "{}: unexpected dtype {}", describe(), out.dtype().name());
    }
}

SymbolVar add(SymbolVar a, SymbolVar b) {
    return Elemwise::make(ElemMode::ADD, {a, b});
}
SymbolVar sub(SymbolVar a, SymbolVar b) {
    return Elemwise::make(ElemMode::SUB, {a, b});
}
SymbolVar mul(SymbolVar a, SymbolVar b) {
    return Elemwise::make(ElemMode::MUL, {a, b});
}
SymbolVar true_div(SymbolVar a, SymbolVar b) {
    return Elemwise::make(ElemMode::TRUE_DIV, {a, b});
}
SymbolVar floor_div(SymbolVar a, SymbolVar b) {
    return Elemwise::make(ElemMode::FLOOR_DIV, {a, b});
}
SymbolVar maximum(SymbolVar a, SymbolVar b) {
    return Elemwise::make(ElemMode::MAX, {a, b});
}
SymbolVar minimum(SymbolVar a, SymbolVar b) {
    return Elemwise::make(ElemMode::MIN, {a, b});
}
SymbolVar neg(SymbolVar x) {
    return Elemwise::make(ElemMode::NEG, {x});
}
SymbolVar abs(SymbolVar x) {
    return Elemwise::make(ElemMode::ABS, {x});
}
SymbolVar relu(SymbolVar x) {
    return Elemwise::make(ElemMode::RELU, {x});
}
SymbolVar exp(SymbolVar x) {
    return Elemwise::make(ElemMode::EXP, {x});
}
SymbolVar log(SymbolVar x) {
    return Elemwise::make(ElemMode::LOG, {x});
}
SymbolVar tanh(SymbolVar x) {
    return Elemwise::make(ElemMode::TANH, {x});
}
SymbolVar sigmoid(SymbolVar x) {
    return Elemwise::make(ElemMode::SIGMOID, {x});
}

SymbolVar scalar_like(SymbolVar like, double value) {
    return ImmutableTensor::make_scalar(like.graph(), value, like.dtype(),
                                        OperatorConfig::on(like.comp_node()));
}

} // namespace braid::opr

namespace braid {
using namespace opr;
SymbolVar operator+(SymbolVar a, SymbolVar b) {
    return add(a, b);
}
SymbolVar operator-(SymbolVar a, SymbolVar b) {
    return sub(a, b);
}
SymbolVar operator*(SymbolVar a, SymbolVar b) {
    return mul(a, b);
}
SymbolVar operator/(SymbolVar a, SymbolVar b) {
    return a.dtype().is_float() ? true_div(a, b) : floor_div(a, b);
}
SymbolVar operator-(SymbolVar a) {
    return neg(a);
}
SymbolVar operator+(SymbolVar a, double b) {
    return a + scalar_like(a, b);
}
SymbolVar operator-(SymbolVar a, double b) {
    return a - scalar_like(a, b);
}
SymbolVar operator*(SymbolVar a, double b) {
    return a * scalar_like(a, b);
}
SymbolVar operator/(SymbolVar a, double b) {
    return a / scalar_like(a, b);
}
SymbolVar operator+(double a, SymbolVar b) {
    return scalar_like(b, a) + b;
}
SymbolVar operator-(double a, SymbolVar b) {
    return scalar_like(b, a) - b;
}
SymbolVar operator*(double a, SymbolVar b) {
    return scalar_like(b, a) * b;
}
SymbolVar operator/(double a, SymbolVar b) {
    return scalar_like(b, a) / b;
}
} // namespace braid

// ---- serialization: params dump and load, registered in register_all_operators()
#include "serialization/params.h"

namespace braid::opr {

void dump_elemwise(const OperatorNode& opr, ParamWriter& w) {
    w.write_string("mode", elem_mode_name(opr_cast<Elemwise>(opr).mode()));
}

SymbolVarArray load_elemwise(const OprLoadContext& ctx) {
    auto mode = ctx.params.read_enum<ElemMode>("mode", elem_mode_name);
    size_t arity = elem_mode_arity(mode);
    ctx.expect_inputs(arity, arity);
    return {Elemwise::make(mode, ctx.inputs, ctx.config)};
}

} // namespace braid::opr
