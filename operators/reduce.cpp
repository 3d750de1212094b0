#include "operators/reduce.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "operators/kernel_utils.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace braid::opr {

const char* reduce_mode_name(ReduceMode mode) {
    switch (mode) {
    case ReduceMode::SUM:
        return "SUM";
    case ReduceMode::MEAN:
        return "MEAN";
    case ReduceMode::MAX:
        return "MAX";
    case ReduceMode::MIN:
        return "MIN";
    case ReduceMode::PROD:
        return "PROD";
    case ReduceMode::SUM_SQR:
        return "SUM_SQR";
    }
    return "?";
}

const char* arg_reduce_mode_name(ArgReduceMode mode) {
    switch (mode) {
    case ArgReduceMode::ARGMAX:
        return "ARGMAX";
    case ArgReduceMode::ARGMIN:
        return "ARGMIN";
    }
    return "?";
}

namespace {

// ---------------------------------------------------------------- accumulation policy
//! How mode M accumulates elements of type T: `Lane` values combine within a block (kept
//! small so that float32 sums vectorise; double for float64 and for products), `Wide` values
//! combine the blocks.
template <typename T, ReduceMode M> struct RedOp {
    static constexpr bool is_float = std::is_floating_point_v<T>;
    static constexpr bool is_minmax = M == ReduceMode::MAX || M == ReduceMode::MIN;
    using Lane = std::conditional_t<
        is_minmax, T,
        std::conditional_t<
            is_float, std::conditional_t<M == ReduceMode::PROD || sizeof(T) == 8, double, float>,
            int64_t>>;
    using Wide = std::conditional_t<is_minmax, T, std::conditional_t<is_float, double, int64_t>>;

    static Lane init() {
        if constexpr (M == ReduceMode::MAX)
            return is_float ? -std::numeric_limits<T>::infinity()
                            : std::numeric_limits<T>::lowest();
        else if constexpr (M == ReduceMode::MIN)
            return is_float ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
        else if constexpr (M == ReduceMode::PROD)
            return Lane(1);
        else
            return Lane(0);
    }
    static Lane load(T x) {
        if constexpr (M == ReduceMode::SUM_SQR) {
            if constexpr (is_float)
                return Lane(x) * Lane(x);
            else
                return Lane(uint64_t(x) * uint64_t(x));
        } else {
            return Lane(x);
        }
    }
    template <typename A> static A comb(A a, A b) {
        if constexpr (M == ReduceMode::MAX)
            return b > a || b != b ? b : a;
        else if constexpr (M == ReduceMode::MIN)
            return b < a || b != b ? b : a;
        else if constexpr (std::is_integral_v<A>)
            return M == ReduceMode::PROD ? A(uint64_t(a) * uint64_t(b))
                                         : A(uint64_t(a) + uint64_t(b));
        else
            return M == ReduceMode::PROD ? a * b : a + b;
    }
    //! The output value from the combined result of `count` elements.
    static T finish(Wide w, size_t count) {
        if constexpr (M == ReduceMode::MEAN) {
            if constexpr (is_float)
                return T(w / double(count));
            else
                return count ? T(w / int64_t(count)) : T(0);
        } else {
            return T(w);
        }
    }
};

constexpr size_t LANES = 16;  //!< independent accumulators in a row reduction
constexpr size_t BLOCK = 256; //!< elements per float32 block before it is widened
constexpr size_t TILE = 256;  //!< columns per work item in a middle-axis reduction
constexpr size_t KBLOCK = 64; //!< rows per float32 block in a middle-axis reduction

//! Reduces n contiguous elements.
template <class Op, typename T>
BRAID_SIMD_CLONES BRAID_NO_FP_CONTRACT typename Op::Wide reduce_row(const T* x, size_t n) {
    using Lane = typename Op::Lane;
    using Wide = typename Op::Wide;
    Wide total = Wide(Op::init());
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t m = std::min(BLOCK, n - b);
        const T* p = x + b;
        Lane acc[LANES];
        for (size_t j = 0; j < LANES; ++j) acc[j] = Op::init();
        size_t i = 0;
        for (; i + LANES <= m; i += LANES)
            for (size_t j = 0; j < LANES; ++j) acc[j] = Op::comb(acc[j], Op::load(p[i + j]));
        for (size_t w = LANES / 2; w; w /= 2)
            for (size_t j = 0; j < w; ++j) acc[j] = Op::comb(acc[j], acc[j + w]);
        Lane r = acc[0];
        for (; i < m; ++i) r = Op::comb(r, Op::load(p[i]));
        total = Op::comb(total, Wide(r));
    }
    return total;
}

