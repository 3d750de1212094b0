#include "operators/reduce.h"

#include "base/error.h"
#include "base/hash.h"

#include <algorithm>
#include <limits>

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
    }
    return "?";
}

Reduce::Reduce(VarNode* x, Param param, const OperatorConfig& config)
    : OperatorNode(config), m_param(std::move(param)) {
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

void Reduce::hash_params(Hasher& h) const {
    h.add_pod(m_param.mode).add_pod(m_param.keepdims);
    for (int a : m_param.axes) h.add_pod(a);
}

bool Reduce::params_equal(const OperatorNode& rhs) const {
    auto& o = static_cast<const Reduce&>(rhs).m_param;
    return o.mode == m_param.mode && o.axes == m_param.axes && o.keepdims == m_param.keepdims;
}

std::string Reduce::param_string() const {
    std::string s = reduce_mode_name(m_param.mode);
    if (!m_param.axes.empty()) {
        s += " axes=";
        for (size_t i = 0; i < m_param.axes.size(); ++i)
            s += (i ? "," : "") + std::to_string(m_param.axes[i]);
    }
    return s;
}

void Reduce::init_output_dtypes() {
    DType dt = input(0)->dtype();
    if (!dt.is_float() && dt != dtype::Int32() && dt != dtype::Int64())
        BRAID_THROW(DTypeError, "{}: dtype {} is not supported (float types, int32, int64)",
                    describe(), dt.name());
    output(0)->set_dtype(dt);
}

std::vector<size_t> Reduce::normalized_axes(size_t ndim) const {
    std::vector<size_t> axes;
    if (m_param.axes.empty()) {
        for (size_t i = 0; i < ndim; ++i) axes.push_back(i);
        return axes;
    }
    for (int a : m_param.axes) {
        long v = a < 0 ? long(a) + long(ndim) : long(a);
        if (v < 0 || v >= long(ndim))
            BRAID_THROW(ShapeError, "{}: axis {} out of range for a rank-{} input", describe(), a,
                        ndim);
        if (std::find(axes.begin(), axes.end(), size_t(v)) != axes.end())
            BRAID_THROW(ShapeError, "{}: axis {} given twice", describe(), a);
        axes.push_back(size_t(v));
    }
    std::sort(axes.begin(), axes.end());
    return axes;
}

bool Reduce::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    const auto& in = *ctx.shape(0);
    auto axes = normalized_axes(in.ndim());
    std::vector<size_t> dims;
    for (size_t i = 0; i < in.ndim(); ++i) {
        bool reduced = std::binary_search(axes.begin(), axes.end(), i);
        if (reduced && in[i] == 0 &&
            (m_param.mode == ReduceMode::MAX || m_param.mode == ReduceMode::MIN))
            BRAID_THROW(ShapeError, "{}: cannot take {} over the empty axis {} of {}", describe(),
                        reduce_mode_name(m_param.mode), i, in.to_string());
        if (!reduced)
            dims.push_back(in[i]);
        else if (m_param.keepdims)
            dims.push_back(1);
    }
    out[0] = TensorShape(dims);
    return true;
}

