#include "operators/tensor_manip.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/cpu_isa.h"
#include "base/error.h"
#include "base/hash.h"
#include "operators/kernel_utils.h"

#include <algorithm>
#include <optional>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace braid::opr {

std::vector<long> shape_value_to_dims(const Tensor& value, const std::string& who) {
    if (value.shape().ndim() != 1 || !value.dtype().is_integer())
        BRAID_THROW(ShapeError, "{}: a shape var must be a 1-D integer tensor, got {} {}", who,
                    value.dtype().name(), value.shape().to_string());
    std::vector<long> dims;
    for (size_t i = 0; i < value.shape()[0]; ++i) dims.push_back(long(value.at(i)));
    return dims;
}

namespace {

TensorShape resolve_reshape(const TensorShape& in, const std::vector<long>& target,
                            const std::string& who) {
    int unknown_at = -1;
    for (size_t i = 0; i < target.size(); ++i) {
        if (target[i] == -1) {
            if (unknown_at >= 0)
                BRAID_THROW(ShapeError, "{}: target {} has more than one -1", who,
                            dims_to_string(target));
            unknown_at = int(i);
        } else if (target[i] < 0) {
            BRAID_THROW(ShapeError, "{}: target {} has a negative dim", who,
                        dims_to_string(target));
        }
    }
    TensorShape res;
    res.set_ndim(target.size());
    for (size_t i = 0; i < target.size(); ++i) res[i] = target[i] < 0 ? 1 : size_t(target[i]);
    auto known_elems = res.packed_bytes(dtype::Uint8()); // the known dims' product
    if (!known_elems)
        BRAID_THROW(ShapeError, "{}: target {} has more than 2^56 elements", who,
                    dims_to_string(target));
    size_t known = *known_elems;
    size_t total = in.total_nr_elems();
    if (unknown_at >= 0) {
        if (known == 0 || total % known != 0)
            BRAID_THROW(ShapeError, "{}: cannot reshape {} ({} elements) to {}", who,
                        in.to_string(), total, dims_to_string(target));
        res[size_t(unknown_at)] = total / known;
    } else if (known != total) {
        BRAID_THROW(ShapeError, "{}: cannot reshape {} ({} elements) to {} ({} elements)", who,
                    in.to_string(), total, dims_to_string(target), known);
    }
    return res;
}

} // namespace

// ---------------------------------------------------------------- Reshape
Reshape::Reshape(VarNode* x, VarNode* shape_var, std::vector<long> target,
                 const OperatorConfig& config)
    : ParamOperator({shape_var ? std::nullopt : std::optional(std::move(target))}, config) {
    add_input(x);
    if (shape_var) add_input(shape_var);
    add_output();
}

SymbolVar Reshape::make(SymbolVar x, const std::vector<long>& target,
                        const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<Reshape>(x.node(), nullptr, target, config))
        ->output(0);
}

SymbolVar Reshape::make(SymbolVar x, SymbolVar shape_var, const OperatorConfig& config) {
    return x.graph()
        .insert_opr(
            std::make_unique<Reshape>(x.node(), shape_var.node(), std::vector<long>{}, config))
        ->output(0);
}

const std::vector<long>& Reshape::target() const {
    static const std::vector<long> none;
    return m_param.target ? *m_param.target : none;
}

void Reshape::init_output_dtypes() {
    if (inputs().size() > 1 && !input(1)->dtype().is_integer())
        BRAID_THROW(DTypeError, "{}: the shape var \"{}\" must be an integer tensor, got {}",
                    describe(), input(1)->name(), input(1)->dtype().name());
    output(0)->set_dtype(input(0)->dtype());
}

bool Reshape::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    if (ctx.nr_inputs() > 1) {
        if (!ctx.value(1)) return false;
        out[0] = resolve_reshape(*ctx.shape(0), shape_value_to_dims(*ctx.value(1), describe()),
                                 describe());
    } else {
        out[0] = resolve_reshape(*ctx.shape(0), target(), describe());
    }
    return true;
}

