// Gradient rules of Elemwise, one case per mode. Conventions (docs/autodiff.md):
//  - kinks take the one-sided value that keeps the rule cheap: relu'(0) = 0, abs'(0) = 0;
//  - MAX/MIN split the gradient evenly between equal inputs (each gets g/2); CLIP passes it to
//    x on the closed range lo <= x <= hi;
//  - piecewise constant modes (SIGN, FLOOR, CEIL, ROUND, FLOOR_DIV) and the conditions of
//    COND_LEQ_MOV get an explicit zero gradient; MOD gets (1, -floor(a / b));
//  - POW's exponent gradient y·log(a) is taken as 0 where a == 0 (NaN for a < 0);
//  - WHERE's condition gets none; comparisons and logical modes are not differentiable.
// Every rule builds its result from ordinary operators (second order works) and sums it back
// over broadcast axes.
#include "base/error.h"
#include "operators/elemwise.h"
#include "operators/grad_util.h"

#include <cmath>

namespace braid::opr {

namespace {

//! `cond ? v : 0`.
SymbolVar keep_where(SymbolVar cond, SymbolVar v) {
    return where(cond, v, scalar_like(v, 0.0));
}

} // namespace

VarNode* Elemwise::grad_rule(OperatorNode& node, size_t i, const VarNodeArray& out_grads) {
    auto& opr = static_cast<Elemwise&>(node);
    SymbolVar g = out_grads[0];
    if (!g.valid()) return nullptr;
    auto in = [&](size_t k) { return SymbolVar(opr.input(k)); };
    SymbolVar x = in(0), y = opr.output(0);
    SymbolVar other = opr.inputs().size() == 2 ? in(1 - i) : SymbolVar();
    auto zero = [&] { return zeros_of(in(i)).node(); };
    SymbolVar r;
    switch (opr.mode()) {
    // ---- unary ----
    case ElemMode::NEG:
        r = -g;
        break;
    case ElemMode::ABS:
        r = g * sign(x);
        break;
    case ElemMode::SIGN:
    case ElemMode::FLOOR:
    case ElemMode::CEIL:
    case ElemMode::ROUND:
    case ElemMode::FLOOR_DIV:
        return zero(); // piecewise constant: zero wherever the derivative exists
    case ElemMode::RELU:
        // From the output, not the input: relu may have overwritten its input in place.
        r = keep_where(less(scalar_like(y, 0.0), y), g);
        break;
    case ElemMode::EXP:
        r = g * y;
        break;
    case ElemMode::EXPM1:
        r = g * (y + 1.0);
        break;
    case ElemMode::LOG:
        r = g / x;
        break;
    case ElemMode::LOG1P:
        r = g / (x + 1.0);
        break;
    case ElemMode::SQRT:
        r = (g / y) * 0.5;
        break;
    case ElemMode::RSQRT:
        r = g * (y * y * y) * -0.5;
        break;
    case ElemMode::SQUARE:
        r = g * x * 2.0;
        break;
    case ElemMode::SIN:
        r = g * cos(x);
        break;
    case ElemMode::COS:
        r = -(g * sin(x));
        break;
    case ElemMode::TANH:
        r = g * (1.0 - y * y);
        break;
    case ElemMode::SIGMOID:
        r = g * y * (1.0 - y);
        break;
    case ElemMode::GELU: {
        // d/dx x·Φ(x) = Φ(x) + x·φ(x)
        SymbolVar cdf = (erf(x * M_SQRT1_2) + 1.0) * 0.5;
        SymbolVar pdf = exp(x * x * -0.5) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
        r = g * (cdf + x * pdf);
        break;
    }
    case ElemMode::GELU_TANH: {
        const double c = std::sqrt(2.0 / M_PI), k = 0.044715;
        SymbolVar x2 = x * x;
        SymbolVar t = tanh((x + x2 * x * k) * c);
        SymbolVar du = (x2 * (3.0 * k) + 1.0) * c;
        r = g * ((t + 1.0) * 0.5 + x * (1.0 - t * t) * du * 0.5);
        break;
    }
    case ElemMode::SILU: {
        SymbolVar s = sigmoid(x);
        r = g * s * (x * (1.0 - s) + 1.0);
        break;
    }
    case ElemMode::ERF:
        r = g * exp(-(x * x)) * M_2_SQRTPI;
        break;
    // ---- binary ----
    case ElemMode::ADD:
        r = g;
        break;
    case ElemMode::SUB:
        r = i == 0 ? g : -g;
        break;
    case ElemMode::MUL:
        r = g * other;
        break;
    case ElemMode::TRUE_DIV:
        if (i == 0)
            r = g / in(1);
        else
            r = -(g * y) / in(1);
        break;
    case ElemMode::MOD:
        // a mod b = a - floor(a / b)·b
        r = i == 0 ? g : -(g * floor(x / in(1)));
        break;
    case ElemMode::POW:
        if (i == 0)
            r = g * in(1) * pow(x, in(1) - 1.0);
        else
            r = g * where(equal(x, scalar_like(x, 0.0)), scalar_like(y, 0.0), y * log(x));
        break;
    case ElemMode::MAX:
    case ElemMode::MIN: {
        // 1 where this input wins, 0 where it loses, 1/2 on ties.
        SymbolVar s = sign(in(0) - in(1));
        bool first_wins_on_positive = (opr.mode() == ElemMode::MAX) == (i == 0);
        r = g * (first_wins_on_positive ? s * 0.5 + 0.5 : 0.5 - s * 0.5);
        break;
    }
    // ---- ternary ----
    case ElemMode::CLIP: {
        SymbolVar lo = in(1), hi = in(2);
        if (i == 0)
            r = keep_where(logical_and(less_equal(lo, x), less_equal(x, hi)), g);
        else if (i == 1)
            r = keep_where(logical_and(less(x, lo), less_equal(lo, hi)), g);
        else
            r = keep_where(logical_or(less(hi, x), less(hi, lo)), g);
        break;
    }
    case ElemMode::WHERE:
        if (i == 0) return nullptr; // the condition
        r = i == 1 ? keep_where(x, g) : where(x, scalar_like(g, 0.0), g);
        break;
    case ElemMode::COND_LEQ_MOV:
        if (i < 2) return zero(); // the comparison operands: piecewise constant
        r = cond_leq_mov(in(0), in(1), g);
        break;
    case ElemMode::FMA3:
        r = i == 0 ? g * in(1) : i == 1 ? g * in(0) : g;
        break;
    case ElemMode::LT:
    case ElemMode::LEQ:
    case ElemMode::EQ:
    case ElemMode::NEQ:
    case ElemMode::LOGICAL_AND:
    case ElemMode::LOGICAL_OR:
    case ElemMode::LOGICAL_XOR:
    case ElemMode::LOGICAL_NOT:
        BRAID_THROW(GraphError,
                    "grad(): {} is not differentiable: mode {} has a bool output, which carries "
                    "no gradient (route values through where() instead)",
                    opr.describe(), elem_mode_name(opr.mode()));
    }
    if (!r.valid())
        BRAID_THROW(GraphError, "grad(): {} has no gradient rule for mode {}", opr.describe(),
                    elem_mode_name(opr.mode()));
    return reduce_sum_to_shape(r, in(i)).node();
}

} // namespace braid::opr
