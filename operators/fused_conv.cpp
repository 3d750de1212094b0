#include "operators/fused_conv.h"

#include "base/error.h"
#include "graph/graph_pass.h"
#include "graph/operator_registry.h"
#include "graph/param_io.h"
#include "operators/batch_norm.h"
#include "operators/conv_direct.h"
#include "operators/dense_kernels.h"
#include "operators/dnnl_kernels.h"
#include "operators/elemwise_kernels.h"

#include <cmath>
#include <optional>
#include <vector>

namespace braid::opr {

namespace {

size_t nr_channel_inputs(const FusedConv2dParam& p) {
    return (p.has_bias ? 1 : 0) + (p.has_batch_norm ? 4 : 0);
}

size_t nr_inputs(const FusedConv2dParam& p) {
    return 2 + nr_channel_inputs(p) + size_t(std::max(p.chain_scalars, 0));
}

//! Whether `s` holds one value per channel of an NCHW result with `o` channels, broadcasting
//! along axis 1: [o, 1, 1] or [1, o, 1, 1].
bool is_channel_bias(const TensorShape& s, size_t o) {
    if (s.ndim() == 3) return s[0] == o && s[1] == 1 && s[2] == 1;
    if (s.ndim() == 4) return s[0] == 1 && s[1] == o && s[2] == 1 && s[3] == 1;
    return false;
}

//! Whether `s` is a batch-norm statistic for `o` channels: [o] or [1, o, 1, 1].
bool is_channel_stat(const TensorShape& s, size_t o) {
    return (s.ndim() == 1 && s[0] == o) || is_channel_bias(s, o);
}

} // namespace

FusedConv2d::FusedConv2d(const VarNodeArray& inputs, Param param, const OperatorConfig& config)
    : ParamOperator(param, config),
      m_constant_weights(std::make_shared<kern::DnnlConstantWeights>()) {
    for (auto* in : inputs) add_input(in);
    add_output();
}

SymbolVar FusedConv2d::make(const SymbolVarArray& inputs, Param param,
                            const OperatorConfig& config) {
    if (param.chain_scalars < 0 || inputs.size() != nr_inputs(param))
        BRAID_THROW(ShapeError, "FusedConv2d: expects {} inputs ({} chain scalars), got {}",
                    nr_inputs(param), param.chain_scalars, inputs.size());
    if (param.has_activation && !fusable_activation(param.activation))
        BRAID_THROW(ValueError, "FusedConv2d: activation {} is not RELU, SIGMOID, TANH or GELU",
                    elem_mode_name(param.activation));
    if (!param.chain.modes.empty())
        check_chain_param(param.chain, 1 + size_t(param.chain_scalars), "FusedConv2d's chain");
    VarNodeArray nodes;
    for (auto& v : inputs) nodes.push_back(v.node());
    return inputs[0]
        .graph()
        .insert_opr(std::make_unique<FusedConv2d>(nodes, param, config))
        ->output(0);
}

void FusedConv2d::init_output_dtypes() {
    for (auto* in : inputs())
        if (in->dtype() != dtype::Float32())
            BRAID_THROW(DTypeError, "{}: inputs must be float32, got {} for input {}", describe(),
                        in->dtype().name(), in->name());
    output(0)->set_dtype(dtype::Float32());
}

bool FusedConv2d::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    for (size_t i = 0; i < ctx.nr_inputs(); ++i)
        if (!ctx.shape(i)) return false;
    const auto &x = *ctx.shape(0), &w = *ctx.shape(1);
    const auto& p = m_param.conv;
    if (x.ndim() != 4 || w.ndim() != 4 || p.stride_h < 1 || p.stride_w < 1)
        BRAID_THROW(ShapeError, "{}: input must be 4-D NCHW and weight 4-D OIHW, got {} and {}",
                    describe(), x.to_string(), w.to_string());
    size_t ekh = size_t(p.dilation_h) * (w[2] - 1) + 1, ekw = size_t(p.dilation_w) * (w[3] - 1) + 1;
    size_t ph = x[2] + 2 * size_t(p.pad_h), pw = x[3] + 2 * size_t(p.pad_w);
    if (x[1] != w[1] * size_t(p.groups) || ekh > ph || ekw > pw)
        BRAID_THROW(ShapeError, "{}: input {} does not fit weight {}", describe(), x.to_string(),
                    w.to_string());
    size_t scalars0 = 2 + nr_channel_inputs(m_param);
    for (size_t i = 2; i < ctx.nr_inputs(); ++i)
        if (size_t want = i < scalars0 ? w[0] : 1; ctx.shape(i)->total_nr_elems() != want)
            BRAID_THROW(ShapeError, "{}: {} input {} has shape {}, expected {} values", describe(),
                        i < scalars0 ? "per-channel" : "chain", i, ctx.shape(i)->to_string(), want);
    out[0] = TensorShape{x[0], w[0], (ph - ekh) / size_t(p.stride_h) + 1,
                         (pw - ekw) / size_t(p.stride_w) + 1};
    return true;
}