void Reshape::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    TensorShape shape =
        ctx.nr_inputs() > 1
            ? resolve_reshape(x.shape(), shape_value_to_dims(ctx.input(1), describe()), describe())
            : resolve_reshape(x.shape(), target(), describe());
    ctx.output(0) = x.contiguous().reshape(shape);
}

// ---------------------------------------------------------------- GetVarShape
GetVarShape::GetVarShape(VarNode* x, const OperatorConfig& config) : OperatorNode(config) {
    add_input(x);
    add_output();
}

SymbolVar GetVarShape::make(SymbolVar x, const OperatorConfig& config) {
    return x.graph().insert_opr(std::make_unique<GetVarShape>(x.node(), config))->output(0);
}

void GetVarShape::init_output_dtypes() {
    output(0)->set_dtype(dtype::Int32());
}

bool GetVarShape::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    out[0] = TensorShape{ctx.shape(0)->ndim()};
    return true;
}

void GetVarShape::infer_value(const InferCtx& ctx, Tensor* out) const {
    if (!ctx.shape(0)) return;
    const auto& s = *ctx.shape(0);
    out[0] = Tensor(TensorShape{s.ndim()}, dtype::Int32());
    for (size_t i = 0; i < s.ndim(); ++i) out[0].ptr<int32_t>()[i] = int32_t(s[i]);
}

void GetVarShape::execute(ExecCtx& ctx) {
    const auto& s = ctx.input(0).shape();
    auto* p = ctx.output(0).ptr<int32_t>();
    for (size_t i = 0; i < s.ndim(); ++i) p[i] = int32_t(s[i]);
}

// ---------------------------------------------------------------- Broadcast
Broadcast::Broadcast(VarNode* x, VarNode* shape_var, const TensorShape& target,
                     const OperatorConfig& config)
    : ParamOperator({shape_var ? std::nullopt : std::optional(target)}, config) {
    add_input(x);
    if (shape_var) add_input(shape_var);
    add_output();
}

SymbolVar Broadcast::make(SymbolVar x, const TensorShape& target, const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<Broadcast>(x.node(), nullptr, target, config))
        ->output(0);
}

SymbolVar Broadcast::make(SymbolVar x, SymbolVar shape_var, const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<Broadcast>(x.node(), shape_var.node(), TensorShape{}, config))
        ->output(0);
}

void Broadcast::init_output_dtypes() {
    output(0)->set_dtype(input(0)->dtype());
}

bool Broadcast::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    TensorShape target = this->target();
    if (!m_param.target) {
        if (!ctx.value(1)) return false;
        auto dims = shape_value_to_dims(*ctx.value(1), describe());
        std::vector<size_t> d;
        for (long v : dims) {
            if (v < 0) BRAID_THROW(ShapeError, "{}: negative target dim {}", describe(), v);
            d.push_back(size_t(v));
        }
        target = TensorShape(d);
    }
    const TensorShape* shapes[] = {ctx.shape(0), &target};
    TensorShape res;
    if (!broadcast_shapes(shapes, 2, res) || res != target)
        BRAID_THROW(ShapeError, "{}: cannot broadcast {} to {}", describe(),
                    ctx.shape(0)->to_string(), target.to_string());
    out[0] = target;
    return true;
}

void Broadcast::execute(ExecCtx& ctx) {
    Tensor& out = ctx.output(0);
    out.copy_from(ctx.input(0).view(ctx.input(0).layout().broadcast(out.shape())));
}

// ---------------------------------------------------------------- TypeCvt
TypeCvt::TypeCvt(VarNode* x, DType dtype, const OperatorConfig& config)
    : ParamOperator({dtype}, config) {
    add_input(x);
    add_output();
}