//! Reduces columns [0, w) of n rows spaced `inner` apart into out[0..w).
template <class Op, typename T>
void reduce_cols(const T* x, size_t n, size_t inner, size_t w, typename Op::Wide* out) {
    using Lane = typename Op::Lane;
    Lane part[TILE];
    for (size_t i = 0; i < w; ++i) out[i] = typename Op::Wide(Op::init());
    for (size_t k0 = 0; k0 < n; k0 += KBLOCK) {
        for (size_t i = 0; i < w; ++i) part[i] = Op::init();
        for (size_t k = k0; k < std::min(n, k0 + KBLOCK); ++k) {
            const T* row = x + k * inner;
            for (size_t i = 0; i < w; ++i) part[i] = Op::comb(part[i], Op::load(row[i]));
        }
        for (size_t i = 0; i < w; ++i) out[i] = Op::comb(out[i], typename Op::Wide(part[i]));
    }
}

//! How many times cheaper a row reduction's element is than an elementwise operator's, as
//! work counted against PARALLEL_MIN_ELEMS: reduce_row sums 16 lanes from cache, about 8 floats
//! a nanosecond on one AVX2 core, so a second thread pays for its wake-up only on 8 times the
//! elements. (A classifier's global average pool of 57,600 elements took 3.3 us on one thread
//! and 13 us split over two.)
constexpr size_t ROW_ELEMS_PER_WORK = 8;

//! y[o, i] = reduction over k of x[o, k, i], for contiguous x and y.
template <typename T, ReduceMode M>
void reduce_oni(const T* x, size_t outer, size_t n, size_t inner, T* y) {
    using Op = RedOp<T, M>;
    using Wide = typename Op::Wide;
    size_t threads = kernel_threads();
    // Work in elementwise units (see ROW_ELEMS_PER_WORK).
    size_t total = outer * n * inner / (inner == 1 ? ROW_ELEMS_PER_WORK : 1);
    size_t tiles = (inner + TILE - 1) / TILE;
    size_t items = inner == 1 ? outer : outer * tiles;
    // Few independent outputs but much work: split n too, and combine the partial results
    // (not in deterministic mode: the split would depend on the other dims and the threads).
    size_t splits = 1;
    if (total >= PARALLEL_MIN_ELEMS && items < 2 * threads && !deterministic_kernels())
        splits = std::clamp<size_t>(total / PARALLEL_MIN_ELEMS, 1, 4 * threads);
    splits = std::min(splits, std::max<size_t>(n, 1));
    size_t kchunk = (n + splits - 1) / std::max<size_t>(splits, 1);
    if (splits <= 1) {
        if (inner == 1) {
            size_t work = std::max<size_t>(n / ROW_ELEMS_PER_WORK, 1);
            parallel_range(outer, work, [&](size_t b, size_t e) {
                for (size_t o = b; o < e; ++o) y[o] = Op::finish(reduce_row<Op>(x + o * n, n), n);
            });
        } else {
            parallel_range(items, n * TILE, [&](size_t b, size_t e) {
                Wide acc[TILE];
                for (size_t it = b; it < e; ++it) {
                    size_t o = it / tiles, i0 = (it % tiles) * TILE;
                    size_t w = std::min(TILE, inner - i0);
                    reduce_cols<Op>(x + o * n * inner + i0, n, inner, w, acc);
                    for (size_t i = 0; i < w; ++i) y[o * inner + i0 + i] = Op::finish(acc[i], n);
                }
            });
        }
        return;
    }
    std::vector<Wide> part(outer * splits * inner);
    parallel_range(outer * splits * tiles, kchunk * std::min(inner, TILE), [&](size_t b, size_t e) {
        for (size_t it = b; it < e; ++it) {
            size_t t = it % tiles, s = (it / tiles) % splits, o = it / tiles / splits;
            size_t k0 = std::min(n, s * kchunk), k1 = std::min(n, k0 + kchunk);
            const T* xs = x + (o * n + k0) * inner;
            Wide* ps = part.data() + (o * splits + s) * inner;
            if (inner == 1)
                ps[0] = reduce_row<Op>(xs, k1 - k0);
            else
                reduce_cols<Op>(xs + t * TILE, k1 - k0, inner, std::min(TILE, inner - t * TILE),
                                ps + t * TILE);
        }
    });
    for (size_t o = 0; o < outer; ++o)
        for (size_t i = 0; i < inner; ++i) {
            Wide acc = part[o * splits * inner + i];
            for (size_t s = 1; s < splits; ++s)
                acc = Op::comb(acc, part[(o * splits + s) * inner + i]);
            y[o * inner + i] = Op::finish(acc, n);
        }
}

