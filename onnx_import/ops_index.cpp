// ONNX indexing ops → braid: scatters, GatherND, TopK, ReverseSequence, MaxUnpool, BitShift, and
// the ops whose output size depends on values: NonZero, Compress, NonMaxSuppression, Unique (their
// outputs are dynamic vars unless the values are constants; operators/selection.h), and
// TfIdfVectorizer over integer tokens (n-gram counts, operators/ngram.h).
// Scatters and GatherND address the data through flat positions (row-major offsets) computed in
// the graph, so index values may be known only at run time; braid's IndexAdd and Embedding then
// move the elements.
#include "op_util.h"

#include "operators/concat_split.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/indexing.h"
#include "operators/io.h"
#include "operators/ngram.h"
#include "operators/reduce.h"
#include "operators/scatter.h"
#include "operators/selection.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace braid::onnx_import {

using namespace braid::opr;

namespace {

std::vector<long> dims_of(const TensorShape& s) {
    auto d = s.dims();
    return std::vector<long>(d.begin(), d.end());
}

long count(const TensorShape& s) {
    return long(s.total_nr_elems());
}

//! Indices as int32 with negative values counted from the end of a dim of size `dim`.
SymbolVar wrap_index(SymbolVar idx, size_t dim) {
    if (idx.dtype() != dtype::Int32()) idx = TypeCvt::make(idx, dtype::Int32());
    return where(less(idx, scalar_like(idx, 0)), idx + double(dim), idx);
}

//! For each element of an index tensor of shape `s` addressing `data` along `axis`: the
//! row-major offset of its position in data, without the index's own contribution (the other
//! dims are the element's own coordinates).
Tensor offsets_without_axis(const TensorShape& data, const TensorShape& s, size_t axis) {
    size_t rank = s.ndim(), n = s.total_nr_elems();
    std::vector<size_t> stride(rank, 1);
    for (size_t d = rank - 1; d-- > 0;) stride[d] = stride[d + 1] * data[d + 1];
    Tensor t(s, dtype::Int32());
    for (size_t flat = 0; flat < n; ++flat) {
        size_t rem = flat, off = 0;
        for (size_t d = rank; d-- > 0;) {
            if (d != axis) off += (rem % s[d]) * stride[d];
            rem /= s[d];
        }
        t.ptr<int32_t>()[flat] = int32_t(off);
    }
    return t;
}

size_t stride_of(const TensorShape& data, size_t axis) {
    size_t s = 1;
    for (size_t d = axis + 1; d < data.ndim(); ++d) s *= data[d];
    return s;
}

//! data with `updates` written (reduction "none") or added at the flat positions `pos`.
SymbolVar scatter_flat(const NodeCtx& c, SymbolVar data, SymbolVar pos, SymbolVar updates,
                       const std::string& reduction, long inner) {
    if (count(data.shape()) >= (long(1) << 31))
        c.unsupported("data of 2^31 or more elements (int32 positions)");
    auto shape = dims_of(data.shape());
    SymbolVar flat = data.reshape({count(data.shape()) / inner, inner});
    SymbolVar p = pos.reshape({count(pos.shape())});
    SymbolVar u = updates.reshape({count(pos.shape()), inner});
    SymbolVar y;
    if (reduction == "add") {
        y = index_add(flat, p, u, 0);
    } else if (reduction == "none") {
        // Written positions take the update; the rest keep the data.
        SymbolVar zero = zeros_like(flat);
        SymbolVar hits = index_add(zero, p, ones_like(u), 0);
        y = where(less(zero, hits), index_add(zero, p, u, 0), flat);
    } else {
        c.unsupported("reduction \"" + reduction + "\"");
    }
    return y.reshape(shape);
}

SymbolVarArray scatter_elements(const NodeCtx& c) {
    SymbolVar data = c.in(0), idx = c.in(1), upd = c.in(2);
    size_t rank = rank_of(c, data);
    int axis = norm_axis(c, c.attr_int("axis", 0), rank);
    if (rank_of(c, idx) != rank || idx.shape() != upd.shape())
        c.invalid(fmt::format("indices {} and updates {} must share a shape of data's rank {}",
                              idx.shape().to_string(), upd.shape().to_string(), rank));
    for (size_t d = 0; d < rank; ++d)
        if (idx.shape()[d] > data.shape()[d] && int(d) != axis)
            c.invalid(fmt::format("indices {} exceed data {} on dim {}", idx.shape().to_string(),
                                  data.shape().to_string(), d));
    SymbolVar base = ImmutableTensor::make(
        c.graph(), offsets_without_axis(data.shape(), idx.shape(), size_t(axis)));
    SymbolVar pos = base + wrap_index(idx, data.shape()[size_t(axis)]) *
                               double(stride_of(data.shape(), size_t(axis)));
    return one(scatter_flat(c, data, pos, upd, c.attr_string("reduction", "none"), 1));
}

//! For GatherND and ScatterND: the flat position, over data's first b + k dims, of each index
//! tuple (the last dim of `idx`, k long) in each batch position (the first b dims).
SymbolVar tuple_positions(const NodeCtx& c, SymbolVar data, SymbolVar idx, size_t b) {
    size_t rank = rank_of(c, data), irank = rank_of(c, idx);
    if (irank < 1 || irank <= b) c.invalid("indices need a last dim of index tuples");
    size_t k = idx.shape()[irank - 1];
    if (k < 1 || b + k > rank)
        c.invalid(fmt::format("index tuples of {} values into data {} with {} batch dims", k,
                              data.shape().to_string(), b));
    for (size_t d = 0; d < b; ++d)
        if (idx.shape()[d] != data.shape()[d]) c.invalid("batch dims of data and indices differ");
    SymbolVar i32 = TypeCvt::make(idx, dtype::Int32());
    // stride of each of the k indexed dims, over dims b .. b + k.
    std::vector<int64_t> strides(k), dims(k);
    int64_t s = 1;
    for (size_t j = k; j-- > 0;) {
        dims[j] = int64_t(data.shape()[b + j]);
        strides[j] = s;
        s *= dims[j];
    }
    std::vector<long> lead(irank - 1, 1);
    lead.push_back(long(k));
    SymbolVar dimv = int32_constant(c.graph(), dims, TensorShape{k}).reshape(lead);
    SymbolVar wrapped = where(less(i32, scalar_like(i32, 0)), i32 + dimv, i32);
    SymbolVar pos =
        reduce_sum(wrapped * int32_constant(c.graph(), strides, TensorShape{k}).reshape(lead),
                   {int(irank) - 1}, false);
    if (b > 0) {
        // Batch position p (row-major over the first b dims) starts at p * s.
        auto pd = pos.shape().dims();
        TensorShape ps(pd);
        std::vector<int64_t> boff(ps.total_nr_elems());
        size_t per = 1;
        for (size_t d = b; d < pd.size(); ++d) per *= pd[d];
        for (size_t i = 0; i < boff.size(); ++i) boff[i] = int64_t(i / per) * s;
        pos = pos + int32_constant(c.graph(), boff, ps);
    }
    return pos;
}

SymbolVarArray gather_nd(const NodeCtx& c) {
    SymbolVar data = c.in(0), idx = c.in(1);
    size_t b = size_t(c.attr_int("batch_dims", 0));
    SymbolVar pos = tuple_positions(c, data, idx, b);
    size_t k = idx.shape()[idx.shape().ndim() - 1];
    std::vector<long> rows{-1};
    std::vector<long> out = dims_of(pos.shape());
    for (size_t d = b + k; d < data.shape().ndim(); ++d)
        rows.push_back(long(data.shape()[d])), out.push_back(long(data.shape()[d]));
    return one(take(data.reshape(rows), 0, pos).reshape(out));
}

SymbolVarArray scatter_nd(const NodeCtx& c) {
    SymbolVar data = c.in(0), idx = c.in(1), upd = c.in(2);
    SymbolVar pos = tuple_positions(c, data, idx, 0);
    size_t k = idx.shape()[idx.shape().ndim() - 1];
    long inner = 1;
    for (size_t d = k; d < data.shape().ndim(); ++d) inner *= long(data.shape()[d]);
    if (count(upd.shape()) != count(pos.shape()) * inner)
        c.invalid(fmt::format("updates {} do not fit indices {} into data {}",
                              upd.shape().to_string(), idx.shape().to_string(),
                              data.shape().to_string()));
    return one(scatter_flat(c, data, pos, upd, c.attr_string("reduction", "none"), inner));
}

//! The k largest (or smallest) along an axis, in order, by k rounds of argmax and masking;
//! equal values come lowest index first.
SymbolVarArray top_k(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    int axis = norm_axis(c, c.attr_int("axis", -1), rank);
    int64_t k = c.ints_input(1).at(0), dim = int64_t(x.shape()[size_t(axis)]);
    if (k < 0 || k > dim) c.invalid(fmt::format("k {} is outside 0 to {}", k, dim));
    if (k == 0) c.unsupported("k 0 (an empty output)");
    bool largest = c.attr_int("largest", 1) != 0;
    double fence = x.dtype().is_float() ? (largest ? -INFINITY : INFINITY)
                   : largest            ? double(std::numeric_limits<int32_t>::min())
                                        : double(std::numeric_limits<int32_t>::max());
    if (x.dtype() == dtype::Int64()) c.unsupported("int64 input");
    std::vector<long> shape(rank, 1);
    shape[size_t(axis)] = long(dim);
    SymbolVar pos = arange(c.graph(), 0, double(dim), 1, dtype::Int32()).reshape(shape);
    SymbolVar v = x;
    SymbolVarArray vals, idxs;
    for (int64_t i = 0; i < k; ++i) {
        SymbolVar best = largest ? argmax(v, axis, true) : argmin(v, axis, true);
        if (best.dtype() != dtype::Int32()) best = TypeCvt::make(best, dtype::Int32());
        vals.push_back(indexing_one_hot(x, squeeze(best, {axis}), axis, true));
        idxs.push_back(best);
        if (i + 1 < k)
            v = where(equal(pos, best), Broadcast::make(scalar_like(v, fence), v.shape()), v);
    }
    SymbolVar values = k == 1 ? vals[0] : concat(vals, axis);
    SymbolVar indices = k == 1 ? idxs[0] : concat(idxs, axis);
    return {values, TypeCvt::make(indices, dtype::Int64())};
}

SymbolVarArray reverse_sequence(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    size_t rank = rank_of(c, x);
    if (rank < 2) c.invalid("the input needs a batch and a time axis");
    int baxis = norm_axis(c, c.attr_int("batch_axis", 1), rank);
    int taxis = norm_axis(c, c.attr_int("time_axis", 0), rank);
    if (baxis == taxis) c.invalid("batch_axis and time_axis are the same");
    long steps = long(x.shape()[size_t(taxis)]), batch = long(x.shape()[size_t(baxis)]);
    std::vector<long> tshape(rank, 1), bshape(rank, 1);
    tshape[size_t(taxis)] = steps, bshape[size_t(baxis)] = batch;
    SymbolVar t = arange(c.graph(), 0, double(steps), 1, dtype::Int32()).reshape(tshape);
    SymbolVar len = TypeCvt::make(c.in(1), dtype::Int32()).reshape(bshape);
    // Within its length a sample reads its steps backwards; past it, unchanged.
    SymbolVar src = where(less(t, len), len - 1.0 - t, t);
    return one(gather(x, Broadcast::make(src, x.shape()), taxis));
}

SymbolVarArray max_unpool(const NodeCtx& c) {
    SymbolVar x = c.in(0), idx = c.in(1);
    size_t rank = rank_of(c, x);
    if (rank < 3) c.invalid("the input needs a spatial dim");
    // The indices address the output of the pooling's own geometry; an output_shape may pad it.
    std::vector<long> natural = dims_of(x.shape());
    auto k = c.attr_ints("kernel_shape"), s = c.attr_ints("strides"), p = c.attr_ints("pads");
    size_t nsp = rank - 2;
    if (k.size() != nsp || (!s.empty() && s.size() != nsp) || (!p.empty() && p.size() != 2 * nsp))
        c.invalid(fmt::format("kernel_shape and strides need {} values, pads {}", nsp, 2 * nsp));
    for (size_t i = 0; i < nsp; ++i) {
        long stride = s.empty() ? 1 : long(s[i]);
        long pads = p.empty() ? 0 : long(p[i] + p[i + nsp]);
        if (stride <= 0 || k[i] <= 0) c.invalid("kernel_shape and strides must be positive");
        natural[i + 2] = (long(x.shape()[i + 2]) - 1) * stride + long(k[i]) - pads;
        if (natural[i + 2] <= 0)
            c.invalid(fmt::format("spatial dim {} would unpool to {} elements", i, natural[i + 2]));
    }
    std::vector<long> out = natural;
    if (c.has_input(2)) {
        auto given = c.ints_input(2);
        if (given.size() != rank) c.invalid("output_shape needs one value per dim");
        out.assign(given.begin(), given.end());
        for (size_t i = 0; i < rank; ++i)
            if (out[i] < natural[i])
                c.invalid(fmt::format("output_shape dim {} is {}, below the pooling's {}", i,
                                      out[i], natural[i]));
    }
    double elements = 1;
    for (long d : out) elements *= double(d);
    check_size(c, elements, "the unpooled output");
    long total = 1;
    for (long d : out) total *= d;
    SymbolVar zero = fill(c.graph(), TensorShape{size_t(total)}, 0, x.dtype());
    SymbolVar pos = TypeCvt::make(idx, dtype::Int32()).reshape({count(idx.shape())});
    if (out != natural) {
        // Coordinates in the natural shape, placed at the same coordinates of the output.
        SymbolVar rem = pos, moved = zeros_like(pos);
        long stride = 1;
        for (size_t d = rank; d-- > 0;) {
            moved = moved + mod(rem, scalar_like(rem, double(natural[d]))) * double(stride);
            rem = floor_div(rem, scalar_like(rem, double(natural[d])));
            stride *= out[d];
        }
        pos = moved;
    }
    return one(index_add(zero, pos, x.reshape({count(x.shape())}), 0).reshape(out));
}

SymbolVarArray bit_shift(const NodeCtx& c) {
    SymbolVar x = c.in(0), y = c.in(1);
    DType dt = x.dtype();
    if (dt != dtype::Uint8() && dt != dtype::Uint16() && dt != dtype::Uint32() &&
        dt != dtype::Uint64())
        c.invalid(fmt::format("dtype {} (BitShift takes unsigned integers)", dt.name()));
    // A shift by s is a product or a floor division by 2^s, in a type wide enough for the
    // product's low bits (uint64 wraps by itself); shifts of the bit width or more give 0.
    SymbolVar a = widen(x), s = widen(y);
    SymbolVar too_far = less_equal(scalar_like(s, double(8 * dt.size())), s);
    SymbolVar scale = pow(scalar_like(s, 2), where(too_far, scalar_like(s, 0), s));
    std::string dir = c.attr_string("direction", "");
    if (dir != "LEFT" && dir != "RIGHT") c.invalid("direction \"" + dir + "\"");
    SymbolVar shifted = dir == "LEFT" ? a * scale : floor_div(a, scale);
    return one(narrow(where(too_far, scalar_like(shifted, 0), shifted), dt));
}

SymbolVarArray non_zero(const NodeCtx& c) {
    return one(NonZero::make(c.in(0)));
}

//! The slices of x along an axis (of flattened x without one) where condition is true; a
//! condition shorter than the axis leaves out the slices past its end.
SymbolVarArray compress(const NodeCtx& c) {
    SymbolVar x = c.in(0), cond = c.in(1);
    int axis = 0;
    if (c.has_attr("axis"))
        axis = norm_axis(c, c.attr_int("axis", 0), rank_of(c, x));
    else
        x = x.reshape(std::vector<long>{-1});
    if (rank_of(c, cond) != 1) c.invalid("the condition is not 1-D");
    size_t dim = x.shape()[size_t(axis)];
    if (cond.shape()[0] > dim)
        c.invalid(
            fmt::format("the condition has {} elements, more than the {} slices along axis {}",
                        cond.shape()[0], dim, axis));
    SymbolVar ids =
        TypeCvt::make(NonZero::make(cond).reshape(std::vector<long>{-1}), dtype::Int32());
    return one(take(x, axis, ids));
}

SymbolVarArray non_max_suppression(const NodeCtx& c) {
    // Omitted optional inputs before a given one take ONNX's defaults: 0 boxes, IoU 0.
    size_t last = 1;
    for (size_t i = 2; i < 5; ++i)
        if (c.has_input(i)) last = i;
    SymbolVarArray ins{c.in(0), c.in(1)};
    for (size_t i = 2; i <= last; ++i)
        ins.push_back(c.has_input(i) ? c.in(i)
                      : i == 2       ? ImmutableTensor::make_scalar(c.graph(), 0, dtype::Int64())
                               : ImmutableTensor::make_scalar(c.graph(), 0, dtype::Float32()));
    NonMaxSuppression::Param p;
    p.center_point_box = c.attr_int("center_point_box", 0) != 0;
    return one(NonMaxSuppression::make(ins, p));
}

SymbolVarArray unique(const NodeCtx& c) {
    Unique::Param p;
    if (c.has_attr("axis")) p.axis = int(c.attr_int("axis", 0));
    p.sorted = c.attr_int("sorted", 1) != 0;
    return Unique::make(c.in(0), p);
}

//! TfIdfVectorizer over integer tokens: braid's NgramCount, then the mode's weighting.
SymbolVarArray tfidf_vectorizer(const NodeCtx& c) {
    if (c.has_attr("pool_strings"))
        c.unsupported("a pool of strings (braid has no string tensors)");
    NgramCount::Param p;
    p.min_gram_length = int(c.attr_int("min_gram_length", 1));
    p.max_gram_length = int(c.attr_int("max_gram_length", 1));
    p.max_skip_count = int(c.attr_int("max_skip_count", 0));
    auto longs = [&](const char* name) {
        auto v = c.attr_ints(name);
        return std::vector<long>(v.begin(), v.end());
    };
    p.pool = longs("pool_int64s");
    p.ngram_counts = longs("ngram_counts");
    p.ngram_indexes = longs("ngram_indexes");
    SymbolVar counts = NgramCount::make(c.in(0), p);
    std::string mode = c.attr_string("mode", "");
    if (mode != "TF" && mode != "IDF" && mode != "TFIDF") c.invalid("mode \"" + mode + "\"");
    if (mode == "TF") return one(counts);
    SymbolVar y = mode == "IDF"
                      ? TypeCvt::make(less(scalar_like(counts, 0), counts), dtype::Float32())
                      : counts;
    if (const auto* w = c.attr("weights"); w && w->floats_size() > 0) {
        size_t columns = counts.shape()[counts.shape().ndim() - 1];
        if (size_t(w->floats_size()) != columns)
            c.invalid(fmt::format("{} weights for {} output columns", w->floats_size(), columns));
        Tensor weights(TensorShape{columns}, dtype::Float32());
        std::copy(w->floats().begin(), w->floats().end(), weights.ptr<float>());
        y = y * ImmutableTensor::make(c.graph(), weights);
    }
    return one(y);
}

} // namespace

void add_index_converters(ConverterTable& t) {
    t["TfIdfVectorizer"] = tfidf_vectorizer;
    t["Unique"] = unique;
    t["NonZero"] = non_zero;
    t["Compress"] = compress;
    t["NonMaxSuppression"] = non_max_suppression;
    t["ScatterElements"] = scatter_elements;
    t["Scatter"] = scatter_elements;
    t["ScatterND"] = scatter_nd;
    t["GatherND"] = gather_nd;
    t["TopK"] = top_k;
    t["ReverseSequence"] = reverse_sequence;
    t["MaxUnpool"] = max_unpool;
    t["BitShift"] = bit_shift;
}

} // namespace braid::onnx_import
