#include "operators/attention.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "operators/dense_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace braid::opr {

Attention::Attention(VarNode* q, VarNode* k, VarNode* v, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(q);
    add_input(k);
    add_input(v);
    add_output("out");
    add_output("lse");
}

SymbolVarArray Attention::make(SymbolVar q, SymbolVar k, SymbolVar v, Param param,
                               const OperatorConfig& config) {
    auto* opr = q.graph().insert_opr(
        std::make_unique<Attention>(q.node(), k.node(), v.node(), param, config));
    return {opr->output(0), opr->output(1)};
}

SymbolVarArray scaled_dot_product_attention(SymbolVar q, SymbolVar k, SymbolVar v, bool causal,
                                            std::optional<float> scale) {
    return Attention::make(q, k, v, {causal, scale});
}

void Attention::init_output_dtypes() {
    // The param is checked here, the first step after the operator got its name.
    if (m_param.scale && !std::isfinite(*m_param.scale))
        BRAID_THROW(ValueError, "{}: scale must be finite, got {}", describe(), *m_param.scale);
    DType q = input(0)->dtype(), k = input(1)->dtype(), v = input(2)->dtype();
    if (q != k || q != v || !kern::is_dense_float(q))
        BRAID_THROW(DTypeError,
                    "{}: q, k and v must share a float dtype (float32, float16 or bfloat16), got "
                    "{}, {} and {}",
                    describe(), q.name(), k.name(), v.name());
    output(0)->set_dtype(q);
    output(1)->set_dtype(dtype::Float32());
}

bool Attention::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1) || !ctx.shape(2)) return false;
    const auto &q = *ctx.shape(0), &k = *ctx.shape(1), &v = *ctx.shape(2);
    if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4)
        BRAID_THROW(ShapeError, "{}: q, k and v must be 4-D [B, H, S, D], got {}, {} and {}",
                    describe(), q.to_string(), k.to_string(), v.to_string());
    if (k[0] != q[0] || k[1] != q[1] || v[0] != q[0] || v[1] != q[1])
        BRAID_THROW(ShapeError, "{}: batch and head dims differ: q {}, k {}, v {}", describe(),
                    q.to_string(), k.to_string(), v.to_string());
    if (k[3] != q[3])
        BRAID_THROW(ShapeError, "{}: head dims differ: q {} has D = {}, k {} has D = {}",
                    describe(), q.to_string(), q[3], k.to_string(), k[3]);
    if (v[2] != k[2])
        BRAID_THROW(ShapeError, "{}: key counts differ: k {} has {} keys, v {} has {}", describe(),
                    k.to_string(), k[2], v.to_string(), v[2]);
    constexpr size_t int_max = size_t(std::numeric_limits<int>::max());
    if (q[2] > int_max || k[2] > int_max || q[3] > int_max || v[3] > int_max)
        BRAID_THROW(ShapeError, "{}: sizes of q {}, k {}, v {} exceed the BLAS limit {}",
                    describe(), q.to_string(), k.to_string(), v.to_string(), int_max);
    out[0] = TensorShape{q[0], q[1], q[2], v[3]};
    out[1] = TensorShape{q[0], q[1], q[2]};
    return true;
}

namespace {

//! Most rows of queries per task, and keys per step of the online softmax. A task's score
//! block (at most QUERY_BLOCK x KEY_BLOCK floats, 256 KiB) stays in L2 between the two GEMMs.
//! 128 x 512 measured best for D = 64 among 32..256 x 256..2048 (OpenBLAS runs these GEMMs
//! at about 80% of its large-GEMM rate).
constexpr size_t QUERY_BLOCK = 128;
constexpr size_t KEY_BLOCK = 512;
//! Fewest rows per task when query blocks are narrowed to give every thread work.
constexpr size_t MIN_QUERY_BLOCK = 32;

struct AttentionGeometry {
    size_t sq, sk, d, dv;
    float scale;
    bool causal;
};

/*!
 * One block of query rows [q0, q0 + rows) of one (batch, head): writes out rows (Dv each) and
 * lse. Keys are visited KEY_BLOCK at a time; per row the running max m and running sum l of
 * exp(s − m) are kept, and the output accumulator is rescaled whenever m grows.
 */
void attention_block(const AttentionGeometry& g, const float* q, const float* k, const float* v,
                     size_t q0, size_t rows, float* out, float* lse, float* scores, float* row_max,
                     float* row_sum) {
    const float ninf = -std::numeric_limits<float>::infinity();
    // Query i sees keys j < i + 1 + (Sk − Sq); `visible_end` is that bound for row r, clamped.
    ptrdiff_t shift = ptrdiff_t(g.sk) - ptrdiff_t(g.sq);
    auto visible_end = [&](size_t r) -> size_t {
        if (!g.causal) return g.sk;
        ptrdiff_t e = ptrdiff_t(q0 + r) + 1 + shift;
        return size_t(std::clamp<ptrdiff_t>(e, 0, ptrdiff_t(g.sk)));
    };
    size_t key_end = visible_end(rows - 1); // the last row sees the most keys
    std::fill(out, out + rows * g.dv, 0.f);
    std::fill(row_max, row_max + rows, ninf);
    std::fill(row_sum, row_sum + rows, 0.f);
    for (size_t k0 = 0; k0 < key_end; k0 += KEY_BLOCK) {
        size_t kn = std::min(KEY_BLOCK, key_end - k0);
        kern::sgemm(false, true, rows, kn, g.d, g.scale, q, g.d, k + k0 * g.d, g.d, 0.f, scores,
                    kn);
        for (size_t r = 0; r < rows; ++r) {
            float* s = scores + r * kn;
            size_t vis = std::min(kn, visible_end(r) - std::min(visible_end(r), k0));
            if (vis < kn) std::fill(s + vis, s + kn, 0.f); // masked keys weigh nothing
            if (vis == 0) continue;
            float m_old = row_max[r];
            float m_new = std::max(m_old, kern::row_max(s, vis));
            float sum = kern::row_exp_sum(s, vis, m_new);
            if (m_old != ninf && m_new != m_old) {
                float alpha = std::exp(m_old - m_new);
                row_sum[r] *= alpha;
                kern::row_scale(out + r * g.dv, g.dv, alpha);
            }
            row_sum[r] += sum;
            row_max[r] = m_new;
        }
        kern::sgemm(false, false, rows, g.dv, kn, 1.f, scores, kn, v + k0 * g.dv, g.dv, 1.f, out,
                    g.dv);
    }
    for (size_t r = 0; r < rows; ++r) {
        if (row_sum[r] > 0.f) {
            kern::row_scale(out + r * g.dv, g.dv, 1.f / row_sum[r]);
            lse[r] = row_max[r] + std::log(row_sum[r]);
        } else {
            // No visible key: out stays 0 and the log of an empty sum is -inf.
            lse[r] = ninf;
        }
    }
}

} // namespace