SymbolVar TypeCvt::make(SymbolVar x, DType dtype, const OperatorConfig& config) {
    return x.graph().insert_opr(std::make_unique<TypeCvt>(x.node(), dtype, config))->output(0);
}

void TypeCvt::init_output_dtypes() {
    if (!m_param.dtype.valid()) BRAID_THROW(DTypeError, "{}: target dtype is invalid", describe());
    output(0)->set_dtype(m_param.dtype);
}

bool TypeCvt::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    out[0] = *ctx.shape(0);
    return true;
}

void TypeCvt::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    size_t xs = x.dtype().size(), ys = m_param.dtype.size();
    parallel_range(x.shape().total_nr_elems(), 2, [&](size_t b, size_t e) {
        convert_elements(x.dtype(), x.raw_ptr() + b * xs, m_param.dtype, y.raw_ptr() + b * ys,
                         e - b);
    });
}

// ---------------------------------------------------------------- Dimshuffle
namespace {
bool keeps_axis_order(const std::vector<int>& pattern) {
    int last = -1;
    for (int p : pattern) {
        if (p < 0) continue;
        if (p < last) return false;
        last = p;
    }
    return true;
}
} // namespace

namespace {

// ---- 4-byte transposes: 8x8 AVX2 register transposes in cache-friendly tiles ----
#if defined(__x86_64__) && defined(__GNUC__)
#define BRAID_TRANSPOSE_X86 1
#endif

//! A batch of 2-D transposes of 4-byte elements: dst[t][a][b] = src[t*sbatch + b*lds + a], with
//! dst contiguous (rows of nb).
struct Transpose2d {
    size_t batch = 1, na = 0, nb = 0;
    ptrdiff_t sbatch = 0, lds = 0;
};

//! The copy of `src` into the contiguous `dst` as a batch of 2-D transposes of 4-byte elements,
//! or nothing when it is not one (after merging the dims that stay adjacent on both sides).
std::optional<Transpose2d> as_transpose2d(const Tensor& dst, const Tensor& src) {
    if (dst.dtype().size() != 4 || !dst.layout().is_contiguous()) return std::nullopt;
    const TensorLayout &dl = dst.layout(), &sl = src.layout();
    size_t shape[TensorShape::MAX_NDIM];
    ptrdiff_t ds[TensorShape::MAX_NDIM], ss[TensorShape::MAX_NDIM];
    size_t nd = collapse_copy_dims(dl, sl, shape, ds, ss);
    if (nd < 2 || nd > 3 || ss[nd - 2] != 1 || ss[nd - 1] <= 0) return std::nullopt;
    Transpose2d t;
    t.na = shape[nd - 2];
    t.nb = shape[nd - 1];
    t.lds = ss[nd - 1];
    if (nd == 3) {
        t.batch = shape[0];
        t.sbatch = ss[0];
    }
    return t;
}

//! dst[a][b] = src[b * lds + a] for a in [a0, a1), b in [b0, b1), one element at a time.
void transpose_scalar(const uint32_t* src, ptrdiff_t lds, uint32_t* dst, size_t ldd, size_t a0,
                      size_t a1, size_t b0, size_t b1) {
    for (size_t a = a0; a < a1; ++a)
        for (size_t b = b0; b < b1; ++b) dst[a * ldd + b] = src[ptrdiff_t(b) * lds + ptrdiff_t(a)];
}

#ifdef BRAID_TRANSPOSE_X86
//! Transposes the 8x8 block at src (rows lds apart) into dst (rows ldd apart). STREAM: store
//! with non-temporal stores (dst rows 32-byte aligned).
template <bool STREAM>
__attribute__((target("avx2"))) inline void transpose8x8(const float* s, ptrdiff_t lds, float* d,
                                                         size_t ldd) {
    __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds),
           r2 = _mm256_loadu_ps(s + 2 * lds), r3 = _mm256_loadu_ps(s + 3 * lds),
           r4 = _mm256_loadu_ps(s + 4 * lds), r5 = _mm256_loadu_ps(s + 5 * lds),
           r6 = _mm256_loadu_ps(s + 6 * lds), r7 = _mm256_loadu_ps(s + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
           t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
           t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    __m256 rows[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                      _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                      _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                      _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
    for (size_t i = 0; i < 8; ++i) {
        if constexpr (STREAM)
            _mm256_stream_ps(d + i * ldd, rows[i]);
        else
            _mm256_storeu_ps(d + i * ldd, rows[i]);
    }
}

//! Output rows [a0, a1) of one transpose. Streaming (an output much larger than the caches,
//! rows 32-byte aligned): 16 source rows are read sequentially across up to 1024 columns while
//! each output row gets one whole cache line through non-temporal stores, so neither side
//! walks a power-of-two stride through one cache set. Otherwise 64x64 tiles that stay in L1.
__attribute__((target("avx2"))) void transpose_rows_avx2(const float* src, ptrdiff_t lds,
                                                         float* dst, size_t nb, size_t a0,
                                                         size_t a1, bool stream) {
    size_t a8 = a0 + (a1 - a0) / 8 * 8;
    const size_t TA = stream ? 1024 : 64, TB = stream ? 16 : 64;
    size_t b_full = stream ? nb / 16 * 16 : nb / 8 * 8;
    for (size_t ta = a0; ta < a8; ta += TA) {
        size_t ta1 = std::min(a8, ta + TA);
        for (size_t tb = 0; tb < b_full; tb += TB) {
            size_t tb1 = std::min(b_full, tb + TB);
            if (stream) {
                for (size_t a = ta; a < ta1; a += 8) {
                    const float* s = src + ptrdiff_t(tb) * lds + ptrdiff_t(a);
                    transpose8x8<true>(s, lds, dst + a * nb + tb, nb);
                    transpose8x8<true>(s + 8 * lds, lds, dst + a * nb + tb + 8, nb);
                }
            } else {
                for (size_t b = tb; b < tb1; b += 8)
                    for (size_t a = ta; a < ta1; a += 8)
                        transpose8x8<false>(src + ptrdiff_t(b) * lds + ptrdiff_t(a), lds,
                                            dst + a * nb + b, nb);
            }
        }
    }
    if (stream) _mm_sfence(); // order the non-temporal stores before the task ends
    auto* s32 = reinterpret_cast<const uint32_t*>(src);
    auto* d32 = reinterpret_cast<uint32_t*>(dst);
    transpose_scalar(s32, lds, d32, nb, a0, a8, b_full, nb);
    transpose_scalar(s32, lds, d32, nb, a8, a1, 0, nb);
}
#endif

//! Runs `t` on the kernel pool: true when done, false when this CPU has no kernel for it.
bool run_transpose2d(const Transpose2d& t, const void* src, void* dst) {
#ifdef BRAID_TRANSPOSE_X86
    static const bool avx2 = cpu_isa_at_least(CpuIsa::AVX2);
    if (!avx2 || t.na < 8 || t.nb < 8) return false;
    // Non-temporal stores pay off only when the output would not stay in cache anyway.
    constexpr size_t STREAM_MIN_BYTES = size_t(16) << 20;
    size_t total = t.batch * t.na * t.nb;
    bool stream = total * 4 >= STREAM_MIN_BYTES && t.nb % 8 == 0 &&
                  reinterpret_cast<uintptr_t>(dst) % 32 == 0;
    // Work items: batch x groups of 8 output rows.
    size_t groups = (t.na + 7) / 8;
    auto* s = static_cast<const float*>(src);
    auto* d = static_cast<float*>(dst);
    parallel_range(t.batch * groups, 8 * t.nb, [&](size_t b, size_t e) {
        while (b < e) {
            size_t i = b / groups, g = b % groups, g1 = std::min(groups, g + (e - b));
            transpose_rows_avx2(s + ptrdiff_t(i) * t.sbatch, t.lds, d + i * t.na * t.nb, t.nb,
                                g * 8, std::min(t.na, g1 * 8), stream);
            b += g1 - g;
        }
    });
    return true;
#else
    (void)t, (void)src, (void)dst;
    return false;
#endif
}

} // namespace

Dimshuffle::Dimshuffle(VarNode* x, std::vector<int> pattern, const OperatorConfig& config)
    : ParamOperator({std::move(pattern)}, config), m_is_view(keeps_axis_order(m_param.pattern)) {
    add_input(x);
    add_output();
}

SymbolVar Dimshuffle::make(SymbolVar x, std::vector<int> pattern, const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<Dimshuffle>(x.node(), std::move(pattern), config))
        ->output(0);
}