size_t FusedConv2d::workspace_bytes() const {
    // What execute() fuses into oneDNN's convolution: the pointers say only what is set.
    static const float set = 0;
    kern::DnnlConvFusion fusion;
    if (m_param.has_batch_norm) fusion.scale = fusion.shift = &set;
    if (m_param.has_bias) fusion.shift = &set;
    return conv2d_workspace(m_param.conv, input(0)->shape(), input(1)->shape(), fusion);
}

void FusedConv2d::execute(ExecCtx& ctx) {
    const Tensor x = ctx.input(0).contiguous(), w = ctx.input(1).contiguous();
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    size_t o = w.shape()[0];
    size_t next = 2;
    Tensor bias_t;
    const float* bias = nullptr;
    if (m_param.has_bias) {
        bias_t = ctx.input(next++).contiguous();
        bias = bias_t.ptr<float>();
    }
    // The batch norm as one multiply-add per element, computed as BatchNorm computes it.
    std::vector<float> mul, add;
    if (m_param.has_batch_norm) {
        Tensor st[4];
        for (auto& t : st) t = ctx.input(next++).contiguous();
        const float *scale = st[0].ptr<float>(), *shift = st[1].ptr<float>(),
                    *mean = st[2].ptr<float>(), *var = st[3].ptr<float>();
        mul.resize(o);
        add.resize(o);
        for (size_t c = 0; c < o; ++c) {
            double a = double(scale[c]) / std::sqrt(double(var[c]) + double(m_param.eps));
            mul[c] = float(a);
            add[c] = float(double(shift[c]) - double(mean[c]) * a);
        }
    }
    ElemKernel act =
        m_param.has_activation ? find_elem_kernel(m_param.activation, DTypeEnum::FLOAT32) : nullptr;
    BRAID_ASSERT(act || !m_param.has_activation, "{}: no float32 activation kernel", describe());
    bool bn = m_param.has_batch_norm;
    // The chain last, over each block of output rows: its input 0 the block, then its scalars.
    const bool has_chain = !m_param.chain.modes.empty();
    std::vector<Tensor> chain_scalars;
    std::vector<const float*> chain_base{nullptr};
    for (int32_t i = 0; has_chain && i < m_param.chain_scalars; ++i) {
        chain_scalars.push_back(ctx.input(next++).contiguous());
        chain_base.push_back(chain_scalars.back().ptr<float>());
    }
    std::vector<uint8_t> chain_advance(chain_base.size(), 0);
    chain_advance[0] = 1;
    std::optional<ChainRunner> chain;
    if (has_chain) chain.emplace(m_param.chain, chain_advance);
    auto chain_rows = [&](float* yb, size_t rows, size_t cols, size_t ld) {
        thread_local std::vector<const float*> base; // input 0 differs per (concurrent) call
        base.assign(chain_base.begin(), chain_base.end());
        // Rows that follow one another (whole planes) run as one.
        size_t runs = ld == cols ? 1 : rows, len = ld == cols ? rows * cols : cols;
        for (size_t r = 0; r < runs; ++r) {
            base[0] = yb + r * ld;
            chain->run(base.data(), yb + r * ld, 0, len);
        }
    };
    ConvEpilogue epilogue = [&](float* yb, size_t o0, size_t rows, size_t cols, size_t ld) {
        static const uint8_t steps[1] = {1};
        for (size_t r = 0; r < rows; ++r) {
            float* row = yb + r * ld;
            size_t c = o0 + r;
            if (bias) {
                float b = bias[c];
                for (size_t i = 0; i < cols; ++i) row[i] += b;
            }
            if (bn) {
                float a = mul[c], b = add[c];
                for (size_t i = 0; i < cols; ++i) row[i] = row[i] * a + b;
            }
            if (act) {
                const void* in[1] = {row};
                act(in, steps, row, cols);
            }
        }
        if (has_chain) chain_rows(yb, rows, cols, ld);
    };
    // oneDNN: the batch norm's multiplier folded into the weights, bias and shift as the
    // convolution's bias; the activation runs as the epilogue (kern::DnnlConvFusion).
    std::vector<float> shift;
    kern::DnnlConvFusion fusion;
    if (bn) {
        shift.resize(o);
        for (size_t c = 0; c < o; ++c) shift[c] = (bias ? bias[c] * mul[c] : 0.f) + add[c];
        fusion.scale = mul.data();
        fusion.shift = shift.data();
        // The multiplier comes from the batch norm's scale and variance.
        size_t bn0 = m_param.has_bias ? 3 : 2;
        fusion.constant_weights =
            kern::if_constant(*m_constant_weights, {input(1), input(bn0), input(bn0 + 3)});
    } else {
        fusion.shift = bias;
        fusion.constant_weights = kern::if_constant(*m_constant_weights, {input(1)});
    }
    // What a kernel leaves to its epilogue: the activation, unless the kernel applied it (the
    // direct kernel applies relu itself), and the chain; null when nothing is left.
    bool relu = m_param.has_activation && m_param.activation == ElemMode::RELU;
    auto leftover = [&](bool with_act) {
        std::optional<ConvEpilogue> after;
        if (with_act || has_chain)
            after = [&, with_act](float* yb, size_t, size_t rows, size_t cols, size_t ld) {
                static const uint8_t steps[1] = {1};
                for (size_t r = 0; r < rows && with_act; ++r) {
                    const void* in[1] = {yb + r * ld};
                    act(in, steps, yb + r * ld, cols);
                }
                if (has_chain) chain_rows(yb, rows, cols, ld);
            };
        return after;
    };
    auto dnnl_after = leftover(act != nullptr);
    if (kern::dnnl_conv2d_forward(m_param.conv, x, w, y, fusion,
                                  dnnl_after ? &*dnnl_after : nullptr, ctx.workspace()))
        return;
    // The direct kernel: bias, batch norm and relu in registers, the rest after.
    DirectOutputOps ops{bias, bn ? mul.data() : nullptr, bn ? add.data() : nullptr, relu};
    auto direct_after = leftover(act && !relu);
    if (conv_direct_forward(m_param.conv, x, w, y, direct_after ? &*direct_after : nullptr, &ops))
        return;
    conv2d_forward(m_param.conv, x, w, y, &epilogue, ctx.workspace());
}