void Attention::execute(ExecCtx& ctx) {
    Tensor q = kern::as_float32(ctx.input(0)), k = kern::as_float32(ctx.input(1)),
           v = kern::as_float32(ctx.input(2));
    Tensor& out = ctx.output(0);
    Tensor& lse = ctx.output(1);
    const auto &qs = q.shape(), &ks = k.shape(), &vs = v.shape();
    AttentionGeometry g{qs[2], ks[2], qs[3], vs[3], 0.f, m_param.causal};
    g.scale = m_param.scale ? *m_param.scale : 1.f / std::sqrt(float(g.d));
    size_t heads = qs[0] * qs[1];
    if (heads == 0 || g.sq == 0) return;
    Tensor outf = kern::float32_target(out);
    const float* qp = q.ptr<float>();
    const float* kp = k.ptr<float>();
    const float* vp = v.ptr<float>();
    float* op = outf.ptr<float>();
    float* lp = lse.ptr<float>();
    // Narrow the query blocks while there are fewer than two tasks per thread.
    size_t qblock = QUERY_BLOCK;
    while (qblock > MIN_QUERY_BLOCK &&
           heads * ((g.sq + qblock - 1) / qblock) < 2 * kernel_threads())
        qblock /= 2;
    size_t qblocks = (g.sq + qblock - 1) / qblock;
    kern::blas_single_thread();
    parallel_for(heads * qblocks, 1, [&](size_t begin, size_t end) {
        // Scratch kept per thread across runs: no page faults from fresh allocations.
        thread_local std::vector<float> scratch;
        size_t need = QUERY_BLOCK * KEY_BLOCK + 2 * QUERY_BLOCK;
        if (scratch.size() < need) scratch.resize(need);
        float* scores = scratch.data();
        float* row_max = scores + QUERY_BLOCK * KEY_BLOCK;
        float* row_sum = row_max + QUERY_BLOCK;
        for (size_t t = begin; t < end; ++t) {
            size_t bh = t / qblocks, q0 = (t % qblocks) * qblock;
            size_t rows = std::min(qblock, g.sq - q0);
            attention_block(g, qp + (bh * g.sq + q0) * g.d, kp + bh * g.sk * g.d,
                            vp + bh * g.sk * g.dv, q0, rows, op + (bh * g.sq + q0) * g.dv,
                            lp + bh * g.sq + q0, scores, row_max, row_sum);
        }
    });
    kern::store_float32(outf, out);
}

} // namespace braid::opr

// ---- serialization: params dump and load, registered in register_all_operators()
#include "graph/param_io.h"

namespace braid::opr {

static SymbolVarArray load_attention(const OprLoadContext& ctx) {
    ctx.expect_inputs(3, 3);
    // make() refuses a non-finite scale.
    auto p = read_param<Attention::Param>(ctx.params);
    return Attention::make(ctx.input(0), ctx.input(1), ctx.input(2), p, ctx.config);
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h), with
// their params functions above, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_attention_kernels();
}
#endif

void register_attention_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("Attention", "attention", dump_param<Attention>, load_attention);
    register_attention_grad();
#if BRAID_WITH_CUDA
    cuda::register_attention_kernels(); // operators/cuda/attention.cpp
#endif
}

} // namespace braid::opr
