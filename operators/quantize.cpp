#include "operators/quantize.h"

#include "base/thread_pool.h"
#include "graph/operator_registry.h"
#include "graph/param_fields.h"
#include "operators/elemwise.h"
#include "operators/kernel_utils.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace braid::opr {

DynamicQuantizeLinear::DynamicQuantizeLinear(VarNode* x, const OperatorConfig& config)
    : OperatorNode(config) {
    add_input(x);
    for (int i = 0; i < 3; ++i) add_output();
}

SymbolVarArray DynamicQuantizeLinear::make(SymbolVar x, const OperatorConfig& config) {
    auto* opr = x.graph().insert_opr(std::make_unique<DynamicQuantizeLinear>(x.node(), config));
    return {opr->output(0), opr->output(1), opr->output(2)};
}

void DynamicQuantizeLinear::init_output_dtypes() {
    DType dt = input(0)->dtype();
    if (dt != dtype::Float32())
        BRAID_THROW(DTypeError, "{}: input \"{}\" has dtype {}; expected float32", describe(),
                    input(0)->name(), dt.name());
    output(0)->set_dtype(dtype::Uint8());
    output(1)->set_dtype(dtype::Float32());
    output(2)->set_dtype(dtype::Uint8());
}

bool DynamicQuantizeLinear::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    out[0] = *ctx.shape(0);
    out[1] = out[2] = TensorShape{};
    return true;
}

namespace {

//! The range of x[0, n): {min, max}, NaN when x holds one.
struct Range {
    float lo = std::numeric_limits<float>::infinity();
    float hi = -std::numeric_limits<float>::infinity();
};

//! lo = min(lo, v) and hi = max(hi, v), a NaN sticking (written so that GCC vectorizes them:
//! compare and blend).
BRAID_INLINE void lower(float& lo, float v) {
    lo = v < lo || v != v ? v : lo;
}
BRAID_INLINE void raise(float& hi, float v) {
    hi = v > hi || v != v ? v : hi;
}

BRAID_SIMD_CLONES Range range_of(const float* x, size_t n) {
    constexpr size_t LANES = 16; // one range per lane, folded at the end
    float lo[LANES], hi[LANES];
    std::fill(lo, lo + LANES, std::numeric_limits<float>::infinity());
    std::fill(hi, hi + LANES, -std::numeric_limits<float>::infinity());
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (size_t j = 0; j < LANES; ++j) lower(lo[j], x[i + j]), raise(hi[j], x[i + j]);
    for (; i < n; ++i) lower(lo[0], x[i]), raise(hi[0], x[i]);
    Range r;
    for (size_t j = 0; j < LANES; ++j) lower(r.lo, lo[j]), raise(r.hi, hi[j]);
    return r;
}

//! saturate(round(x / scale) + zero point) to [0, 255], in float32 steps (no contraction).
BRAID_SIMD_CLONES BRAID_NO_FP_CONTRACT void quantize_loop(const float* x, uint8_t* y, size_t n,
                                                          float scale, float zero_point) {
    for (size_t i = 0; i < n; ++i) {
        float q = std::nearbyint(x[i] / scale) + zero_point;
        q = q > 0.f ? q : 0.f; // NaN becomes 0
        q = q < 255.f ? q : 255.f;
        y[i] = uint8_t(q);
    }
}

//! Elements per task of each pass.
constexpr size_t QUANTIZE_BLOCK = 65536;

} // namespace

void DynamicQuantizeLinear::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    size_t n = x.shape().total_nr_elems();
    const float* xp = x.ptr<float>();
    size_t blocks = (n + QUANTIZE_BLOCK - 1) / QUANTIZE_BLOCK;
    std::vector<Range> ranges(std::max<size_t>(blocks, 1));
    parallel_range(blocks, QUANTIZE_BLOCK, [&](size_t begin, size_t end) {
        for (size_t b = begin; b < end; ++b)
            ranges[b] = range_of(xp + b * QUANTIZE_BLOCK,
                                 std::min(n, (b + 1) * QUANTIZE_BLOCK) - b * QUANTIZE_BLOCK);
    });
    float lo = 0.f, hi = 0.f; // the range includes 0
    for (const Range& r : ranges) lower(lo, r.lo), raise(hi, r.hi);
    float scale = (hi == lo ? 1.f : hi - lo) / 255.f;
    float zero_point = std::nearbyint(-lo / scale);
    zero_point = zero_point > 0.f ? std::min(zero_point, 255.f) : 0.f; // NaN becomes 0
    uint8_t* yp = ctx.output(0).ptr<uint8_t>();
    parallel_range(blocks, QUANTIZE_BLOCK, [&](size_t begin, size_t end) {
        size_t first = begin * QUANTIZE_BLOCK, last = std::min(n, end * QUANTIZE_BLOCK);
        quantize_loop(xp + first, yp + first, last - first, scale, zero_point);
    });
    ctx.output(1).ptr<float>()[0] = scale;
    ctx.output(2).ptr<uint8_t>()[0] = uint8_t(zero_point);
}

namespace {

// x's values quantized, and x scaled to all non-positive values (a zero point of 255).
SymbolVarArray dynamic_quantize_example(SymbolVar x) {
    SymbolVarArray out = DynamicQuantizeLinear::make(x);
    for (SymbolVar v : DynamicQuantizeLinear::make(-abs(x))) out.push_back(v);
    return out;
}

} // namespace

void register_quantize_operators() {
    OperatorRegistry::instance().add("DynamicQuantizeLinear", "quantize", no_params,
                                     load_param<DynamicQuantizeLinear>, dynamic_quantize_example);
    register_non_differentiable("DynamicQuantizeLinear", "quantization has no gradient");
}

} // namespace braid::opr
