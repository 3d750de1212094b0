#include "operators/elemwise_chain.h"

#include "base/error.h"
#include "base/thread_pool.h"
#include "graph/graph_pass.h"
#include "graph/operator_registry.h"
#include "graph/param_io.h"
#include "operators/elemwise_kernels.h"
#include "operators/kernel_utils.h"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace braid::opr {

bool chainable_mode(ElemMode mode) {
    switch (mode) {
    case ElemMode::NEG:
    case ElemMode::ABS:
    case ElemMode::RELU:
    case ElemMode::SQUARE:
    case ElemMode::SQRT:
    case ElemMode::ROUND: // quantization: round(x / scale) + zero point, clipped
    case ElemMode::FLOOR:
    case ElemMode::CEIL:
    case ElemMode::ADD:
    case ElemMode::SUB:
    case ElemMode::MUL:
    case ElemMode::TRUE_DIV:
    case ElemMode::MAX:
    case ElemMode::MIN:
    case ElemMode::CLIP:
        return true;
    default:
        return false;
    }
}

ElemwiseChain::ElemwiseChain(const VarNodeArray& inputs, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    for (auto* in : inputs) add_input(in);
    add_output();
}

void check_chain_param(const ElemwiseChainParam& param, size_t inputs, const char* who) {
    if (inputs == 0 || param.modes.empty() || param.operands.size() != 3 * param.modes.size())
        BRAID_THROW(ValueError,
                    "{}: {} inputs, {} steps and {} operands (3 per step, at least one input and "
                    "one step)",
                    who, inputs, param.modes.size(), param.operands.size());
    int32_t nin = int32_t(inputs);
    for (size_t s = 0; s < param.modes.size(); ++s) {
        int32_t m = param.modes[s];
        if (m < 0 || m > int32_t(ElemMode::FMA3) || !chainable_mode(ElemMode(m)))
            BRAID_THROW(ValueError, "{}: step {} has mode {}, which does not chain", who, s, m);
        size_t arity = elem_mode_arity(ElemMode(m));
        for (size_t k = 0; k < 3; ++k) {
            int32_t o = param.operands[3 * s + k];
            bool ok = k < arity ? o >= 0 && o < nin + int32_t(s) : o == -1;
            if (!ok)
                BRAID_THROW(ValueError,
                            "{}: step {} ({}) operand {} is {}; expected an input (below {}) or "
                            "an earlier step (below {}), -1 past its arity",
                            who, s, elem_mode_name(ElemMode(m)), k, o, nin, nin + int32_t(s));
        }
    }
}

SymbolVar ElemwiseChain::make(const SymbolVarArray& inputs, Param param,
                              const OperatorConfig& config) {
    check_chain_param(param, inputs.size(), "ElemwiseChain");
    VarNodeArray vars;
    for (auto& v : inputs) vars.push_back(v.node());
    return inputs[0]
        .graph()
        .insert_opr(std::make_unique<ElemwiseChain>(vars, std::move(param), config))
        ->output(0);
}

void ElemwiseChain::init_output_dtypes() {
    for (auto* in : inputs())
        if (in->dtype() != dtype::Float32())
            BRAID_THROW(DTypeError, "{}: inputs must be float32, got {} for input {}", describe(),
                        in->dtype().name(), in->name());
    output(0)->set_dtype(dtype::Float32());
}

bool ElemwiseChain::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    std::vector<const TensorShape*> shapes;
    for (size_t i = 0; i < ctx.nr_inputs(); ++i) {
        if (!ctx.shape(i)) return false;
        shapes.push_back(ctx.shape(i));
    }
    if (!broadcast_shapes(shapes.data(), shapes.size(), out[0]))
        BRAID_THROW(ShapeError, "{}: the inputs' shapes do not broadcast", describe());
    return true;
}

