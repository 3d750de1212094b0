// Elementwise operators with numpy broadcasting: one operator type, one mode per function.
//
// Dtype rules (no implicit promotion):
//  - arithmetic and math modes: every input has the output's dtype. Float modes run on
//    float32; float16 and bfloat16 are converted to float32 and rounded back on store;
//    float64 runs on its own double kernels (libm in double, never staged through float32).
//    Integer modes run on int32 and int64.
//  - comparisons (LT, LEQ, EQ, NEQ): two inputs of one dtype, bool output.
//  - logical modes (LOGICAL_*): bool inputs, bool output.
//  - WHERE(cond, a, b): cond is bool, a and b share any dtype, which the output takes.
// Shapes broadcast like numpy: dims align from the right, a dim of 1 stretches.
// Memory: the output may overwrite an input of the same shape and dtype in place.
// Large outputs run on the shared kernel pool; small ones stay on the calling thread.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! Elementwise functions. Arity 1, 2 or 3 (see elem_mode_arity).
enum class ElemMode : uint8_t {
    // ---- unary ----
    NEG,         //!< -x
    ABS,         //!< |x|
    SIGN,        //!< -1, 0 or 1 (NaN stays NaN)
    RELU,        //!< max(x, 0)
    EXP,         //!< e^x
    EXPM1,       //!< e^x - 1, accurate near 0
    LOG,         //!< natural log
    LOG1P,       //!< log(1 + x), accurate near 0
    SQRT,        //!< square root
    RSQRT,       //!< 1 / sqrt(x)
    SQUARE,      //!< x * x
    SIN,         //!< sine
    COS,         //!< cosine
    TANH,        //!< hyperbolic tangent
    SIGMOID,     //!< 1 / (1 + e^-x)
    GELU,        //!< x/2 (1 + erf(x/sqrt 2))
    GELU_TANH,   //!< x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    SILU,        //!< x * sigmoid(x)
    ERF,         //!< error function
    FLOOR,       //!< round toward -inf
    CEIL,        //!< round toward +inf
    ROUND,       //!< round half to even
    LOGICAL_NOT, //!< !x (bool)
    // ---- binary ----
    ADD,         //!< a + b
    SUB,         //!< a - b
    MUL,         //!< a * b
    TRUE_DIV,    //!< a / b (float only)
    FLOOR_DIV,   //!< floor(a / b); integer division by zero throws ValueError at execution
    MOD,         //!< a - floor(a / b) * b: the sign follows b, like Python's %
    POW,         //!< a^b; a negative integer exponent of an integer base throws ValueError
    MAX,         //!< larger of a and b; NaN propagates
    MIN,         //!< smaller of a and b; NaN propagates
    LT,          //!< a < b (bool output)
    LEQ,         //!< a <= b (bool output)
    EQ,          //!< a == b (bool output)
    NEQ,         //!< a != b (bool output)
    LOGICAL_AND, //!< a && b (bool)
    LOGICAL_OR,  //!< a || b (bool)
    LOGICAL_XOR, //!< a != b (bool)
    // ---- ternary ----
    CLIP,         //!< min(max(x, lo), hi)
    WHERE,        //!< cond ? a : b
    COND_LEQ_MOV, //!< a <= b ? c : 0
    FMA3,         //!< a * b + c
};

//! Name of a mode, e.g. "ADD".
const char* elem_mode_name(ElemMode mode);
//! Number of inputs a mode takes.
size_t elem_mode_arity(ElemMode mode);

//! The params of Elemwise.
struct ElemwiseParam {
    ElemMode mode = ElemMode::NEG;
    static constexpr auto fields() {
        return std::tuple{param_field("mode", &ElemwiseParam::mode, elem_mode_name)};
    }
};