// ---- the fusion pass ----

namespace {

//! The operator reading `var` alone, of type T, on `cn` and in float32, when `var` may be
//! dropped.
template <typename T> T* sole_reader(CompilePassCtx& ctx, VarNode* var, CompNode cn) {
    if (!ctx.removable(var)) return nullptr;
    auto* r = dynamic_cast<T*>(ctx.single_reader(var));
    if (!r || r->comp_node() != cn || bound_to_static_values(*r) ||
        r->output(0)->dtype() != dtype::Float32() || !r->output(0)->shape_known() ||
        r->output(0)->shape() != var->shape())
        return nullptr;
    return r;
}

void fuse_conv_epilogue(CompilePassCtx& ctx) {
    std::vector<Conv2d*> candidates;
    for (auto* opr : ctx.order())
        if (auto* c = dynamic_cast<Conv2d*>(opr)) candidates.push_back(c);
    for (auto* conv : candidates) {
        CompNode cn = conv->comp_node();
        VarNode* cur = conv->output(0);
        if (cn.device().kind != Device::Kind::CPU || bound_to_static_values(*conv) ||
            cur->dtype() != dtype::Float32() || !cur->shape_known())
            continue;
        size_t o = cur->shape()[1];
        FusedConv2dParam p;
        p.conv = conv->param();
        std::vector<OperatorNode*> chain{conv};
        SymbolVarArray inputs{conv->input(0), conv->input(1)};
        if (auto* e = sole_reader<Elemwise>(ctx, cur, cn);
            e && e->mode() == ElemMode::ADD && e->inputs().size() == 2) {
            VarNode* other = e->input(0) == cur ? e->input(1) : e->input(0);
            if (other != cur && other->dtype() == dtype::Float32() && other->shape_known() &&
                is_channel_bias(other->shape(), o)) {
                p.has_bias = true;
                inputs.push_back(other);
                chain.push_back(e);
                cur = e->output(0);
            }
        }
        if (auto* bn = sole_reader<BatchNorm>(ctx, cur, cn); bn && bn->input(0) == cur) {
            bool ok = true;
            for (size_t i = 1; i < 5; ++i)
                ok = ok && bn->input(i) != cur && bn->input(i)->dtype() == dtype::Float32() &&
                     bn->input(i)->shape_known() && is_channel_stat(bn->input(i)->shape(), o);
            if (ok) {
                p.has_batch_norm = true;
                p.eps = bn->eps();
                for (size_t i = 1; i < 5; ++i) inputs.push_back(bn->input(i));
                chain.push_back(bn);
                cur = bn->output(0);
            }
        }
        if (auto* e = sole_reader<Elemwise>(ctx, cur, cn);
            e && fusable_activation(e->mode()) && e->inputs().size() == 1) {
            p.has_activation = true;
            p.activation = e->mode();
            chain.push_back(e);
            cur = e->output(0);
        }
        if (chain.size() == 1) continue;
        SymbolVar fused = FusedConv2d::make(inputs, p, OperatorConfig(chain.back()->name(), cn));
        ctx.replace(chain, fused.node()->owner());
    }
}

/*!
 * Folds an ElemwiseChain into the convolution (Conv2d or FusedConv2d) whose result it reads,
 * where the chain's other inputs are single values, the chain runs as one loop (ChainRunner)
 * and nothing else reads that result. Runs after fuse_elemwise_chains: a HardSwish written as
 * x * clip(x + 3, 0, 6) / 6 is one chain by then.
 */
void fold_chain_into_conv(CompilePassCtx& ctx) {
    std::vector<ElemwiseChain*> chains;
    for (auto* opr : ctx.order())
        if (auto* c = dynamic_cast<ElemwiseChain*>(opr)) chains.push_back(c);
    for (auto* chain : chains) {
        CompNode cn = chain->comp_node();
        if (cn.device().kind != Device::Kind::CPU || bound_to_static_values(*chain)) continue;
        const auto& ins = chain->inputs();
        int32_t conv_in = -1;
        bool scalars = true;
        for (size_t i = 0; i < ins.size(); ++i) {
            VarNode* in = ctx.current(ins[i]); // a convolution fused earlier computes it now
            OperatorNode* owner = in->owner();
            bool conv = (dynamic_cast<Conv2d*>(owner) || dynamic_cast<FusedConv2d*>(owner)) &&
                        owner->output(0) == in && in->shape() == chain->output(0)->shape();
            if (conv && conv_in < 0)
                conv_in = int32_t(i);
            else if (ins[i]->shape().total_nr_elems() != 1)
                scalars = false;
        }
        if (conv_in < 0 || !scalars) continue;
        // Only a chain that runs as one loop: one that runs step by step costs more on each
        // output block than as one operator over the whole tensor.
        std::vector<uint8_t> advance(ins.size(), 0);
        advance[size_t(conv_in)] = 1;
        if (!ChainRunner(chain->param(), advance).one_loop()) continue;
        VarNode* result = ctx.current(ins[size_t(conv_in)]);
        OperatorNode* conv = result->owner();
        if (conv->comp_node() != cn || bound_to_static_values(*conv) || !ctx.removable(result) ||
            ctx.single_reader(result) != chain)
            continue;
        FusedConv2dParam p;
        SymbolVarArray inputs;
        if (auto* f = dynamic_cast<FusedConv2d*>(conv)) {
            p = f->param();
            if (!p.chain.modes.empty()) continue;
        } else {
            p.conv = static_cast<Conv2d*>(conv)->param();
        }
        for (auto* in : conv->inputs()) inputs.emplace_back(in);
        // The chain's inputs renumbered: the convolution's result first, then the scalars in
        // their order; the steps keep their numbers (the input count is the same).
        int32_t nin = int32_t(ins.size());
        std::vector<int32_t> renumber(ins.size());
        for (int32_t i = 0, next = 1; i < nin; ++i) {
            renumber[size_t(i)] = i == conv_in ? 0 : next++;
            if (i != conv_in) inputs.emplace_back(ins[size_t(i)]);
        }
        p.chain.modes = chain->param().modes;
        p.chain.operands.clear();
        for (int32_t o : chain->param().operands)
            p.chain.operands.push_back(o >= 0 && o < nin ? renumber[size_t(o)] : o);
        p.chain_scalars = nin - 1;
        SymbolVar fused = FusedConv2d::make(inputs, p, OperatorConfig(chain->name(), cn));
        ctx.replace({conv, chain}, fused.node()->owner());
    }
}

SymbolVarArray load_fused_conv2d(const OprLoadContext& ctx) {
    auto p = read_param<FusedConv2d::Param>(ctx.params);
    size_t n = nr_inputs(p);
    ctx.expect_inputs(n, n);
    SymbolVarArray inputs;
    for (size_t i = 0; i < n; ++i) inputs.push_back(ctx.input(i));
    return {FusedConv2d::make(inputs, p, ctx.config)};
}

} // namespace

void register_fused_conv_operators() {
    OperatorRegistry::instance().add("FusedConv2d", "fused_conv", dump_param<FusedConv2d>,
                                     load_fused_conv2d);
    register_compile_pass("fuse_conv_epilogue", fuse_conv_epilogue);
}

void register_conv_chain_pass() {
    register_compile_pass("fold_chain_into_conv", fold_chain_into_conv);
}

} // namespace braid::opr