void ElemwiseChain::execute(ExecCtx& ctx) {
    Tensor& y = ctx.output(0);
    const TensorShape& shape = y.shape();
    size_t n = shape.total_nr_elems();
    if (n == 0) return;
    BRAID_ASSERT(y.layout().is_contiguous(), "{}: the output is not contiguous", describe());
    // Each input as dense float32 of the output's shape, or one element that every output
    // reads (step 0); another broadcast is made dense first.
    size_t nin = inputs().size();
    std::vector<Tensor> dense(nin);
    std::vector<const float*> base(nin);
    std::vector<uint8_t> advance(nin, 1);
    for (size_t i = 0; i < nin; ++i) {
        const Tensor& t = ctx.input(i);
        if (t.shape().total_nr_elems() == 1) {
            dense[i] = t.contiguous();
            advance[i] = 0;
        } else if (t.shape() == shape) {
            dense[i] = t.contiguous();
        } else {
            dense[i] = Tensor(t.storage(), t.offset(), t.layout().broadcast(shape)).contiguous();
        }
        base[i] = dense[i].ptr<float>();
    }
    float* yp = y.ptr<float>();
    // At least 64 blocks (64K elements, tens of microseconds) per task.
    ChainRunner runner(m_param, advance);
    parallel_for((n + CHAIN_BLOCK - 1) / CHAIN_BLOCK, 64, [&](size_t b0, size_t b1) {
        runner.run(base.data(), yp, b0 * CHAIN_BLOCK, std::min(b1 * CHAIN_BLOCK, n));
    });
}

namespace {

// ---- chains with a loop of their own: the activations exporters write as primitives. Each
// loop runs the steps' operations in the steps' order on one element at a time, so it gives the
// steps' bits. A product and a sum in one loop would be contracted into an FMA (another
// rounding): those loops turn contraction off.

//! clip as ClipOp computes it.
inline float clip_value(float x, float lo, float hi) {
    float t = x < lo ? lo : x;
    return t > hi ? hi : t;
}

//! x * clip(x + a, lo, hi) / d: HardSwish as exporters write it (a = 3, lo = 0, hi = d = 6).
BRAID_SIMD_CLONES void hard_swish_div_loop(const float* x, float* y, size_t n, float a, float lo,
                                           float hi, float d) {
    for (size_t i = 0; i < n; ++i) y[i] = x[i] * clip_value(x[i] + a, lo, hi) / d;
}

//! x * clip(x * a + b, lo, hi): ONNX's HardSwish as the importer writes it.
BRAID_SIMD_CLONES BRAID_NO_FP_CONTRACT void
hard_swish_mul_loop(const float* x, float* y, size_t n, float a, float b, float lo, float hi) {
    for (size_t i = 0; i < n; ++i) {
        float t = x[i] * a;
        y[i] = x[i] * clip_value(t + b, lo, hi);
    }
}

//! x * a + b: a scale and shift.
BRAID_SIMD_CLONES BRAID_NO_FP_CONTRACT void affine_loop(const float* x, float* y, size_t n, float a,
                                                        float b) {
    for (size_t i = 0; i < n; ++i) {
        float t = x[i] * a;
        y[i] = t + b;
    }
}

//! clip(x * a + b, lo, hi): HardSigmoid.
BRAID_SIMD_CLONES BRAID_NO_FP_CONTRACT void
hard_sigmoid_loop(const float* x, float* y, size_t n, float a, float b, float lo, float hi) {
    for (size_t i = 0; i < n; ++i) {
        float t = x[i] * a;
        y[i] = clip_value(t + b, lo, hi);
    }
}

} // namespace