TensorLayout Dimshuffle::view_layout(const TensorLayout& x) const {
    size_t nd = x.ndim();
    std::vector<int> seen(nd, 0);
    auto bad = [&](const std::string& why) {
        BRAID_THROW(ShapeError, "{}: pattern {} does not fit a rank-{} input {}: {}", describe(),
                    param_string(), nd, x.TensorShape::to_string(), why);
    };
    TensorLayout res;
    res.dtype = x.dtype;
    res.set_ndim(m_param.pattern.size());
    for (size_t i = 0; i < m_param.pattern.size(); ++i) {
        int p = m_param.pattern[i];
        if (p == -1) {
            res[i] = 1;
            res.stride[i] = 0;
            continue;
        }
        if (p < -1 || p >= int(nd))
            bad(fmt::format("entry {} is neither an axis (0..{}) nor -1 (a new axis)", p,
                            long(nd) - 1));
        if (seen[size_t(p)]++) bad(fmt::format("axis {} appears twice", p));
        res[i] = x[size_t(p)];
        res.stride[i] = x.stride[size_t(p)];
    }
    for (size_t a = 0; a < nd; ++a)
        if (!seen[a]) bad(fmt::format("axis {} is missing (every input axis appears once)", a));
    return res;
}

bool Dimshuffle::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    out[0] = view_layout(TensorLayout(*ctx.shape(0), input(0)->dtype()));
    return true;
}

