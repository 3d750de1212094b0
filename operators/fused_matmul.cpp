#include "operators/fused_matmul.h"

#include "base/error.h"
#include "graph/graph_pass.h"
#include "graph/operator_registry.h"
#include "graph/param_io.h"
#include "operators/dense_kernels.h"
#include "operators/elemwise_kernels.h"
#include "operators/matmul.h"

#include <limits>

namespace braid::opr {

namespace {

//! Whether `s` is a bias along the last dim of a result with `n` columns and rank `rank`:
//! [n] or [1, .., 1, n] of rank <= `rank`.
bool is_row_bias(const TensorShape& s, size_t n, size_t rank) {
    if (s.ndim() == 0 || s.ndim() > rank || s[s.ndim() - 1] != n) return false;
    for (size_t i = 0; i + 1 < s.ndim(); ++i)
        if (s[i] != 1) return false;
    return true;
}

} // namespace

FusedMatMul::FusedMatMul(const VarNodeArray& inputs, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    for (auto* in : inputs) add_input(in);
    add_output();
}

SymbolVar FusedMatMul::make(SymbolVar a, SymbolVar b, SymbolVar bias, Param param,
                            const OperatorConfig& config) {
    if (param.has_activation && !fusable_activation(param.activation))
        BRAID_THROW(ValueError, "FusedMatMul: activation {} is not RELU, SIGMOID, TANH or GELU",
                    elem_mode_name(param.activation));
    VarNodeArray inputs{a.node(), b.node()};
    if (param.has_bias) inputs.push_back(bias.node());
    return a.graph().insert_opr(std::make_unique<FusedMatMul>(inputs, param, config))->output(0);
}

void FusedMatMul::init_output_dtypes() {
    for (auto* in : inputs())
        if (in->dtype() != dtype::Float32())
            BRAID_THROW(DTypeError, "{}: inputs must be float32, got {} for input {}", describe(),
                        in->dtype().name(), in->name());
    output(0)->set_dtype(dtype::Float32());
}

bool FusedMatMul::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    for (size_t i = 0; i < ctx.nr_inputs(); ++i)
        if (!ctx.shape(i)) return false;
    const auto &a = *ctx.shape(0), &b = *ctx.shape(1);
    if (a.ndim() < 2 || b.ndim() != 2 || (m_param.transpose_a && a.ndim() != 2))
        BRAID_THROW(ShapeError,
                    "{}: needs a of rank >= 2 (2 when transposed) and a 2-D b, got {} "
                    "and {}",
                    describe(), a.to_string(), b.to_string());
    size_t r = a.ndim() - 2;
    size_t ka = m_param.transpose_a ? a[r] : a[r + 1];
    size_t kb = m_param.transpose_b ? b[1] : b[0];
    size_t n = m_param.transpose_b ? b[0] : b[1];
    if (ka != kb)
        BRAID_THROW(ShapeError, "{}: inner dims differ: {} x {}", describe(), a.to_string(),
                    b.to_string());
    constexpr size_t int_max = size_t(std::numeric_limits<int>::max());
    if (a.total_nr_elems() / std::max<size_t>(ka, 1) > int_max || n > int_max || ka > int_max)
        BRAID_THROW(ShapeError, "{}: matrix dims of {} x {} exceed the BLAS limit of {}",
                    describe(), a.to_string(), b.to_string(), int_max);
    TensorShape y = a;
    if (m_param.transpose_a) y[0] = a[1];
    y[y.ndim() - 1] = n;
    if (m_param.has_bias && !is_row_bias(*ctx.shape(2), n, y.ndim()))
        BRAID_THROW(ShapeError, "{}: bias {} is not [{}] or [1, .., 1, {}] for a result {}",
                    describe(), ctx.shape(2)->to_string(), n, n, y.to_string());
    out[0] = y;
    return true;
}

void FusedMatMul::execute(ExecCtx& ctx) {
    const Tensor a = ctx.input(0).contiguous(), b = ctx.input(1).contiguous();
    Tensor& y = ctx.output(0);
    const auto &sa = a.shape(), &sb = b.shape();
    size_t n = y.shape()[y.shape().ndim() - 1];
    size_t k = m_param.transpose_b ? sb[1] : sb[0];
    size_t m = n ? y.shape().total_nr_elems() / n : 0;
    if (m == 0 || n == 0) return;
    Tensor bias;
    if (m_param.has_bias) bias = ctx.input(2).contiguous();
    const float* bias_p = m_param.has_bias ? bias.ptr<float>() : nullptr;
    float* yp = y.ptr<float>();
    ElemKernel add = find_elem_kernel(ElemMode::ADD, DTypeEnum::FLOAT32);
    ElemKernel act =
        m_param.has_activation ? find_elem_kernel(m_param.activation, DTypeEnum::FLOAT32) : nullptr;
    BRAID_ASSERT(add && (act || !m_param.has_activation), "{}: no float32 elemwise kernel",
                 describe());
    kern::TileEpilogue epilogue = [&](size_t r0, size_t rows, size_t c0, size_t cols) {
        static const uint8_t steps[2] = {1, 1};
        for (size_t r = r0; r < r0 + rows; ++r) {
            float* row = yp + r * n + c0;
            if (bias_p) {
                const void* in[2] = {row, bias_p + c0};
                add(in, steps, row, cols);
            }
            if (act) {
                const void* in[1] = {row};
                act(in, steps, row, cols);
            }
        }
    };
    kern::sgemm_parallel_epilogue(m_param.transpose_a, m_param.transpose_b, m, n, k, 1.f,
                                  a.ptr<float>(), sa[sa.ndim() - 1], b.ptr<float>(), sb[1], 0.f, yp,
                                  n, epilogue);
}