template <typename T>
void reduce_dispatch(ReduceMode mode, const T* x, size_t outer, size_t n, size_t inner, T* y) {
    switch (mode) {
    case ReduceMode::SUM:
        return reduce_oni<T, ReduceMode::SUM>(x, outer, n, inner, y);
    case ReduceMode::MEAN:
        return reduce_oni<T, ReduceMode::MEAN>(x, outer, n, inner, y);
    case ReduceMode::MAX:
        return reduce_oni<T, ReduceMode::MAX>(x, outer, n, inner, y);
    case ReduceMode::MIN:
        return reduce_oni<T, ReduceMode::MIN>(x, outer, n, inner, y);
    case ReduceMode::PROD:
        return reduce_oni<T, ReduceMode::PROD>(x, outer, n, inner, y);
    case ReduceMode::SUM_SQR:
        return reduce_oni<T, ReduceMode::SUM_SQR>(x, outer, n, inner, y);
    }
}

//! Reshapes the reduction of `axes` over `x` into one (outer, n, inner) problem: dims of
//! size 1 drop out; when the reduced dims are not adjacent, `x` is replaced by a copy with
//! the reduced dims moved last.
AxisSplit plan_reduction(Tensor& x, const std::vector<size_t>& axes) {
    const TensorShape& s = x.shape();
    std::vector<size_t> kept, reduced;
    int runs = 0;
    bool prev_reduced = false;
    for (size_t d = 0; d < s.ndim(); ++d) {
        if (s[d] == 1) continue;
        bool r = std::binary_search(axes.begin(), axes.end(), d);
        (r ? reduced : kept).push_back(d);
        if (r && !prev_reduced) ++runs;
        prev_reduced = r;
    }
    AxisSplit sp;
    if (runs <= 1) {
        size_t first = reduced.empty() ? s.ndim() : reduced.front();
        for (size_t d : kept) (d < first ? sp.outer : sp.inner) *= s[d];
        for (size_t d : reduced) sp.n *= s[d];
        return sp;
    }
    TensorLayout perm;
    perm.dtype = x.dtype();
    perm.set_ndim(kept.size() + reduced.size());
    size_t i = 0;
    for (auto* group : {&kept, &reduced})
        for (size_t d : *group) {
            perm[i] = s[d];
            perm.stride[i++] = x.layout().stride[d];
            (group == &kept ? sp.outer : sp.n) *= s[d];
        }
    Tensor gathered(perm, x.dtype());
    gathered.copy_from(x.view(perm));
    x = gathered;
    return sp;
}

} // namespace

// ---------------------------------------------------------------- Reduce
Reduce::Reduce(VarNode* x, Param param, const OperatorConfig& config)
    : ParamOperator(std::move(param), config) {
    add_input(x);
    add_output();
}

SymbolVar Reduce::make(SymbolVar x, Param param, const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<Reduce>(x.node(), std::move(param), config))
        ->output(0);
}

SymbolVar reduce_sum(SymbolVar x, std::vector<int> axes, bool keepdims) {
    return Reduce::make(x, {ReduceMode::SUM, std::move(axes), keepdims});
}
SymbolVar reduce_mean(SymbolVar x, std::vector<int> axes, bool keepdims) {
    return Reduce::make(x, {ReduceMode::MEAN, std::move(axes), keepdims});
}
SymbolVar reduce_max(SymbolVar x, std::vector<int> axes, bool keepdims) {
    return Reduce::make(x, {ReduceMode::MAX, std::move(axes), keepdims});
}
SymbolVar reduce_min(SymbolVar x, std::vector<int> axes, bool keepdims) {
    return Reduce::make(x, {ReduceMode::MIN, std::move(axes), keepdims});
}
SymbolVar reduce_prod(SymbolVar x, std::vector<int> axes, bool keepdims) {
    return Reduce::make(x, {ReduceMode::PROD, std::move(axes), keepdims});
}
SymbolVar reduce_sum_sqr(SymbolVar x, std::vector<int> axes, bool keepdims) {
    return Reduce::make(x, {ReduceMode::SUM_SQR, std::move(axes), keepdims});
}

