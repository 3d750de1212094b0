#include "operators/elemwise.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "operators/elemwise_kernels.h"
#include "operators/io.h"
#include "operators/kernel_utils.h"

#include <array>
#include <cstring>

namespace braid::opr {

namespace {

//! What a mode accepts and produces.
enum ModeFlag : uint8_t {
    FLOAT_IN = 1, //!< float32, float16, bfloat16, float64 inputs
    INT_IN = 2,   //!< int32, int64 inputs
    BOOL_IN = 4,  //!< bool inputs
    BOOL_OUT = 8, //!< the output is bool whatever the inputs
    ANY_IN = 16,  //!< WHERE: a and b of any dtype
    COSTLY = 32,  //!< a libm call or a long polynomial per element: parallel sooner
};

struct ModeTraits {
    const char* name;
    uint8_t arity;
    uint8_t flags;
};

ModeTraits mode_traits(ElemMode mode) {
    using M = ElemMode;
    constexpr uint8_t NUM = FLOAT_IN | INT_IN, FLT = FLOAT_IN, FC = FLOAT_IN | COSTLY;
    switch (mode) {
    case M::NEG:
        return {"NEG", 1, NUM};
    case M::ABS:
        return {"ABS", 1, NUM};
    case M::SIGN:
        return {"SIGN", 1, NUM};
    case M::RELU:
        return {"RELU", 1, NUM};
    case M::EXP:
        return {"EXP", 1, FC};
    case M::EXPM1:
        return {"EXPM1", 1, FC};
    case M::LOG:
        return {"LOG", 1, FC};
    case M::LOG1P:
        return {"LOG1P", 1, FC};
    case M::SQRT:
        return {"SQRT", 1, FLT};
    case M::RSQRT:
        return {"RSQRT", 1, FLT};
    case M::SQUARE:
        return {"SQUARE", 1, NUM};
    case M::SIN:
        return {"SIN", 1, FC};
    case M::COS:
        return {"COS", 1, FC};
    case M::TANH:
        return {"TANH", 1, FC};
    case M::SIGMOID:
        return {"SIGMOID", 1, FC};
    case M::GELU:
        return {"GELU", 1, FC};
    case M::GELU_TANH:
        return {"GELU_TANH", 1, FC};
    case M::SILU:
        return {"SILU", 1, FC};
    case M::ERF:
        return {"ERF", 1, FC};
    case M::FLOOR:
        return {"FLOOR", 1, FLT};
    case M::CEIL:
        return {"CEIL", 1, FLT};
    case M::ROUND:
        return {"ROUND", 1, FLT};
    case M::LOGICAL_NOT:
        return {"LOGICAL_NOT", 1, BOOL_IN | BOOL_OUT};
    case M::ADD:
        return {"ADD", 2, NUM};
    case M::SUB:
        return {"SUB", 2, NUM};
    case M::MUL:
        return {"MUL", 2, NUM};
    case M::TRUE_DIV:
        return {"TRUE_DIV", 2, FLT};
    case M::FLOOR_DIV:
        return {"FLOOR_DIV", 2, NUM};
    case M::MOD:
        return {"MOD", 2, NUM};
    case M::POW:
        return {"POW", 2, NUM | COSTLY};
    case M::MAX:
        return {"MAX", 2, NUM};
    case M::MIN:
        return {"MIN", 2, NUM};
    case M::LT:
        return {"LT", 2, NUM | BOOL_OUT};
    case M::LEQ:
        return {"LEQ", 2, NUM | BOOL_OUT};
    case M::EQ:
        return {"EQ", 2, NUM | BOOL_IN | BOOL_OUT};
    case M::NEQ:
        return {"NEQ", 2, NUM | BOOL_IN | BOOL_OUT};
    case M::LOGICAL_AND:
        return {"LOGICAL_AND", 2, BOOL_IN | BOOL_OUT};
    case M::LOGICAL_OR:
        return {"LOGICAL_OR", 2, BOOL_IN | BOOL_OUT};
    case M::LOGICAL_XOR:
        return {"LOGICAL_XOR", 2, BOOL_IN | BOOL_OUT};
    case M::CLIP:
        return {"CLIP", 3, NUM};
    case M::WHERE:
        return {"WHERE", 3, ANY_IN};
    case M::COND_LEQ_MOV:
        return {"COND_LEQ_MOV", 3, NUM};
    case M::FMA3:
        return {"FMA3", 3, NUM};
    }
    return {"?", 0, 0};
}

bool is_half(DType dt) {
    return dt == dtype::Float16() || dt == dtype::BFloat16();
}

//! The broadcast shape of the inputs seen from the (contiguous) output: dims of size 1
//! dropped and neighbours merged wherever every operand stays linear across them.
struct BroadcastPlan {
    size_t ndim = 0;
    size_t shape[TensorShape::MAX_NDIM];
    ptrdiff_t stride[3][TensorShape::MAX_NDIM]; //!< per input, in elements; 0 on broadcast
};

BroadcastPlan make_plan(const TensorShape& out, const Tensor* const* in, size_t nin) {
    BroadcastPlan p;
    size_t nd = out.ndim();
    ptrdiff_t full[3][TensorShape::MAX_NDIM];
    for (size_t k = 0; k < nin; ++k) {
        const TensorLayout& l = in[k]->layout();
        size_t off = nd - l.ndim();
        for (size_t d = 0; d < nd; ++d)
            full[k][d] = d < off || l[d - off] != out[d] ? 0 : l.stride[d - off];
    }
    for (size_t d = 0; d < nd; ++d) {
        if (out[d] == 1) continue;
        bool merge = p.ndim > 0;
        for (size_t k = 0; k < nin && merge; ++k)
            merge = p.stride[k][p.ndim - 1] == full[k][d] * ptrdiff_t(out[d]);
        if (merge) {
            p.shape[p.ndim - 1] *= out[d];
            for (size_t k = 0; k < nin; ++k) p.stride[k][p.ndim - 1] = full[k][d];
            continue;
        }
        p.shape[p.ndim] = out[d];
        for (size_t k = 0; k < nin; ++k) p.stride[k][p.ndim] = full[k][d];
        ++p.ndim;
    }
    if (p.ndim == 0) {
        p.ndim = 1;
        p.shape[0] = 1;
        for (size_t k = 0; k < nin; ++k) p.stride[k][0] = 0;
    }
    return p;
}

//! Everything one run of the kernel needs; shared by the threads of a parallel region.
struct ElemRun {
    ElemKernel kernel;
    BroadcastPlan plan;
    size_t nin;
    const uint8_t* base[3];
    DType in_dt[3];
    bool convert_in[3]; //!< stage this input through float32
    uint8_t* out;
    DType out_dt;
    bool convert_out; //!< the kernel writes float32, stored as out_dt
};

constexpr size_t STAGE = 256;

//! Runs the kernel on `n` outputs whose inputs start at `ptr` with element strides `step`,
//! staging through float32 buffers where a dtype needs it or a stride is not 0 or 1.
void run_segment(const ElemRun& r, const uint8_t* const* ptr, const ptrdiff_t* step, uint8_t* out,
                 size_t n) {
    bool direct = !r.convert_out;
    uint8_t st[3];
    for (size_t k = 0; k < r.nin; ++k) {
        st[k] = uint8_t(step[k] != 0);
        direct &= !r.convert_in[k] && (step[k] == 0 || step[k] == 1);
    }
    if (direct) {
        r.kernel(reinterpret_cast<const void* const*>(ptr), st, out, n);
        return;
    }
    alignas(64) uint64_t buf[3][STAGE];
    alignas(64) float obuf[STAGE];
    size_t oes = r.out_dt.size();
    for (size_t done = 0; done < n; done += STAGE) {
        size_t m = std::min(STAGE, n - done);
        const void* src[3];
        for (size_t k = 0; k < r.nin; ++k) {
            size_t es = r.in_dt[k].size();
            const uint8_t* p = ptr[k] + ptrdiff_t(done) * step[k] * ptrdiff_t(es);
            size_t cnt = step[k] ? m : 1;
            if (r.convert_in[k]) {
                float* f = reinterpret_cast<float*>(buf[k]);
                if (step[k] <= 1)
                    convert_elements(r.in_dt[k], p, dtype::Float32(), f, cnt);
                else
                    for (size_t i = 0; i < cnt; ++i)
                        f[i] = float(load_as_double(r.in_dt[k],
                                                    p + ptrdiff_t(i) * step[k] * ptrdiff_t(es), 0));
                src[k] = f;
            } else if (step[k] <= 1) {
                src[k] = p;
            } else {
                uint8_t* g = reinterpret_cast<uint8_t*>(buf[k]);
                for (size_t i = 0; i < cnt; ++i)
                    std::memcpy(g + i * es, p + ptrdiff_t(i) * step[k] * ptrdiff_t(es), es);
                src[k] = g;
            }
        }
        uint8_t* dst = out + done * oes;
        r.kernel(src, st, r.convert_out ? static_cast<void*>(obuf) : dst, m);
        if (r.convert_out) convert_elements(dtype::Float32(), obuf, r.out_dt, dst, m);
    }
}

//! Computes outputs [begin, end) in row-major order, walking the broadcast plan.
void run_range(const ElemRun& r, size_t begin, size_t end) {
    const BroadcastPlan& p = r.plan;
    size_t nd = p.ndim, inner = p.shape[nd - 1];
    size_t row = begin / inner, col = begin % inner;
    size_t idx[TensorShape::MAX_NDIM] = {};
    ptrdiff_t off[3] = {0, 0, 0};
    for (size_t d = nd - 1, rest = row; d-- > 0;) {
        idx[d] = rest % p.shape[d];
        rest /= p.shape[d];
        for (size_t k = 0; k < r.nin; ++k) off[k] += ptrdiff_t(idx[d]) * p.stride[k][d];
    }
    ptrdiff_t step[3];
    for (size_t k = 0; k < r.nin; ++k) step[k] = p.stride[k][nd - 1];
    size_t oes = r.out_dt.size();
    for (size_t pos = begin; pos < end;) {
        size_t len = std::min(inner - col, end - pos);
        const uint8_t* ptr[3];
        for (size_t k = 0; k < r.nin; ++k)
            ptr[k] = r.base[k] + (off[k] + ptrdiff_t(col) * step[k]) * ptrdiff_t(r.in_dt[k].size());
        run_segment(r, ptr, step, r.out + pos * oes, len);
        pos += len;
        col = 0;
        for (size_t d = nd - 1; d-- > 0;) {
            if (++idx[d] < p.shape[d]) {
                for (size_t k = 0; k < r.nin; ++k) off[k] += p.stride[k][d];
                break;
            }
            for (size_t k = 0; k < r.nin; ++k) off[k] -= ptrdiff_t(idx[d] - 1) * p.stride[k][d];
            idx[d] = 0;
        }
    }
}

} // namespace

const char* elem_mode_name(ElemMode mode) {
    return mode_traits(mode).name;
}

size_t elem_mode_arity(ElemMode mode) {
    return mode_traits(mode).arity;
}

Elemwise::Elemwise(ElemMode mode, const VarNodeArray& inputs, const OperatorConfig& config)
    : ParamOperator({mode}, config) {
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

void Elemwise::init_output_dtypes() {
    auto traits = mode_traits(m_param.mode);
    if (m_param.mode == ElemMode::WHERE) {
        if (input(0)->dtype() != dtype::Bool())
            BRAID_THROW(DTypeError, "{}: the condition \"{}\" must be bool, got {}", describe(),
                        input(0)->name(), input(0)->dtype().name());
        if (input(1)->dtype() != input(2)->dtype())
            BRAID_THROW(DTypeError,
                        "{}: the two branches have different dtypes: \"{}\" is {}, \"{}\" is {}",
                        describe(), input(1)->name(), input(1)->dtype().name(), input(2)->name(),
                        input(2)->dtype().name());
        output(0)->set_dtype(input(1)->dtype());
        return;
    }
    DType dt = input(0)->dtype();
    for (auto* in : inputs())
        if (in->dtype() != dt)
            BRAID_THROW(DTypeError, "{}: inputs have different dtypes: \"{}\" is {}, \"{}\" is {}",
                        describe(), input(0)->name(), dt.name(), in->name(), in->dtype().name());
    bool ok = (dt.is_float() && (traits.flags & FLOAT_IN)) ||
              ((dt == dtype::Int32() || dt == dtype::Int64() || dt == dtype::Uint64()) &&
               (traits.flags & INT_IN)) ||
              (dt == dtype::Bool() && (traits.flags & BOOL_IN));
    if (!ok) {
        std::string expected;
        auto append = [&](const char* s) {
            expected += (expected.empty() ? "" : ", ") + std::string(s);
        };
        if (traits.flags & FLOAT_IN) append("float32, float16, bfloat16, float64");
        if (traits.flags & INT_IN) append("int32, int64, uint64");
        if (traits.flags & BOOL_IN) append("bool");
        BRAID_THROW(DTypeError, "{}: input \"{}\" has dtype {}; this mode takes {}", describe(),
                    input(0)->name(), dt.name(), expected);
    }
    output(0)->set_dtype((traits.flags & BOOL_OUT) ? dtype::Bool() : dt);
}

bool Elemwise::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    std::array<const TensorShape*, 3> shapes{};
    for (size_t i = 0; i < ctx.nr_inputs(); ++i) {
        if (!ctx.shape(i)) return false;
        shapes[i] = ctx.shape(i);
    }
    if (!broadcast_shapes(shapes.data(), ctx.nr_inputs(), out[0])) {
        std::string list;
        for (size_t i = 0; i < ctx.nr_inputs(); ++i)
            list += (list.empty() ? "" : " with ") + shapes[i]->to_string();
        BRAID_THROW(ShapeError, "{}: cannot broadcast {}", describe(), list);
    }
    return true;
}

int Elemwise::inplace_input(size_t) const {
    // Input 0 qualifies when it has the output's shape; the planner checks it. WHERE's input 0
    // is the bool condition, so its candidate is the first branch. A comparison's bool output
    // cannot take over a wider input's memory.
    if (m_param.mode == ElemMode::WHERE) return 1;
    if (output(0)->dtype() != input(0)->dtype()) return -1;
    return 0;
}

void Elemwise::execute(ExecCtx& ctx) {
    Tensor& out = ctx.output(0);
    size_t n = out.shape().total_nr_elems();
    if (n == 0) return;
    ElemRun r;
    r.nin = ctx.nr_inputs();
    const Tensor* in[3] = {};
    for (size_t k = 0; k < r.nin; ++k) {
        in[k] = &ctx.input(k);
        r.base[k] = in[k]->raw_ptr();
        r.in_dt[k] = in[k]->dtype();
        r.convert_in[k] = m_param.mode != ElemMode::WHERE && is_half(r.in_dt[k]);
    }
    DType compute = m_param.mode == ElemMode::WHERE ? r.in_dt[1] : r.in_dt[0];
    if (r.convert_in[0]) compute = dtype::Float32();
    r.kernel = find_elem_kernel(m_param.mode, compute.enumv());
    BRAID_ASSERT(r.kernel, "{}: no kernel for dtype {}", describe(), compute.name());
    r.out = out.raw_ptr();
    r.out_dt = out.dtype();
    r.convert_out = m_param.mode != ElemMode::WHERE && is_half(r.out_dt);
    size_t cost = (mode_traits(m_param.mode).flags & COSTLY) ? 8 : 1;
    bool small = n * cost < PARALLEL_MIN_ELEMS;

    // Fast path for small outputs whose inputs are all full-size or single elements: no
    // broadcast walk (an input with the output's element count has its layout).
    bool direct = small && !r.convert_out && !r.convert_in[0];
    uint8_t step[3];
    for (size_t k = 0; k < r.nin && direct; ++k) {
        size_t nk = in[k]->shape().total_nr_elems();
        step[k] = nk == n;
        direct = nk == n || nk == 1;
    }
    if (direct) {
        r.kernel(reinterpret_cast<const void* const*>(r.base), step, r.out, n);
        return;
    }
    r.plan = make_plan(out.shape(), in, r.nin);
    if (small) {
        run_range(r, 0, n);
    } else {
        // Chunks of whole cache lines of output keep threads off each other's lines.
        size_t unit = 64;
        size_t units = (n + unit - 1) / unit;
        parallel_range(units, unit * cost,
                       [&](size_t b, size_t e) { run_range(r, b * unit, std::min(n, e * unit)); });
    }
}

// ---------------------------------------------------------------- free functions
#define BRAID_ELEM_FN1(NAME, MODE)                                                                 \
    SymbolVar NAME(SymbolVar x) {                                                                  \
        return Elemwise::make(ElemMode::MODE, {x});                                                \
    }
#define BRAID_ELEM_FN2(NAME, MODE)                                                                 \
    SymbolVar NAME(SymbolVar a, SymbolVar b) {                                                     \
        return Elemwise::make(ElemMode::MODE, {a, b});                                             \
    }
#define BRAID_ELEM_FN3(NAME, MODE)                                                                 \
    SymbolVar NAME(SymbolVar a, SymbolVar b, SymbolVar c) {                                        \
        return Elemwise::make(ElemMode::MODE, {a, b, c});                                          \
    }
BRAID_ELEM_FN2(add, ADD)
BRAID_ELEM_FN2(sub, SUB)
BRAID_ELEM_FN2(mul, MUL)
BRAID_ELEM_FN2(true_div, TRUE_DIV)
BRAID_ELEM_FN2(floor_div, FLOOR_DIV)
BRAID_ELEM_FN2(mod, MOD)
BRAID_ELEM_FN2(pow, POW)
BRAID_ELEM_FN2(maximum, MAX)
BRAID_ELEM_FN2(minimum, MIN)
BRAID_ELEM_FN1(neg, NEG)
BRAID_ELEM_FN1(abs, ABS)
BRAID_ELEM_FN1(sign, SIGN)
BRAID_ELEM_FN1(relu, RELU)
BRAID_ELEM_FN1(exp, EXP)
BRAID_ELEM_FN1(expm1, EXPM1)
BRAID_ELEM_FN1(log, LOG)
BRAID_ELEM_FN1(log1p, LOG1P)
BRAID_ELEM_FN1(sqrt, SQRT)
BRAID_ELEM_FN1(rsqrt, RSQRT)
BRAID_ELEM_FN1(square, SQUARE)
BRAID_ELEM_FN1(sin, SIN)
BRAID_ELEM_FN1(cos, COS)
BRAID_ELEM_FN1(tanh, TANH)
BRAID_ELEM_FN1(sigmoid, SIGMOID)
BRAID_ELEM_FN1(gelu, GELU)
BRAID_ELEM_FN1(gelu_tanh, GELU_TANH)
BRAID_ELEM_FN1(silu, SILU)
BRAID_ELEM_FN1(erf, ERF)
BRAID_ELEM_FN1(floor, FLOOR)
BRAID_ELEM_FN1(ceil, CEIL)
BRAID_ELEM_FN1(round, ROUND)
BRAID_ELEM_FN3(clip, CLIP)
BRAID_ELEM_FN2(less, LT)
BRAID_ELEM_FN2(less_equal, LEQ)
BRAID_ELEM_FN2(equal, EQ)
BRAID_ELEM_FN2(not_equal, NEQ)
BRAID_ELEM_FN2(logical_and, LOGICAL_AND)
BRAID_ELEM_FN2(logical_or, LOGICAL_OR)
BRAID_ELEM_FN2(logical_xor, LOGICAL_XOR)
BRAID_ELEM_FN1(logical_not, LOGICAL_NOT)
BRAID_ELEM_FN3(where, WHERE)
BRAID_ELEM_FN3(cond_leq_mov, COND_LEQ_MOV)
BRAID_ELEM_FN3(fma3, FMA3)
#undef BRAID_ELEM_FN1
#undef BRAID_ELEM_FN2
#undef BRAID_ELEM_FN3

SymbolVar clip(SymbolVar x, double lo, double hi) {
    return clip(x, scalar_like(x, lo), scalar_like(x, hi));
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

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

static SymbolVarArray load_elemwise(const OprLoadContext& ctx) {
    auto mode = read_param<Elemwise::Param>(ctx.params).mode;
    size_t arity = elem_mode_arity(mode);
    ctx.expect_inputs(arity, arity);
    return {Elemwise::make(mode, ctx.inputs, ctx.config)};
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_elemwise_kernels();
}
#endif

void register_elemwise_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("Elemwise", "elemwise", dump_param<Elemwise>, load_elemwise);
    register_grad_rule("Elemwise", Elemwise::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_elemwise_kernels(); // operators/cuda/elemwise.cpp
#endif
}

} // namespace braid::opr