//! The chain as one of the forms with a loop of their own; form NONE where it is none.
ChainRunner::Loop ChainRunner::recognize(const ElemwiseChainParam& p, size_t nin,
                                         const uint8_t* advance) {
    auto mode = [&](size_t s) { return ElemMode(p.modes[s]); };
    auto operand = [&](size_t s, size_t k) { return p.operands[3 * s + k]; };
    auto scalar = [&](int32_t o) { return o >= 0 && size_t(o) < nin && !advance[o]; };
    auto step = [&](size_t s) { return int32_t(nin + s); };
    Loop r;
    // Step s of a commutative mode reading `known` and another operand: that operand, or -1.
    auto other = [&](size_t s, int32_t known) {
        if (operand(s, 0) == known) return operand(s, 1);
        if (operand(s, 1) == known) return operand(s, 0);
        return int32_t(-1);
    };
    // Step 0: x + a or x * a with x the advancing input and a a scalar.
    auto first = [&](ElemMode m, int32_t& x, int32_t& a) {
        if (mode(0) != m) return false;
        for (size_t k = 0; k < 2; ++k) {
            int32_t o = operand(0, k), q = operand(0, 1 - k);
            if (o >= 0 && size_t(o) < nin && advance[o] && scalar(q)) {
                x = o;
                a = q;
                return true;
            }
        }
        return false;
    };
    auto clip_of = [&](size_t s, int32_t of, int32_t& lo, int32_t& hi) {
        lo = operand(s, 1);
        hi = operand(s, 2);
        return mode(s) == ElemMode::CLIP && operand(s, 0) == of && scalar(lo) && scalar(hi);
    };
    int32_t x = -1, a = -1, b = -1, lo = -1, hi = -1;
    size_t n = p.modes.size();
    if (n == 4 && first(ElemMode::ADD, x, a) && clip_of(1, step(0), lo, hi) &&
        mode(2) == ElemMode::MUL && other(2, step(1)) == x && mode(3) == ElemMode::TRUE_DIV &&
        operand(3, 0) == step(2) && scalar(operand(3, 1)))
        r = {Form::HARD_SWISH_DIV, x, {a, lo, hi, operand(3, 1)}};
    else if (n >= 2 && n <= 4 && first(ElemMode::MUL, x, a) && mode(1) == ElemMode::ADD &&
             scalar(b = other(1, step(0)))) {
        if (n == 2)
            r = {Form::AFFINE, x, {a, b, a, a}};
        else if (clip_of(2, step(1), lo, hi) && n == 3)
            r = {Form::HARD_SIGMOID, x, {a, b, lo, hi}};
        else if (clip_of(2, step(1), lo, hi) && mode(3) == ElemMode::MUL && other(3, step(2)) == x)
            r = {Form::HARD_SWISH_MUL, x, {a, b, lo, hi}};
    }
    return r;
}

ChainRunner::ChainRunner(const ElemwiseChainParam& p, std::vector<uint8_t> advance)
    : m_param(p), m_advance(std::move(advance)),
      m_loop(recognize(p, m_advance.size(), m_advance.data())) {
    if (m_loop.form != Form::NONE) return;
    for (int32_t m : p.modes) {
        m_kernels.push_back(find_elem_kernel(ElemMode(m), DTypeEnum::FLOAT32));
        BRAID_ASSERT(m_kernels.back(), "ElemwiseChain: no float32 kernel for mode {}", m);
    }
}

void ChainRunner::run(const float* const* base, float* y, size_t begin, size_t end) const {
    if (m_loop.form != Form::NONE) {
        const float* x = base[m_loop.x] + begin;
        float s[4];
        for (size_t i = 0; i < 4; ++i) s[i] = base[m_loop.scalars[i]][0];
        size_t n = end - begin;
        switch (m_loop.form) {
        case Form::HARD_SWISH_DIV:
            return hard_swish_div_loop(x, y + begin, n, s[0], s[1], s[2], s[3]);
        case Form::HARD_SWISH_MUL:
            return hard_swish_mul_loop(x, y + begin, n, s[0], s[1], s[2], s[3]);
        case Form::HARD_SIGMOID:
            return hard_sigmoid_loop(x, y + begin, n, s[0], s[1], s[2], s[3]);
        case Form::AFFINE:
            return affine_loop(x, y + begin, n, s[0], s[1]);
        case Form::NONE:
            break;
        }
    }
    const ElemwiseChainParam& p = m_param;
    size_t steps = p.modes.size(), nin = m_advance.size();
    const uint8_t* advance = m_advance.data();
    thread_local std::vector<float> scratch;
    if (scratch.size() < steps * CHAIN_BLOCK) scratch.resize(steps * CHAIN_BLOCK);
    for (size_t off = begin; off < end; off += CHAIN_BLOCK) {
        size_t len = std::min(CHAIN_BLOCK, end - off);
        for (size_t s = 0; s < steps; ++s) {
            std::array<const void*, 3> in{};
            std::array<uint8_t, 3> step{};
            for (size_t k = 0; k < 3; ++k) {
                int32_t o = p.operands[3 * s + k];
                if (o < 0) break;
                if (size_t(o) < nin) {
                    in[k] = base[o] + (advance[o] ? off : 0);
                    step[k] = advance[o];
                } else {
                    in[k] = scratch.data() + (size_t(o) - nin) * CHAIN_BLOCK;
                    step[k] = 1;
                }
            }
            void* out = s + 1 == steps ? static_cast<void*>(y + off)
                                       : static_cast<void*>(scratch.data() + s * CHAIN_BLOCK);
            m_kernels[s](in.data(), step.data(), out, len);
        }
    }
}

// ---- the fusion pass ----