void Reduce::init_output_dtypes() {
    DType dt = input(0)->dtype();
    if (!dt.is_float() && dt != dtype::Int32() && dt != dtype::Int64())
        BRAID_THROW(DTypeError, "{}: input \"{}\" has dtype {}; expected {}", describe(),
                    input(0)->name(), dt.name(),
                    dtype_list({dtype::Float32(), dtype::Float16(), dtype::BFloat16(),
                                dtype::Float64(), dtype::Int32(), dtype::Int64()}));
    output(0)->set_dtype(dt);
}

std::vector<size_t> Reduce::normalized_axes(size_t ndim) const {
    std::vector<size_t> axes;
    if (m_param.axes.empty()) {
        for (size_t i = 0; i < ndim; ++i) axes.push_back(i);
        return axes;
    }
    for (int a : m_param.axes) {
        size_t v = normalize_axis(a, ndim, describe());
        if (std::find(axes.begin(), axes.end(), v) != axes.end())
            BRAID_THROW(ShapeError, "{}: axis {} given twice (as {} for a rank-{} input)",
                        describe(), a, v, ndim);
        axes.push_back(v);
    }
    std::sort(axes.begin(), axes.end());
    return axes;
}

namespace {

//! `in` without the sorted `axes`, or with them as 1 when `keepdims`.
TensorShape reduced_shape(const TensorShape& in, const std::vector<size_t>& axes, bool keepdims) {
    std::vector<size_t> dims;
    for (size_t i = 0; i < in.ndim(); ++i)
        if (!std::binary_search(axes.begin(), axes.end(), i))
            dims.push_back(in[i]);
        else if (keepdims)
            dims.push_back(1);
    return TensorShape(dims);
}

} // namespace

bool Reduce::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    const auto& in = *ctx.shape(0);
    auto axes = normalized_axes(in.ndim());
    if (m_param.mode == ReduceMode::MAX || m_param.mode == ReduceMode::MIN)
        for (size_t axis : axes)
            if (in[axis] == 0)
                BRAID_THROW(ShapeError, "{}: cannot take {} over the empty axis {} of {}",
                            describe(), reduce_mode_name(m_param.mode), axis, in.to_string());
    out[0] = reduced_shape(in, axes, m_param.keepdims);
    return true;
}

void Reduce::execute(ExecCtx& ctx) {
    Tensor x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    auto axes = normalized_axes(x.shape().ndim());
    if (x.dtype() == dtype::Float64()) {
        AxisSplit sp = plan_reduction(x, axes);
        reduce_dispatch<double>(m_param.mode, x.ptr<double>(), sp.outer, sp.n, sp.inner,
                                y.ptr<double>());
    } else if (x.dtype().is_float()) {
        x = as_float32(x);
        Tensor yf = float32_like(y);
        AxisSplit sp = plan_reduction(x, axes);
        reduce_dispatch<float>(m_param.mode, x.ptr<float>(), sp.outer, sp.n, sp.inner,
                               yf.ptr<float>());
        store_float32(yf, y);
    } else if (x.dtype() == dtype::Int32()) {
        AxisSplit sp = plan_reduction(x, axes);
        reduce_dispatch<int32_t>(m_param.mode, x.ptr<int32_t>(), sp.outer, sp.n, sp.inner,
                                 y.ptr<int32_t>());
    } else {
        AxisSplit sp = plan_reduction(x, axes);
        reduce_dispatch<int64_t>(m_param.mode, x.ptr<int64_t>(), sp.outer, sp.n, sp.inner,
                                 y.ptr<int64_t>());
    }
}