namespace {

// Reduces the middle axis of a (outer, n, inner) view into (outer, inner).
template <typename Acc, typename T, typename Combine>
void reduce_middle(const T* x, Acc* y, size_t outer, size_t n, size_t inner, Acc init,
                   Combine combine) {
    for (size_t o = 0; o < outer; ++o) {
        Acc* yo = y + o * inner;
        for (size_t i = 0; i < inner; ++i) yo[i] = init;
        const T* xo = x + o * n * inner;
        if (inner == 1) {
            Acc acc = init;
            for (size_t k = 0; k < n; ++k) acc = combine(acc, Acc(xo[k]));
            yo[0] = acc;
        } else {
            for (size_t k = 0; k < n; ++k)
                for (size_t i = 0; i < inner; ++i) yo[i] = combine(yo[i], Acc(xo[k * inner + i]));
        }
    }
}

template <typename Acc>
std::vector<Acc> reduce_all_axes(const std::vector<Acc>& x, TensorShape shape,
                                 const std::vector<size_t>& axes, ReduceMode mode) {
    std::vector<Acc> cur = x;
    // Reduce the highest axis first so lower axis indices stay valid.
    for (size_t r = axes.size(); r-- > 0;) {
        size_t ax = axes[r];
        size_t outer = 1, inner = 1;
        for (size_t i = 0; i < ax; ++i) outer *= shape[i];
        for (size_t i = ax + 1; i < shape.ndim(); ++i) inner *= shape[i];
        size_t n = shape[ax];
        std::vector<Acc> next(outer * inner);
        switch (mode) {
        case ReduceMode::SUM:
        case ReduceMode::MEAN:
            reduce_middle<Acc>(cur.data(), next.data(), outer, n, inner, Acc(0),
                               [](Acc a, Acc b) { return a + b; });
            break;
        case ReduceMode::MAX:
            reduce_middle<Acc>(cur.data(), next.data(), outer, n, inner,
                               std::numeric_limits<Acc>::lowest(),
                               [](Acc a, Acc b) { return b > a || b != b ? b : a; });
            break;
        case ReduceMode::MIN:
            reduce_middle<Acc>(cur.data(), next.data(), outer, n, inner,
                               std::numeric_limits<Acc>::max(),
                               [](Acc a, Acc b) { return b < a || b != b ? b : a; });
            break;
        }
        cur.swap(next);
        shape[ax] = 1;
    }
    return cur;
}

} // namespace

void Reduce::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    auto axes = normalized_axes(x.shape().ndim());
    size_t n = x.shape().total_nr_elems();
    size_t reduced = 1;
    for (size_t a : axes) reduced *= x.shape()[a];
    size_t ny = y.shape().total_nr_elems();
    if (x.dtype().is_float()) {
        std::vector<double> xd(n);
        for (size_t i = 0; i < n; ++i) xd[i] = load_as_double(x.dtype(), x.raw_ptr(), i);
        auto r = reduce_all_axes<double>(xd, x.shape(), axes, m_param.mode);
        for (size_t i = 0; i < ny; ++i) {
            double v = r[i];
            if (m_param.mode == ReduceMode::MEAN) v = reduced ? v / double(reduced) : NAN;
            store_from_double(y.dtype(), y.raw_ptr(), i, v);
        }
    } else {
        std::vector<int64_t> xi(n);
        for (size_t i = 0; i < n; ++i) xi[i] = int64_t(load_as_double(x.dtype(), x.raw_ptr(), i));
        auto r = reduce_all_axes<int64_t>(xi, x.shape(), axes, m_param.mode);
        for (size_t i = 0; i < ny; ++i) {
            int64_t v = r[i];
            if (m_param.mode == ReduceMode::MEAN) v = reduced ? v / int64_t(reduced) : 0;
            store_from_double(y.dtype(), y.raw_ptr(), i, double(v));
        }
    }
}

} // namespace braid::opr

// ---- serialization: params dump and load, registered in register_all_operators()
#include "serialization/params.h"

namespace braid::opr {

void dump_reduce(const OperatorNode& opr, ParamWriter& w) {
    auto& p = opr_cast<Reduce>(opr).param();
    w.write_string("mode", reduce_mode_name(p.mode));
    w.write_int_list("axes", p.axes);
    w.write_bool("keepdims", p.keepdims);
}

SymbolVarArray load_reduce(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 1);
    Reduce::Param p;
    p.mode = ctx.params.read_enum<ReduceMode>("mode", reduce_mode_name);
    p.axes = ctx.params.read_int_list<int>("axes");
    p.keepdims = ctx.params.read_bool("keepdims");
    return {Reduce::make(ctx.input(0), std::move(p), ctx.config)};
}

} // namespace braid::opr