void Dimshuffle::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    Tensor view = x.view(view_layout(x.layout()));
    if (m_is_view) {
        ctx.output(0) = view;
    } else if (auto t = as_transpose2d(ctx.output(0), view);
               !t || !run_transpose2d(*t, view.raw_ptr(), ctx.output(0).raw_ptr())) {
        parallel_copy(ctx.output(0), view);
    }
}

SymbolVar dimshuffle(SymbolVar x, std::vector<int> pattern) {
    return Dimshuffle::make(x, std::move(pattern));
}

SymbolVar transpose(SymbolVar x, std::vector<int> perm) {
    size_t nd = x.shape().ndim();
    std::vector<int> pattern;
    if (perm.empty())
        for (size_t i = nd; i-- > 0;) pattern.push_back(int(i));
    for (int p : perm) {
        if (p < -long(nd) || p >= long(nd))
            BRAID_THROW(ShapeError,
                        "transpose of \"{}\": axis {} out of range for a rank-{} input "
                        "(valid: {}..{})",
                        x.name(), p, nd, -long(nd), long(nd) - 1);
        pattern.push_back(p < 0 ? p + int(nd) : p);
    }
    return Dimshuffle::make(x, std::move(pattern));
}

// ---------------------------------------------------------------- AxisAddRemove
AxisAddRemove::AxisAddRemove(VarNode* x, Kind kind, std::vector<int> axes,
                             const OperatorConfig& config)
    : ParamOperator({kind, std::move(axes)}, config) {
    add_input(x);
    add_output();
}

SymbolVar AxisAddRemove::make(SymbolVar x, Kind kind, std::vector<int> axes,
                              const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<AxisAddRemove>(x.node(), kind, std::move(axes), config))
        ->output(0);
}

