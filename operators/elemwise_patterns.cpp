// Compile-time passes on elementwise patterns ("pow_square" below). "fold_gelu_erf": the erf form
// of GELU written out in elementwise operators, as ONNX exporters write it (ONNX has no Gelu before
// opset 20),
//
//     u * 0.5 * (1 + erf(u / sqrt 2))      in either order of the two products, with
//                                          u / sqrt 2 written as a Div or a Mul by 1 / sqrt 2,
//
// becomes one Elemwise(GELU) on u: five operators and four intermediate tensors fewer, and a
// GELU that the matmul fusion pass (registered after this one) then folds into the GEMM before
// it. The constants must be float32 scalars (any shape of one element) equal to theirs within
// 1e-6 relative; anything else is left as written. See graph/graph_pass.h for the rules.
#include "graph/graph_pass.h"
#include "operators/elemwise.h"
#include "operators/io.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace braid::opr {

namespace {

bool near(std::optional<float> v, double want) {
    return v && std::abs(double(*v) - want) <= 1e-6 * std::abs(want);
}

//! The Elemwise with `mode` that alone reads `var` (which it may then drop), else null.
Elemwise* sole_reader(CompilePassCtx& ctx, VarNode* var, ElemMode mode) {
    if (!ctx.removable(var)) return nullptr;
    auto* e = dynamic_cast<Elemwise*>(ctx.single_reader(var));
    if (!e || e->mode() != mode || e->inputs().size() != 2 ||
        e->comp_node() != var->owner()->comp_node() || !e->output(0)->shape_known() ||
        !var->shape_known() || e->output(0)->shape() != var->shape())
        return nullptr;
    return e;
}

//! The input of binary `e` other than `var`; null when both are `var`.
VarNode* other_input(const Elemwise* e, VarNode* var) {
    if (e->input(0) == var) return e->input(1) == var ? nullptr : e->input(1);
    return e->input(1) == var ? e->input(0) : nullptr;
}

//! Matches the pattern around `erf` (see the file comment); returns the operators it replaces,
//! the one that produces the GELU last, and sets `u`; empty when `erf` is no such GELU.
std::vector<OperatorNode*> match_gelu(CompilePassCtx& ctx, Elemwise* erf, VarNode*& u) {
    // u / sqrt 2 (Div) or u * (1 / sqrt 2) (Mul).
    auto* scaled = dynamic_cast<Elemwise*>(erf->input(0)->owner());
    if (!scaled || scaled->inputs().size() != 2 || !ctx.removable(erf->input(0))) return {};
    if (scaled->mode() == ElemMode::TRUE_DIV &&
        near(float32_scalar_constant(scaled->input(1)), M_SQRT2))
        u = scaled->input(0);
    else if (scaled->mode() == ElemMode::MUL &&
             near(float32_scalar_constant(scaled->input(1)), M_SQRT1_2))
        u = scaled->input(0);
    else if (scaled->mode() == ElemMode::MUL &&
             near(float32_scalar_constant(scaled->input(0)), M_SQRT1_2))
        u = scaled->input(1);
    else
        return {};
    if (u->dtype() != dtype::Float32() || !u->shape_known() ||
        u->shape() != erf->output(0)->shape())
        return {};
    // 1 + erf(...)
    auto* plus1 = sole_reader(ctx, erf->output(0), ElemMode::ADD);
    if (!plus1 || !near(float32_scalar_constant(other_input(plus1, erf->output(0))), 1.0))
        return {};
    // Then u * (1 + erf) * 0.5, or (u * 0.5) * (1 + erf).
    auto* prod = sole_reader(ctx, plus1->output(0), ElemMode::MUL);
    if (!prod) return {};
    VarNode* factor = other_input(prod, plus1->output(0));
    if (factor == u) {
        auto* half = sole_reader(ctx, prod->output(0), ElemMode::MUL);
        if (!half || !near(float32_scalar_constant(other_input(half, prod->output(0))), 0.5))
            return {};
        return {scaled, erf, plus1, prod, half};
    }
    auto* half_u = factor ? dynamic_cast<Elemwise*>(factor->owner()) : nullptr;
    if (!half_u || half_u->mode() != ElemMode::MUL || half_u->inputs().size() != 2 ||
        !ctx.removable(factor) || other_input(half_u, u) == nullptr ||
        !near(float32_scalar_constant(other_input(half_u, u)), 0.5) ||
        factor->shape() != u->shape())
        return {};
    return {scaled, half_u, erf, plus1, prod};
}

//! The Elemwise operators of `mode` on CPU comp nodes in the order, collected before a pass
//! edits the order.
std::vector<Elemwise*> cpu_elemwise_of(CompilePassCtx& ctx, ElemMode mode) {
    std::vector<Elemwise*> res;
    for (auto* opr : ctx.order())
        if (auto* e = dynamic_cast<Elemwise*>(opr);
            e && e->mode() == mode && e->comp_node().device().kind == Device::Kind::CPU)
            res.push_back(e);
    return res;
}

void fold_gelu_erf(CompilePassCtx& ctx) {
    for (auto* erf : cpu_elemwise_of(ctx, ElemMode::ERF)) {
        VarNode* u = nullptr;
        auto chain = match_gelu(ctx, erf, u);
        if (chain.empty()) continue;
        SymbolVar gelu = Elemwise::make(ElemMode::GELU, {SymbolVar(u)},
                                        OperatorConfig(chain.back()->name(), erf->comp_node()));
        ctx.replace(chain, gelu.node()->owner());
    }
}

/*!
 * Compile-time pass "pow_square": x ^ 2 with a float32 scalar constant exponent of exactly 2
 * (ONNX exporters write squares as Pow) becomes Elemwise(SQUARE) on x, the same value (x * x
 * is what a correctly rounded pow gives) without the general power's exp and log: a mel
 * spectrogram's Pow took 0.74 ms where ONNX Runtime takes 0.04.
 */
void pow_square(CompilePassCtx& ctx) {
    for (auto* p : cpu_elemwise_of(ctx, ElemMode::POW)) {
        VarNode* x = p->input(0);
        std::optional<float> exponent = float32_scalar_constant(p->input(1));
        if (!exponent || *exponent != 2.f || x->dtype() != dtype::Float32() ||
            p->output(0)->dtype() != dtype::Float32() || !x->shape_known() ||
            !p->output(0)->shape_known() || x->shape() != p->output(0)->shape())
            continue;
        SymbolVar sq = Elemwise::make(ElemMode::SQUARE, {SymbolVar(x)},
                                      OperatorConfig(p->name(), p->comp_node()));
        ctx.replace({p}, sq.node()->owner());
    }
}

} // namespace

void register_elemwise_pattern_passes() {
    register_compile_pass("fold_gelu_erf", fold_gelu_erf);
    register_compile_pass("pow_square", pow_square);
}

} // namespace braid::opr
