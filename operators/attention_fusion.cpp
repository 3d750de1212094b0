// Compile-time pass "fuse_attention": scaled dot-product attention written out in primitives, as
// ONNX exporters write it,
//
//     softmax((q · kᵀ) · c, axis = last) · v       kᵀ a Transpose of the last two axes of k (or a
//                                                   product with transpose_b), c a scalar constant
//                                                   (a Mul by c, a Div by 1/c, or none: c = 1),
//
// on float32 q [H, S, D] or [B, H, S, D], becomes one Attention (operators/attention.h) with
// scale c: the S × Sk scores and probabilities are never stored (the kernel walks key blocks
// with an online softmax), and four operators and their tensors go. Rank-3 inputs are viewed as
// one batch item ([1, H, S, D]) and the output viewed back. See graph/graph_pass.h for the rules
// a pass keeps; anything that does not match exactly is left as written.
#include "graph/graph_pass.h"
#include "operators/attention.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/matmul.h"
#include "operators/normalization.h"
#include "operators/tensor_manip.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace braid::opr {

namespace {

//! Whether `pattern` swaps the last two axes and keeps the others.
bool swaps_last_two(const std::vector<int>& pattern) {
    size_t n = pattern.size();
    if (n < 2 || pattern[n - 1] != int(n - 2) || pattern[n - 2] != int(n - 1)) return false;
    for (size_t i = 0; i + 2 < n; ++i)
        if (pattern[i] != int(i)) return false;
    return true;
}

bool float32_with_shape(VarNode* v, size_t rank) {
    return v->dtype() == dtype::Float32() && v->shape_known() && v->shape().ndim() == rank;
}

struct AttentionMatch {
    std::vector<OperatorNode*> chain; //!< the operators replaced
    VarNode *q = nullptr, *k = nullptr, *v = nullptr;
    float scale = 1.f;
};

std::optional<AttentionMatch> match_attention(CompilePassCtx& ctx, Softmax* sm) {
    AttentionMatch m;
    VarNode* x = sm->input(0);
    size_t rank = x->shape_known() ? x->shape().ndim() : 0;
    if (sm->param().log || (rank != 3 && rank != 4) || !float32_with_shape(x, rank) ||
        (sm->param().axis != -1 && sm->param().axis != int(rank) - 1) || !ctx.removable(x))
        return std::nullopt;
    CompNode cn = sm->comp_node();
    // The scale.
    VarNode* scores = x;
    if (auto* e = dynamic_cast<Elemwise*>(x->owner()); e && e->inputs().size() == 2) {
        std::optional<float> c;
        if (e->mode() == ElemMode::MUL && (c = float32_scalar_constant(e->input(1))))
            scores = e->input(0);
        else if (e->mode() == ElemMode::MUL && (c = float32_scalar_constant(e->input(0))))
            scores = e->input(1);
        else if (e->mode() == ElemMode::TRUE_DIV && (c = float32_scalar_constant(e->input(1)))) {
            scores = e->input(0);
            c = 1.f / *c;
        }
        if (c) {
            if (!std::isfinite(*c) || !ctx.removable(scores) || scores->shape() != x->shape())
                return std::nullopt;
            m.scale = *c;
            m.chain.push_back(e);
        }
    }
    // q · kᵀ.
    auto* qk = dynamic_cast<BatchedMatMul*>(scores->owner());
    if (!qk || qk->comp_node() != cn || qk->param().transpose_a) return std::nullopt;
    m.chain.push_back(qk);
    m.q = qk->input(0);
    if (qk->param().transpose_b) {
        m.k = qk->input(1);
    } else {
        auto* kt = dynamic_cast<Dimshuffle*>(qk->input(1)->owner());
        if (!kt || !swaps_last_two(kt->pattern())) return std::nullopt;
        m.k = kt->input(0);
        if (ctx.removable(qk->input(1))) m.chain.push_back(kt);
    }
    // softmax(...) · v.
    VarNode* p = sm->output(0);
    auto* pv = dynamic_cast<BatchedMatMul*>(ctx.single_reader(p));
    if (!pv || !ctx.removable(p) || pv->input(0) != p || pv->param().transpose_a ||
        pv->param().transpose_b || pv->comp_node() != cn)
        return std::nullopt;
    m.v = pv->input(1);
    m.chain.push_back(sm);
    m.chain.push_back(pv);
    // Shapes: no broadcasting between q, k and v.
    if (!float32_with_shape(m.q, rank) || !float32_with_shape(m.k, rank) ||
        !float32_with_shape(m.v, rank) || !float32_with_shape(pv->output(0), rank))
        return std::nullopt;
    const TensorShape &qs = m.q->shape(), &ks = m.k->shape(), &vs = m.v->shape();
    for (size_t i = 0; i + 2 < rank; ++i)
        if (qs[i] != ks[i] || ks[i] != vs[i]) return std::nullopt;
    if (qs[rank - 1] != ks[rank - 1] || ks[rank - 2] != vs[rank - 2]) return std::nullopt;
    return m;
}

void fuse_attention(CompilePassCtx& ctx) {
    std::vector<Softmax*> softmaxes;
    for (auto* opr : ctx.order())
        if (auto* s = dynamic_cast<Softmax*>(opr);
            s && s->comp_node().device().kind == Device::Kind::CPU)
            softmaxes.push_back(s);
    for (auto* sm : softmaxes) {
        auto m = match_attention(ctx, sm);
        if (!m) continue;
        OperatorConfig config(m->chain.back()->name(), sm->comp_node());
        std::vector<OperatorNode*> added;
        auto as_4d = [&](VarNode* var) {
            const TensorShape& s = var->shape();
            if (s.ndim() == 4) return SymbolVar(var);
            SymbolVar r =
                Reshape::make(SymbolVar(var), {1, long(s[0]), long(s[1]), long(s[2])}, config);
            added.push_back(r.node()->owner());
            return r;
        };
        SymbolVar q = as_4d(m->q), k = as_4d(m->k), v = as_4d(m->v);
        AttentionParam param;
        param.scale = m->scale;
        SymbolVar out = Attention::make(q, k, v, param, config)[0];
        added.push_back(out.node()->owner());
        if (m->q->shape().ndim() == 3) {
            const TensorShape& ys = m->chain.back()->output(0)->shape();
            out = Reshape::make(out, {long(ys[0]), long(ys[1]), long(ys[2])}, config);
            added.push_back(out.node()->owner());
        }
        ctx.replace(m->chain, added);
    }
}

} // namespace

void register_attention_fusion_pass() {
    register_compile_pass("fuse_attention", fuse_attention);
}

} // namespace braid::opr