const char* axis_add_remove_kind_name(AxisAddRemoveKind kind) {
    switch (kind) {
    case AxisAddRemoveKind::ADD:
        return "ADD";
    case AxisAddRemoveKind::REMOVE:
        return "REMOVE";
    }
    return "?";
}

TensorLayout AxisAddRemove::view_layout(const TensorLayout& x) const {
    size_t nd = x.ndim();
    TensorLayout res;
    res.dtype = x.dtype;
    if (m_param.kind == Kind::ADD) {
        size_t out_nd = nd + m_param.axes.size();
        if (out_nd > TensorShape::MAX_NDIM)
            BRAID_THROW(ShapeError, "{}: a rank-{} input with {} new axes exceeds rank {}",
                        describe(), nd, m_param.axes.size(), TensorShape::MAX_NDIM);
        std::vector<bool> is_new(out_nd, false);
        for (int a : m_param.axes) {
            long v = a < 0 ? long(a) + long(out_nd) : long(a);
            if (v < 0 || v >= long(out_nd))
                BRAID_THROW(ShapeError,
                            "{}: new axis {} out of range for the rank-{} output of a rank-{} "
                            "input (valid: {}..{})",
                            describe(), a, out_nd, nd, -long(out_nd), long(out_nd) - 1);
            if (is_new[size_t(v)])
                BRAID_THROW(ShapeError, "{}: new axis {} given twice", describe(), a);
            is_new[size_t(v)] = true;
        }
        res.set_ndim(out_nd);
        for (size_t i = 0, src = 0; i < out_nd; ++i) {
            res[i] = is_new[i] ? 1 : x[src];
            res.stride[i] = is_new[i] ? 0 : x.stride[src++];
        }
        return res;
    }
    std::vector<bool> drop(nd, false);
    if (m_param.axes.empty())
        for (size_t i = 0; i < nd; ++i) drop[i] = x[i] == 1;
    for (int a : m_param.axes) {
        size_t v = normalize_axis(a, nd, describe());
        if (x[v] != 1)
            BRAID_THROW(ShapeError, "{}: cannot remove axis {} of {}: its size is {}, not 1",
                        describe(), a, x.TensorShape::to_string(), x[v]);
        drop[v] = true;
    }
    size_t k = 0;
    res.set_ndim(nd - size_t(std::count(drop.begin(), drop.end(), true)));
    for (size_t i = 0; i < nd; ++i)
        if (!drop[i]) {
            res[k] = x[i];
            res.stride[k++] = x.stride[i];
        }
    return res;
}

bool AxisAddRemove::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    out[0] = view_layout(TensorLayout(*ctx.shape(0), input(0)->dtype()));
    return true;
}

void AxisAddRemove::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    ctx.output(0) = x.view(view_layout(x.layout()));
}

SymbolVar expand_dims(SymbolVar x, std::vector<int> axes) {
    return AxisAddRemove::make(x, AxisAddRemove::Kind::ADD, std::move(axes));
}

SymbolVar squeeze(SymbolVar x, std::vector<int> axes) {
    return AxisAddRemove::make(x, AxisAddRemove::Kind::REMOVE, std::move(axes));
}

} // namespace braid::opr

namespace braid {
using namespace opr;
SymbolVar SymbolVar::reshape(const std::vector<long>& shape) const {
    return Reshape::make(*this, shape);
}
SymbolVar SymbolVar::reshape(SymbolVar shape) const {
    return Reshape::make(*this, shape);
}
SymbolVar SymbolVar::broadcast(const TensorShape& shape) const {
    return Broadcast::make(*this, shape);
}
SymbolVar SymbolVar::broadcast(SymbolVar shape) const {
    return Broadcast::make(*this, shape);
}
SymbolVar SymbolVar::astype(DType dtype) const {
    return TypeCvt::make(*this, dtype);
}

SymbolVar SymbolVar::symshape() const {
    return GetVarShape::make(*this);
}
} // namespace braid

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