// ---- the fusion pass ----

namespace {

//! The Elemwise reading `var` alone, with `mode`, on `cn`, when `var` may be dropped.
Elemwise* sole_elemwise_reader(CompilePassCtx& ctx, VarNode* var, CompNode cn) {
    if (!ctx.removable(var)) return nullptr;
    auto* e = dynamic_cast<Elemwise*>(ctx.single_reader(var));
    if (!e || e->comp_node() != cn || bound_to_static_values(*e) ||
        e->output(0)->dtype() != dtype::Float32() || !e->output(0)->shape_known() ||
        !var->shape_known() || e->output(0)->shape() != var->shape())
        return nullptr;
    return e;
}

//! MatMul / BatchedMatMul -> [Elemwise(ADD) bias] -> [activation] becomes one FusedMatMul.
void fuse_matmul_epilogue(CompilePassCtx& ctx) {
    std::vector<OperatorNode*> candidates;
    for (auto* opr : ctx.order())
        if (dynamic_cast<MatMul*>(opr) || dynamic_cast<BatchedMatMul*>(opr))
            candidates.push_back(opr);
    for (auto* mm : candidates) {
        CompNode cn = mm->comp_node();
        VarNode *a = mm->input(0), *b = mm->input(1), *y = mm->output(0);
        if (cn.device().kind != Device::Kind::CPU || bound_to_static_values(*mm) ||
            y->dtype() != dtype::Float32() || !a->shape_known() || !b->shape_known() ||
            !y->shape_known() || b->shape().ndim() != 2 || a->shape().ndim() < 2)
            continue;
        MatMulParam mp = dynamic_cast<MatMul*>(mm) ? static_cast<MatMul*>(mm)->param()
                                                   : static_cast<BatchedMatMul*>(mm)->param();
        if (mp.transpose_a && a->shape().ndim() != 2) continue;
        FusedMatMulParam p;
        p.transpose_a = mp.transpose_a;
        p.transpose_b = mp.transpose_b;
        std::vector<OperatorNode*> chain{mm};
        VarNode *cur = y, *bias = nullptr;
        size_t n = y->shape()[y->shape().ndim() - 1];
        if (auto* e = sole_elemwise_reader(ctx, cur, cn);
            e && e->mode() == ElemMode::ADD && e->inputs().size() == 2) {
            VarNode* other = e->input(0) == cur ? e->input(1) : e->input(0);
            if (other != cur && other->dtype() == dtype::Float32() && other->shape_known() &&
                is_row_bias(other->shape(), n, y->shape().ndim())) {
                bias = other;
                p.has_bias = true;
                chain.push_back(e);
                cur = e->output(0);
            }
        }
        if (auto* e = sole_elemwise_reader(ctx, cur, cn);
            e && fusable_activation(e->mode()) && e->inputs().size() == 1) {
            p.has_activation = true;
            p.activation = e->mode();
            chain.push_back(e);
            cur = e->output(0);
        }
        if (chain.size() == 1) continue;
        SymbolVar fused =
            FusedMatMul::make(SymbolVar(a), SymbolVar(b), bias ? SymbolVar(bias) : SymbolVar(a), p,
                              OperatorConfig(chain.back()->name(), cn));
        ctx.replace(chain, fused.node()->owner());
    }
}

SymbolVarArray load_fused_matmul(const OprLoadContext& ctx) {
    auto p = read_param<FusedMatMul::Param>(ctx.params);
    ctx.expect_inputs(p.has_bias ? 3 : 2, p.has_bias ? 3 : 2);
    return {FusedMatMul::make(ctx.input(0), ctx.input(1), p.has_bias ? ctx.input(2) : SymbolVar(),
                              p, ctx.config)};
}

} // namespace

void register_fused_matmul_operators() {
    OperatorRegistry::instance().add("FusedMatMul", "fused_matmul", dump_param<FusedMatMul>,
                                     load_fused_matmul);
    register_compile_pass("fuse_matmul_epilogue", fuse_matmul_epilogue);
}

} // namespace braid::opr
