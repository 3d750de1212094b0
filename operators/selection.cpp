#include "operators/selection.h"

#include "graph/operator_registry.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/kernel_utils.h"
#include "operators/reduce.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

namespace braid::opr {

namespace {

//! Whether each element of x is nonzero (any dtype; NaN counts as nonzero).
std::vector<bool> nonzero_mask(const Tensor& x) {
    size_t n = x.shape().total_nr_elems();
    std::vector<double> v(n);
    if (n) convert_elements(x.dtype(), x.contiguous().raw_ptr(), dtype::Float64(), v.data(), n);
    std::vector<bool> mask(n);
    for (size_t i = 0; i < n; ++i) mask[i] = v[i] != 0.0;
    return mask;
}

} // namespace

// ---------------------------------------------------------------- NonZero
NonZero::NonZero(VarNode* x, const OperatorConfig& config) : OperatorNode(config) {
    add_input(x);
    add_output();
}

SymbolVar NonZero::make(SymbolVar x, const OperatorConfig& config) {
    return x.graph().insert_opr(std::make_unique<NonZero>(x.node(), config))->output(0);
}

void NonZero::init_output_dtypes() {
    output(0)->set_dtype(dtype::Int64());
}

bool NonZero::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.value(0)) return false; // the count is known with the values
    auto mask = nonzero_mask(*ctx.value(0));
    out[0] = TensorShape{ctx.shape(0)->ndim(), size_t(std::count(mask.begin(), mask.end(), true))};
    return true;
}

void NonZero::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    auto mask = nonzero_mask(x);
    size_t rank = x.shape().ndim(), n = y.shape()[1];
    auto* out = y.ptr<int64_t>();
    size_t j = 0;
    std::vector<size_t> coord(rank, 0);
    for (size_t i = 0; i < mask.size(); ++i) {
        if (mask[i]) {
            for (size_t d = 0; d < rank; ++d) out[d * n + j] = int64_t(coord[d]);
            ++j;
        }
        for (size_t d = rank; d-- > 0;) { // the next row-major coordinate
            if (++coord[d] < x.shape()[d]) break;
            coord[d] = 0;
        }
    }
}

// ---------------------------------------------------------------- NonMaxSuppression
NonMaxSuppression::NonMaxSuppression(const VarNodeArray& inputs, Param param,
                                     const OperatorConfig& config)
    : ParamOperator(param, config) {
    for (auto* v : inputs) add_input(v);
    add_output();
}

SymbolVar NonMaxSuppression::make(const SymbolVarArray& inputs, Param param,
                                  const OperatorConfig& config) {
    if (inputs.size() < 2 || inputs.size() > 5)
        BRAID_THROW(GraphError,
                    "NonMaxSuppression: {} inputs given; expected boxes, scores and up to three "
                    "of max_output_boxes_per_class, iou_threshold, score_threshold",
                    inputs.size());
    VarNodeArray nodes;
    for (auto& v : inputs) nodes.push_back(v.node());
    return inputs[0]
        .graph()
        .insert_opr(std::make_unique<NonMaxSuppression>(nodes, param, config))
        ->output(0);
}

void NonMaxSuppression::init_output_dtypes() {
    static const char* names[] = {"boxes", "scores", "max_output_boxes_per_class", "iou_threshold",
                                  "score_threshold"};
    for (size_t i = 0; i < inputs().size(); ++i) {
        DType want = i == 2 ? dtype::Int64() : dtype::Float32();
        if (input(i)->dtype() != want)
            BRAID_THROW(DTypeError, "{}: input {} ({}) has dtype {}; expected {}", describe(), i,
                        names[i], input(i)->dtype().name(), want.name());
    }
    output(0)->set_dtype(dtype::Int64());
}

bool NonMaxSuppression::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    const TensorShape *boxes = ctx.shape(0), *scores = ctx.shape(1);
    if (boxes && scores &&
        (boxes->ndim() != 3 || (*boxes)[2] != 4 || scores->ndim() != 3 ||
         (*scores)[0] != (*boxes)[0] || (*scores)[2] != (*boxes)[1]))
        BRAID_THROW(ShapeError,
                    "{}: boxes {} and scores {} do not fit; expected boxes [B, N, 4] and scores "
                    "[B, C, N]",
                    describe(), boxes->to_string(), scores->to_string());
    for (size_t i = 2; i < inputs().size(); ++i)
        if (ctx.shape(i) && ctx.shape(i)->total_nr_elems() != 1)
            BRAID_THROW(ShapeError, "{}: input {} has shape {}; expected one element", describe(),
                        i, ctx.shape(i)->to_string());
    (void)out;
    return false; // the number of boxes kept is known when it runs
}