//! Applies one ElemMode elementwise over its broadcast inputs.
class Elemwise final : public ParamOperator<Elemwise, ElemwiseParam> {
public:
    Elemwise(ElemMode mode, const VarNodeArray& inputs, const OperatorConfig& config);
    //! Inserts the operator; throws GraphError for a wrong input count, DTypeError for a
    //! dtype the mode does not take, ShapeError for shapes that do not broadcast.
    static SymbolVar make(ElemMode mode, const SymbolVarArray& inputs,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "Elemwise"; }
    //! The gradient rule (graph/grad.h), in operators/elemwise_grad.cpp.
    static VarNode* grad_rule(OperatorNode& opr, size_t wrt, const VarNodeArray& out_grads);
    ElemMode mode() const { return m_param.mode; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    int inplace_input(size_t) const override;
    void execute(ExecCtx& ctx) override;
};

//! a + b.
SymbolVar add(SymbolVar a, SymbolVar b);
//! a - b.
SymbolVar sub(SymbolVar a, SymbolVar b);
//! a * b.
SymbolVar mul(SymbolVar a, SymbolVar b);
//! a / b for float vars.
SymbolVar true_div(SymbolVar a, SymbolVar b);
//! floor(a / b).
SymbolVar floor_div(SymbolVar a, SymbolVar b);
//! a mod b with the sign of b.
SymbolVar mod(SymbolVar a, SymbolVar b);
//! a to the power b.
SymbolVar pow(SymbolVar a, SymbolVar b);
//! Elementwise larger value.
SymbolVar maximum(SymbolVar a, SymbolVar b);
//! Elementwise smaller value.
SymbolVar minimum(SymbolVar a, SymbolVar b);
//! -x.
SymbolVar neg(SymbolVar x);
//! |x|.
SymbolVar abs(SymbolVar x);
//! -1, 0 or 1 by the sign of x.
SymbolVar sign(SymbolVar x);
//! max(x, 0).
SymbolVar relu(SymbolVar x);
//! e^x.
SymbolVar exp(SymbolVar x);
//! e^x - 1.
SymbolVar expm1(SymbolVar x);
//! Natural log.
SymbolVar log(SymbolVar x);
//! log(1 + x).
SymbolVar log1p(SymbolVar x);
//! Square root.
SymbolVar sqrt(SymbolVar x);
//! 1 / sqrt(x).
SymbolVar rsqrt(SymbolVar x);
//! x * x.
SymbolVar square(SymbolVar x);
//! Sine.
SymbolVar sin(SymbolVar x);
//! Cosine.
SymbolVar cos(SymbolVar x);
//! Hyperbolic tangent.
SymbolVar tanh(SymbolVar x);
//! 1 / (1 + e^-x).
SymbolVar sigmoid(SymbolVar x);
//! GELU, erf form (exact).
SymbolVar gelu(SymbolVar x);
//! GELU, tanh approximation.
SymbolVar gelu_tanh(SymbolVar x);
//! x * sigmoid(x).
SymbolVar silu(SymbolVar x);
//! Error function.
SymbolVar erf(SymbolVar x);
//! Round toward -inf.
SymbolVar floor(SymbolVar x);
//! Round toward +inf.
SymbolVar ceil(SymbolVar x);
//! Round half to even.
SymbolVar round(SymbolVar x);
//! min(max(x, lo), hi) with broadcast lo and hi vars.
SymbolVar clip(SymbolVar x, SymbolVar lo, SymbolVar hi);
//! min(max(x, lo), hi) with constant bounds.
SymbolVar clip(SymbolVar x, double lo, double hi);
//! a < b (bool).
SymbolVar less(SymbolVar a, SymbolVar b);
//! a <= b (bool).
SymbolVar less_equal(SymbolVar a, SymbolVar b);
//! a == b (bool).
SymbolVar equal(SymbolVar a, SymbolVar b);
//! a != b (bool).
SymbolVar not_equal(SymbolVar a, SymbolVar b);
//! a && b on bool vars.
SymbolVar logical_and(SymbolVar a, SymbolVar b);
//! a || b on bool vars.
SymbolVar logical_or(SymbolVar a, SymbolVar b);
//! a xor b on bool vars.
SymbolVar logical_xor(SymbolVar a, SymbolVar b);
//! !x on a bool var.
SymbolVar logical_not(SymbolVar x);
//! cond ? a : b, with cond bool.
SymbolVar where(SymbolVar cond, SymbolVar a, SymbolVar b);
//! a <= b ? c : 0 (routes the gradient of max/min to the elements that won).
SymbolVar cond_leq_mov(SymbolVar a, SymbolVar b, SymbolVar c);
//! a * b + c in one pass.
SymbolVar fma3(SymbolVar a, SymbolVar b, SymbolVar c);

//! A rank-0 constant of `like`'s dtype in `like`'s graph.
SymbolVar scalar_like(SymbolVar like, double value);

} // namespace braid::opr

namespace braid {
//! opr::add.
SymbolVar operator+(SymbolVar a, SymbolVar b);
//! opr::sub.
SymbolVar operator-(SymbolVar a, SymbolVar b);
//! opr::mul.
SymbolVar operator*(SymbolVar a, SymbolVar b);
//! True division for float vars, floor division for integer vars.
SymbolVar operator/(SymbolVar a, SymbolVar b);
//! opr::neg.
SymbolVar operator-(SymbolVar a);
//! a + b, b a constant of a's dtype.
SymbolVar operator+(SymbolVar a, double b);
//! a - b, b a constant of a's dtype.
SymbolVar operator-(SymbolVar a, double b);
//! a * b, b a constant of a's dtype.
SymbolVar operator*(SymbolVar a, double b);
//! a / b, b a constant of a's dtype.
SymbolVar operator/(SymbolVar a, double b);
//! a + b, a a constant of b's dtype.
SymbolVar operator+(double a, SymbolVar b);
//! a - b, a a constant of b's dtype.
SymbolVar operator-(double a, SymbolVar b);
//! a * b, a a constant of b's dtype.
SymbolVar operator*(double a, SymbolVar b);
//! a / b, a a constant of b's dtype.
SymbolVar operator/(double a, SymbolVar b);
} // namespace braid