// ---------------------------------------------------------------- ArgReduce
namespace {

//! Whether v replaces the best so far: strictly better, or the first NaN.
template <typename T> bool arg_better(bool is_max, T v, T best) {
    if (v != v) return best == best;
    return is_max ? v > best : v < best;
}

template <typename T>
void arg_reduce(bool is_max, const T* x, size_t outer, size_t n, size_t inner, int32_t* y) {
    size_t tiles = (inner + TILE - 1) / TILE;
    parallel_range(outer * tiles, n * std::min(inner, TILE), [&](size_t b, size_t e) {
        T best[TILE];
        for (size_t it = b; it < e; ++it) {
            size_t o = it / tiles, i0 = (it % tiles) * TILE, w = std::min(TILE, inner - i0);
            const T* xo = x + o * n * inner + i0;
            int32_t* yo = y + o * inner + i0;
            for (size_t i = 0; i < w; ++i) {
                best[i] = xo[i];
                yo[i] = 0;
            }
            for (size_t k = 1; k < n; ++k) {
                const T* row = xo + k * inner;
                for (size_t i = 0; i < w; ++i)
                    if (arg_better(is_max, row[i], best[i])) {
                        best[i] = row[i];
                        yo[i] = int32_t(k);
                    }
            }
        }
    });
}

} // namespace

ArgReduce::ArgReduce(VarNode* x, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(x);
    add_output();
}

SymbolVar ArgReduce::make(SymbolVar x, Param param, const OperatorConfig& config) {
    return x.graph().insert_opr(std::make_unique<ArgReduce>(x.node(), param, config))->output(0);
}

SymbolVar argmax(SymbolVar x, int axis, bool keepdims) {
    return ArgReduce::make(x, {ArgReduceMode::ARGMAX, axis, keepdims});
}
SymbolVar argmin(SymbolVar x, int axis, bool keepdims) {
    return ArgReduce::make(x, {ArgReduceMode::ARGMIN, axis, keepdims});
}

void ArgReduce::init_output_dtypes() {
    DType dt = input(0)->dtype();
    if (!dt.is_float() && dt != dtype::Int32() && dt != dtype::Int64())
        BRAID_THROW(DTypeError, "{}: input \"{}\" has dtype {}; expected {}", describe(),
                    input(0)->name(), dt.name(),
                    dtype_list({dtype::Float32(), dtype::Float16(), dtype::BFloat16(),
                                dtype::Float64(), dtype::Int32(), dtype::Int64()}));
    output(0)->set_dtype(dtype::Int32());
}

bool ArgReduce::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    const auto& in = *ctx.shape(0);
    size_t axis = normalize_axis(m_param.axis, in.ndim(), describe());
    if (in[axis] == 0)
        BRAID_THROW(ShapeError, "{}: axis {} of {} is empty; it has no extreme element", describe(),
                    m_param.axis, in.to_string());
    out[0] = reduced_shape(in, {axis}, m_param.keepdims);
    return true;
}

void ArgReduce::execute(ExecCtx& ctx) {
    Tensor x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    size_t axis = normalize_axis(m_param.axis, x.shape().ndim(), describe());
    AxisSplit sp = split_shape(x.shape(), axis, axis + 1);
    bool is_max = m_param.mode == ArgReduceMode::ARGMAX;
    int32_t* yp = y.ptr<int32_t>();
    if (x.dtype() == dtype::Float64()) {
        arg_reduce<double>(is_max, x.ptr<double>(), sp.outer, sp.n, sp.inner, yp);
    } else if (x.dtype().is_float()) {
        x = as_float32(x);
        arg_reduce<float>(is_max, x.ptr<float>(), sp.outer, sp.n, sp.inner, yp);
    } else if (x.dtype() == dtype::Int32()) {
        arg_reduce<int32_t>(is_max, x.ptr<int32_t>(), sp.outer, sp.n, sp.inner, yp);
    } else {
        arg_reduce<int64_t>(is_max, x.ptr<int64_t>(), sp.outer, sp.n, sp.inner, yp);
    }
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_reduce_kernels();
}
#endif

void register_reduce_operators() {
    auto& reg = OperatorRegistry::instance();
    // Loaded by make(), which checks the axes against the input's rank.
    reg.add("Reduce", "reduce", dump_param<Reduce>, load_param<Reduce>);
    reg.add("ArgReduce", "reduce", dump_param<ArgReduce>, load_param<ArgReduce>);
    register_grad_rule("Reduce", Reduce::grad_rule);
    register_non_differentiable("ArgReduce",
                                "its output is integer indices, piecewise constant in the input");
#if BRAID_WITH_CUDA
    cuda::register_reduce_kernels(); // operators/cuda/reduce.cpp
#endif
}

} // namespace braid::opr