namespace {

struct Box {
    float y1, x1, y2, x2;
};

Box corners(const float* b, bool center) {
    if (center) {
        float xc = b[0], yc = b[1], w = b[2], h = b[3];
        return {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
    }
    return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

float iou(const Box& a, const Box& b) {
    float area_a = (a.y2 - a.y1) * (a.x2 - a.x1), area_b = (b.y2 - b.y1) * (b.x2 - b.x1);
    if (area_a <= 0 || area_b <= 0) return 0;
    float h = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
    float w = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
    if (h <= 0 || w <= 0) return 0;
    float inter = h * w;
    return inter / (area_a + area_b - inter);
}

} // namespace

void NonMaxSuppression::execute(ExecCtx& ctx) {
    const Tensor &boxes = ctx.input(0), &scores = ctx.input(1);
    size_t nb = boxes.shape()[0], n = boxes.shape()[1], nc = scores.shape()[1];
    auto scalar = [&](size_t i, auto fallback) {
        using T = decltype(fallback);
        return ctx.nr_inputs() > i ? ctx.input(i).ptr<T>()[0] : fallback;
    };
    int64_t max_out = scalar(2, int64_t(0));
    float iou_threshold = scalar(3, 0.f);
    bool filter = ctx.nr_inputs() > 4;
    float score_threshold = scalar(4, 0.f);
    const float* bp = boxes.ptr<float>();
    const float* sp = scores.ptr<float>();
    std::vector<int64_t> rows;
    std::vector<size_t> order;
    std::vector<Box> kept;
    for (size_t b = 0; b < nb && max_out > 0; ++b)
        for (size_t c = 0; c < nc; ++c) {
            const float* s = sp + (b * nc + c) * n;
            order.clear();
            for (size_t i = 0; i < n; ++i)
                if (!filter || s[i] > score_threshold) order.push_back(i);
            std::stable_sort(order.begin(), order.end(),
                             [&](size_t i, size_t j) { return s[i] > s[j]; });
            kept.clear();
            for (size_t i : order) {
                if (int64_t(kept.size()) >= max_out) break;
                Box box = corners(bp + (b * n + i) * 4, m_param.center_point_box);
                bool suppressed = std::any_of(kept.begin(), kept.end(), [&](const Box& k) {
                    return iou(k, box) > iou_threshold;
                });
                if (suppressed) continue;
                kept.push_back(box);
                rows.insert(rows.end(), {int64_t(b), int64_t(c), int64_t(i)});
            }
        }
    Tensor out(TensorShape{rows.size() / 3, 3}, dtype::Int64());
    std::copy(rows.begin(), rows.end(), out.ptr<int64_t>());
    ctx.output(0) = std::move(out);
}

// ---------------------------------------------------------------- Unique
Unique::Unique(VarNode* x, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(x);
    for (int i = 0; i < 4; ++i) add_output();
}

SymbolVarArray Unique::make(SymbolVar x, Param param, const OperatorConfig& config) {
    auto* opr = x.graph().insert_opr(std::make_unique<Unique>(x.node(), param, config));
    SymbolVarArray outs;
    for (auto* v : opr->outputs()) outs.push_back(v);
    return outs;
}

void Unique::init_output_dtypes() {
    output(0)->set_dtype(input(0)->dtype());
    for (size_t k = 1; k < 4; ++k) output(k)->set_dtype(dtype::Int64());
}

bool Unique::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (ctx.shape(0) && m_param.axis)
        normalize_axis(*m_param.axis, ctx.shape(0)->ndim(), describe());
    (void)out;
    return false; // how many are distinct is known when it runs
}

void Unique::execute(ExecCtx& ctx) {
    const Tensor x = ctx.input(0).contiguous();
    const TensorShape& xs = x.shape();
    size_t axis = m_param.axis ? normalize_axis(*m_param.axis, xs.ndim(), describe()) : 0;
    AxisSplit s =
        m_param.axis ? split_shape(xs, axis, axis + 1) : AxisSplit{1, xs.total_nr_elems(), 1};
    // Slice i is every element at position i along the axis, compared as long double (exact
    // for every float and for 64-bit integers).
    size_t total = xs.total_nr_elems();
    std::vector<long double> v(total);
    if (x.dtype() == dtype::Int64()) {
        for (size_t i = 0; i < total; ++i) v[i] = (long double)x.ptr<int64_t>()[i];
    } else if (total) {
        std::vector<double> d(total);
        convert_elements(x.dtype(), x.raw_ptr(), dtype::Float64(), d.data(), total);
        std::copy(d.begin(), d.end(), v.begin());
    }
    auto at = [&](size_t slice, size_t k) { // k-th element of a slice: (outer, inner) order
        return v[(k / s.inner) * s.n * s.inner + slice * s.inner + k % s.inner];
    };
    size_t len = s.outer * s.inner;
    auto less = [&](size_t a, size_t b) {
        for (size_t k = 0; k < len; ++k)
            if (at(a, k) != at(b, k)) return at(a, k) < at(b, k);
        return false;
    };
    // Slices by value (first occurrence first among equals), then one per distinct value.
    std::vector<size_t> by_value(s.n);
    std::iota(by_value.begin(), by_value.end(), 0);
    std::stable_sort(by_value.begin(), by_value.end(), less);
    std::vector<size_t> first;      // per distinct value, sorted: its first slice
    std::vector<size_t> group(s.n); // per slice: its distinct value, sorted order
    std::vector<int64_t> count;
    for (size_t i = 0; i < s.n; ++i) {
        if (i == 0 || less(by_value[i - 1], by_value[i])) {
            first.push_back(by_value[i]);
            count.push_back(0);
        }
        group[by_value[i]] = first.size() - 1;
        ++count.back();
    }
    size_t u = first.size();
    std::vector<size_t> order(u); // output position -> sorted distinct value
    std::iota(order.begin(), order.end(), 0);
    if (!m_param.sorted)
        std::sort(order.begin(), order.end(),
                  [&](size_t a, size_t b) { return first[a] < first[b]; });
    std::vector<size_t> position(u);
    for (size_t j = 0; j < u; ++j) position[order[j]] = j;

    std::vector<size_t> ydims{u};
    if (m_param.axis) {
        ydims = xs.dims();
        ydims[axis] = u;
    }
    Tensor y(TensorShape(ydims), x.dtype());
    size_t esize = x.dtype().size();
    for (size_t o = 0; o < s.outer; ++o)
        for (size_t j = 0; j < u; ++j)
            std::memcpy(y.raw_ptr() + (o * u + j) * s.inner * esize,
                        x.raw_ptr() + (o * s.n + first[order[j]]) * s.inner * esize,
                        s.inner * esize);
    Tensor indices(TensorShape{u}, dtype::Int64()), counts(TensorShape{u}, dtype::Int64());
    Tensor inverse(TensorShape{s.n}, dtype::Int64());
    for (size_t j = 0; j < u; ++j) {
        indices.ptr<int64_t>()[j] = int64_t(first[order[j]]);
        counts.ptr<int64_t>()[j] = count[order[j]];
    }
    for (size_t i = 0; i < s.n; ++i) inverse.ptr<int64_t>()[i] = int64_t(position[group[i]]);
    ctx.output(0) = std::move(y);
    ctx.output(1) = std::move(indices);
    ctx.output(2) = std::move(inverse);
    ctx.output(3) = std::move(counts);
}

namespace {

// The distinct rows of x rounded to integers, in order of first occurrence.
SymbolVarArray unique_example(SymbolVar x) {
    return Unique::make(x.astype(dtype::Int32()), {0, false});
}

// The coordinates of x's positive elements.
SymbolVarArray nonzero_example(SymbolVar x) {
    auto zero = ImmutableTensor::make_scalar(x.graph(), 0, x.dtype());
    return {NonZero::make(less(zero, x))};
}

// x's 24 values as six boxes of one batch, scored by their sums, at most 3 kept.
SymbolVarArray nms_example(SymbolVar x) {
    auto boxes = x.reshape(std::vector<long>{1, -1, 4});
    auto scores = reduce_sum(boxes, {2}).reshape(std::vector<long>{1, 1, -1});
    auto& g = x.graph();
    return {
        NonMaxSuppression::make({boxes, scores, ImmutableTensor::make_scalar(g, 3, dtype::Int64()),
                                 ImmutableTensor::make_scalar(g, 0.5, dtype::Float32())},
                                {})};
}

} // namespace

void register_selection_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("NonZero", "selection", no_params, load_param<NonZero>, nonzero_example);
    reg.add("NonMaxSuppression", "selection", dump_param<NonMaxSuppression>,
            load_param<NonMaxSuppression>, nms_example);
    reg.add("Unique", "selection", dump_param<Unique>, load_param<Unique>, unique_example);
}

} // namespace braid::opr