namespace {

//! The Elemwise that may join a chain of output shape `shape`, else null: a chainable mode on
//! a CPU comp node, float32, its output of `shape`, each input of `shape` or one element.
Elemwise* chain_member(OperatorNode* opr) {
    auto* e = dynamic_cast<Elemwise*>(opr);
    if (!e || !chainable_mode(e->mode()) || e->comp_node().device().kind != Device::Kind::CPU ||
        bound_to_static_values(*e))
        return nullptr;
    VarNode* y = e->output(0);
    if (y->dtype() != dtype::Float32() || !y->shape_known()) return nullptr;
    for (auto* in : e->inputs()) {
        if (in->dtype() != dtype::Float32() || !in->shape_known()) return nullptr;
        const TensorShape& s = in->shape();
        bool scalar = s.total_nr_elems() == 1 && s.ndim() <= y->shape().ndim();
        if (s != y->shape() && !scalar) return nullptr;
    }
    return e;
}

void fuse_elemwise_chains(CompilePassCtx& ctx) {
    std::unordered_map<OperatorNode*, size_t> position, group_of;
    std::vector<std::vector<Elemwise*>> groups;
    for (auto* opr : ctx.order()) position[opr] = position.size();
    for (auto* opr : ctx.order()) {
        Elemwise* e = chain_member(opr);
        if (!e) continue;
        // The groups whose last operator's result only `e` reads join `e`'s.
        std::vector<size_t> joined;
        for (auto* in : e->inputs()) {
            auto* producer = in->owner();
            auto it = group_of.find(producer);
            if (it == group_of.end() || producer->output(0) != in ||
                in->shape() != e->output(0)->shape() || !ctx.removable(in) ||
                ctx.single_reader(in) != e || producer->comp_node() != e->comp_node())
                continue;
            if (std::find(joined.begin(), joined.end(), it->second) == joined.end())
                joined.push_back(it->second);
        }
        size_t g = joined.empty() ? groups.size() : joined[0];
        if (joined.empty()) groups.emplace_back();
        for (size_t k = 1; k < joined.size(); ++k) {
            for (auto* m : groups[joined[k]]) {
                groups[g].push_back(m);
                group_of[m] = g;
            }
            groups[joined[k]].clear();
        }
        groups[g].push_back(e);
        group_of[e] = g;
    }
    for (auto& members : groups) {
        if (members.size() < 2) continue;
        std::sort(members.begin(), members.end(),
                  [&](Elemwise* a, Elemwise* b) { return position[a] < position[b]; });
        std::unordered_map<VarNode*, int32_t> step_of;
        for (size_t s = 0; s < members.size(); ++s) step_of[members[s]->output(0)] = int32_t(s);
        // Inputs: the vars the members read that no member computes, in order of first use.
        SymbolVarArray inputs;
        std::unordered_map<VarNode*, int32_t> input_of;
        for (auto* m : members)
            for (auto* in : m->inputs())
                if (!step_of.count(in) && !input_of.count(in)) {
                    input_of[in] = int32_t(inputs.size());
                    inputs.emplace_back(in);
                }
        ElemwiseChainParam p;
        int32_t nin = int32_t(inputs.size());
        for (auto* m : members) {
            p.modes.push_back(int32_t(m->mode()));
            for (size_t k = 0; k < 3; ++k) {
                if (k >= m->inputs().size()) {
                    p.operands.push_back(-1);
                    continue;
                }
                VarNode* in = m->input(k);
                auto s = step_of.find(in);
                p.operands.push_back(s != step_of.end() ? nin + s->second : input_of[in]);
            }
        }
        CompNode cn = members.back()->comp_node();
        SymbolVar chain =
            ElemwiseChain::make(inputs, std::move(p), OperatorConfig(members.back()->name(), cn));
        ctx.replace(std::vector<OperatorNode*>(members.begin(), members.end()),
                    chain.node()->owner());
    }
}

SymbolVarArray load_elemwise_chain(const OprLoadContext& ctx) {
    return {
        ElemwiseChain::make(ctx.inputs, read_param<ElemwiseChain::Param>(ctx.params), ctx.config)};
}

} // namespace

void register_elemwise_chain_operators() {
    OperatorRegistry::instance().add("ElemwiseChain", "elemwise_chain", dump_param<ElemwiseChain>,
                                     load_elemwise_chain);
    // Last: the convolution and matmul epilogues take their bias and activation first.
    register_compile_pass("fuse_elemwise_chains", fuse_elemwise_chains);
}

} // namespace braid::opr