//! The static target of a Reshape or Broadcast loaded without a shape input.
template <typename Param> auto static_target(const OprLoadContext& ctx) {
    auto p = read_param<Param>(ctx.params);
    if (!p.target)
        BRAID_THROW(SerializationError,
                    "{}: param \"target\" is missing (needed without a shape input)",
                    ctx.params.context());
    return *p.target;
}

static SymbolVarArray load_reshape(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 2);
    if (ctx.inputs.size() == 2) return {Reshape::make(ctx.input(0), ctx.input(1), ctx.config)};
    return {Reshape::make(ctx.input(0), static_target<Reshape::Param>(ctx), ctx.config)};
}

static SymbolVarArray load_broadcast(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 2);
    if (ctx.inputs.size() == 2) return {Broadcast::make(ctx.input(0), ctx.input(1), ctx.config)};
    return {Broadcast::make(ctx.input(0), static_target<Broadcast::Param>(ctx), ctx.config)};
}

static SymbolVarArray load_dimshuffle(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 1);
    auto pattern = read_param<Dimshuffle::Param>(ctx.params).pattern;
    if (pattern.size() > TensorShape::MAX_NDIM)
        BRAID_THROW(SerializationError,
                    "{}: param \"pattern\" has {} entries; the output rank is at most {}",
                    ctx.params.context(), pattern.size(), TensorShape::MAX_NDIM);
    for (int p : pattern)
        if (p < -1 || p >= int(TensorShape::MAX_NDIM))
            BRAID_THROW(SerializationError,
                        "{}: param \"pattern\" holds {}; expected an input axis (0..{}) or -1",
                        ctx.params.context(), p, TensorShape::MAX_NDIM - 1);
    // make() checks that every input axis appears exactly once.
    return {Dimshuffle::make(ctx.input(0), std::move(pattern), ctx.config)};
}

static SymbolVarArray load_axis_add_remove(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 1);
    auto p = read_param<AxisAddRemove::Param>(ctx.params);
    if (p.axes.size() > TensorShape::MAX_NDIM)
        BRAID_THROW(SerializationError, "{}: param \"axes\" has {} entries (at most {})",
                    ctx.params.context(), p.axes.size(), TensorShape::MAX_NDIM);
    // make() checks each axis against the input's (ADD: the output's) rank.
    return {AxisAddRemove::make(ctx.input(0), p.kind, std::move(p.axes), ctx.config)};
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_tensor_manip_kernels();
}
#endif

void register_tensor_manip_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("Reshape", "tensor_manip", dump_param<Reshape>, load_reshape);
    reg.add("GetVarShape", "tensor_manip", no_params, load_param<GetVarShape>);
    reg.add("Broadcast", "tensor_manip", dump_param<Broadcast>, load_broadcast);
    reg.add("TypeCvt", "tensor_manip", dump_param<TypeCvt>, load_param<TypeCvt>);
    reg.add("Dimshuffle", "tensor_manip", dump_param<Dimshuffle>, load_dimshuffle);
    reg.add("AxisAddRemove", "tensor_manip", dump_param<AxisAddRemove>, load_axis_add_remove);
    register_grad_rule("Reshape", Reshape::grad_rule);
    register_grad_rule("Broadcast", Broadcast::grad_rule);
    register_grad_rule("TypeCvt", TypeCvt::grad_rule);
    // A shape is piecewise constant in the input: no gradient flows through it.
    register_grad_rule("GetVarShape",
                       [](OperatorNode&, size_t, const VarNodeArray&) { return nullptr; });
    register_grad_rule("Dimshuffle", Dimshuffle::grad_rule);
    register_grad_rule("AxisAddRemove", AxisAddRemove::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_tensor_manip_kernels(); // operators/cuda/tensor_manip.cpp
#endif
}

} // namespace braid::opr
