#include "operators/subtensor.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "operators/kernel_utils.h"

namespace braid::opr {

namespace {

void hash_items(Hasher& h, const std::vector<AxisIndex>& items) {
    for (auto& it : items) {
        h.add_pod(it.axis).add_pod(it.step).add_pod(it.is_index);
        h.add_pod(it.start.has_value()).add_pod(it.start.value_or(0));
        h.add_pod(it.stop.has_value()).add_pod(it.stop.value_or(0));
    }
}

std::string items_string(const std::vector<AxisIndex>& items) {
    std::string s;
    for (auto& it : items) {
        if (!s.empty()) s += ", ";
        s += fmt::format("axis {}: ", it.axis);
        if (it.is_index) {
            s += std::to_string(it.start.value_or(0));
            continue;
        }
        if (it.start) s += std::to_string(*it.start);
        s += ":";
        if (it.stop) s += std::to_string(*it.stop);
        if (it.step != 1) s += ":" + std::to_string(it.step);
    }
    return s;
}

//! The layout of x[items] as a view of `x`, and in `offset` the element offset of its first
//! element from x's. Throws ShapeError naming `who` for bad items.
TensorLayout slice_layout(const TensorLayout& x, const std::vector<AxisIndex>& items,
                          const std::string& who, ptrdiff_t& offset) {
    size_t nd = x.ndim();
    std::vector<int> item_of(nd, -1);
    for (size_t k = 0; k < items.size(); ++k) {
        size_t a = normalize_axis(items[k].axis, nd, who);
        if (item_of[a] >= 0)
            BRAID_THROW(ShapeError, "{}: axis {} is indexed twice (items {} and {})", who,
                        items[k].axis, item_of[a], k);
        if (items[k].step == 0)
            BRAID_THROW(ShapeError, "{}: slice step 0 on axis {}; the step must be nonzero", who,
                        items[k].axis);
        item_of[a] = int(k);
    }
    TensorLayout res;
    res.dtype = x.dtype;
    size_t out_nd = 0;
    offset = 0;
    size_t dims[TensorShape::MAX_NDIM];
    ptrdiff_t strides[TensorShape::MAX_NDIM];
    for (size_t d = 0; d < nd; ++d) {
        long n = long(x[d]);
        ptrdiff_t stride = x.stride[d];
        if (item_of[d] < 0) {
            dims[out_nd] = x[d];
            strides[out_nd++] = stride;
            continue;
        }
        const AxisIndex& it = items[size_t(item_of[d])];
        if (it.is_index) {
            long i = it.start.value_or(0);
            long v = i < 0 ? i + n : i;
            if (v < 0 || v >= n)
                BRAID_THROW(ShapeError, "{}: index {} out of range for axis {} of size {} in {}",
                            who, i, d, n, x.TensorShape::to_string());
            offset += v * stride;
            continue;
        }
        long step = it.step, start, stop, len;
        if (step > 0) {
            start = !it.start       ? 0
                    : *it.start < 0 ? std::max(*it.start + n, 0L)
                                    : std::min(*it.start, n);
            stop = !it.stop ? n : *it.stop < 0 ? std::max(*it.stop + n, 0L) : std::min(*it.stop, n);
            len = stop > start ? (stop - start - 1) / step + 1 : 0;
        } else {
            start = !it.start       ? n - 1
                    : *it.start < 0 ? std::max(*it.start + n, -1L)
                                    : std::min(*it.start, n - 1);
            stop = !it.stop       ? -1
                   : *it.stop < 0 ? std::max(*it.stop + n, -1L)
                                  : std::min(*it.stop, n - 1);
            // |step| in unsigned arithmetic: negating the most negative step would overflow.
            uint64_t mag = uint64_t(0) - uint64_t(step);
            len = start > stop ? long(uint64_t(start - stop - 1) / mag) + 1 : 0;
        }
        if (len > 0) offset += start * stride;
        dims[out_nd] = size_t(len);
        // With at most one element the stride is never used; a step longer than the axis
        // (any long is a valid step) must not overflow it.
        strides[out_nd++] = len > 1 ? stride * step : stride;
    }
    res.set_ndim(out_nd);
    for (size_t i = 0; i < out_nd; ++i) {
        res[i] = dims[i];
        res.stride[i] = strides[i];
    }
    return res;
}

Tensor slice_view(const Tensor& x, const std::vector<AxisIndex>& items, const std::string& who) {
    ptrdiff_t offset;
    TensorLayout l = slice_layout(x.layout(), items, who, offset);
    if (l.is_empty()) offset = 0;
    return x.view(l, size_t(offset * ptrdiff_t(x.dtype().size())));
}

template <typename T>
void add_rows(uint8_t* d, const uint8_t* s, const TensorLayout& dl, const TensorLayout& sl) {
    T* dp = reinterpret_cast<T*>(d);
    const T* sp = reinterpret_cast<const T*>(s);
    for_each_row_pair(dl, sl,
                      [&](ptrdiff_t doff, ptrdiff_t dst, ptrdiff_t soff, ptrdiff_t sst, size_t n) {
                          T* dr = dp + doff;
                          const T* sr = sp + soff;
                          if (dst == 1 && sst == 1)
                              for (size_t i = 0; i < n; ++i) dr[i] += sr[i];
                          else
                              for (size_t i = 0; i < n; ++i)
                                  dr[ptrdiff_t(i) * dst] += sr[ptrdiff_t(i) * sst];
                      });
}

//! dst += src elementwise for two views of one shape.
void add_into(Tensor& dst, const Tensor& src) {
    switch (dst.dtype().enumv()) {
    case DTypeEnum::FLOAT32:
        return add_rows<float>(dst.raw_ptr(), src.raw_ptr(), dst.layout(), src.layout());
    case DTypeEnum::FLOAT64:
        return add_rows<double>(dst.raw_ptr(), src.raw_ptr(), dst.layout(), src.layout());
    case DTypeEnum::INT32:
        return add_rows<int32_t>(dst.raw_ptr(), src.raw_ptr(), dst.layout(), src.layout());
    case DTypeEnum::INT64:
        return add_rows<int64_t>(dst.raw_ptr(), src.raw_ptr(), dst.layout(), src.layout());
    default: {
        // float16 / bfloat16: add in float32, round once on store.
        DType dt = dst.dtype();
        BRAID_ASSERT(dt == dtype::Float16() || dt == dtype::BFloat16(), "add_into on {}",
                     dt.name());
        for_each_row_pair(
            dst.layout(), src.layout(),
            [&](ptrdiff_t doff, ptrdiff_t dst_step, ptrdiff_t soff, ptrdiff_t src_step, size_t n) {
                for (size_t i = 0; i < n; ++i) {
                    ptrdiff_t di = doff + ptrdiff_t(i) * dst_step,
                              si = soff + ptrdiff_t(i) * src_step;
                    uint8_t* dp = dst.raw_ptr() + di * 2;
                    const uint8_t* sp = src.raw_ptr() + si * 2;
                    float v = float(load_as_double(dt, dp, 0)) + float(load_as_double(dt, sp, 0));
                    store_from_double(dt, dp, 0, v);
                }
            });
    }
    }
}

} // namespace

// ---------------------------------------------------------------- Subtensor
Subtensor::Subtensor(VarNode* x, std::vector<AxisIndex> items, const OperatorConfig& config)
    : OperatorNode(config), m_items(std::move(items)) {
    add_input(x);
    add_output();
}

SymbolVar Subtensor::make(SymbolVar x, std::vector<AxisIndex> items, const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<Subtensor>(x.node(), std::move(items), config))
        ->output(0);
}

void Subtensor::hash_params(Hasher& h) const {
    hash_items(h, m_items);
}

bool Subtensor::params_equal(const OperatorNode& rhs) const {
    return static_cast<const Subtensor&>(rhs).m_items == m_items;
}

std::string Subtensor::param_string() const {
    return items_string(m_items);
}

bool Subtensor::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    ptrdiff_t offset;
    out[0] =
        slice_layout(TensorLayout(*ctx.shape(0), input(0)->dtype()), m_items, describe(), offset);
    return true;
}

void Subtensor::execute(ExecCtx& ctx) {
    ctx.output(0) = slice_view(ctx.input(0), m_items, describe());
}

SymbolVar subtensor(SymbolVar x, std::vector<AxisIndex> items) {
    return Subtensor::make(x, std::move(items));
}

Tensor subtensor_view(const Tensor& x, const std::vector<AxisIndex>& items,
                      const std::string& who) {
    return slice_view(x, items, who);
}

// ---------------------------------------------------------------- SetSubtensor
SetSubtensor::SetSubtensor(VarNode* x, VarNode* value, Kind kind, std::vector<AxisIndex> items,
                           const OperatorConfig& config)
    : OperatorNode(config), m_kind(kind), m_items(std::move(items)) {
    add_input(x);
    add_input(value);
    add_output();
}

SymbolVar SetSubtensor::make(SymbolVar x, SymbolVar value, Kind kind, std::vector<AxisIndex> items,
                             const OperatorConfig& config) {
    return x.graph()
        .insert_opr(
            std::make_unique<SetSubtensor>(x.node(), value.node(), kind, std::move(items), config))
        ->output(0);
}

void SetSubtensor::hash_params(Hasher& h) const {
    h.add_pod(m_kind);
    hash_items(h, m_items);
}

bool SetSubtensor::params_equal(const OperatorNode& rhs) const {
    auto& o = static_cast<const SetSubtensor&>(rhs);
    return o.m_kind == m_kind && o.m_items == m_items;
}

std::string SetSubtensor::param_string() const {
    return items_string(m_items);
}

void SetSubtensor::init_output_dtypes() {
    DType dt = input(0)->dtype();
    if (input(1)->dtype() != dt)
        BRAID_THROW(DTypeError, "{}: value \"{}\" has dtype {}; expected {} like \"{}\"",
                    describe(), input(1)->name(), input(1)->dtype().name(), dt.name(),
                    input(0)->name());
    if (m_kind == Kind::INCR && !dt.is_float() && dt != dtype::Int32() && dt != dtype::Int64())
        BRAID_THROW(DTypeError, "{}: input \"{}\" has dtype {}; incrementing takes {}", describe(),
                    input(0)->name(), dt.name(),
                    dtype_list({dtype::Float32(), dtype::Float16(), dtype::BFloat16(),
                                dtype::Float64(), dtype::Int32(), dtype::Int64()}));
    output(0)->set_dtype(dt);
}

bool SetSubtensor::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    ptrdiff_t offset;
    TensorShape slice =
        slice_layout(TensorLayout(*ctx.shape(0), input(0)->dtype()), m_items, describe(), offset);
    const TensorShape* shapes[] = {&slice, ctx.shape(1)};
    TensorShape res;
    if (!broadcast_shapes(shapes, 2, res) || res != slice)
        BRAID_THROW(ShapeError, "{}: value shape {} does not broadcast to the slice shape {} of {}",
                    describe(), ctx.shape(1)->to_string(), slice.to_string(),
                    ctx.shape(0)->to_string());
    out[0] = *ctx.shape(0);
    return true;
}

void SetSubtensor::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    const Tensor& value = ctx.input(1);
    Tensor& out = ctx.output(0);
    if (out.raw_ptr() != x.raw_ptr()) parallel_copy(out, x);
    Tensor slice = slice_view(out, m_items, describe());
    if (slice.shape().is_empty()) return;
    Tensor v = value.view(value.layout().broadcast(slice.shape()));
    if (m_kind == Kind::SET)
        parallel_copy(slice, v);
    else
        add_into(slice, v);
}

SymbolVar set_subtensor(SymbolVar x, SymbolVar value, std::vector<AxisIndex> items) {
    return SetSubtensor::make(x, value, SetSubtensor::Kind::SET, std::move(items));
}

SymbolVar incr_subtensor(SymbolVar x, SymbolVar value, std::vector<AxisIndex> items) {
    return SetSubtensor::make(x, value, SetSubtensor::Kind::INCR, std::move(items));
}

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

namespace {

// The items are stored as parallel lists, one entry per item: "axis", "start", "stop", "step",
// "has_start", "has_stop" and "is_index" (0 or 1). An omitted bound is stored as 0 with its
// has_ flag 0; an index is stored in "start".

static void dump_items(const std::vector<AxisIndex>& items, ParamWriter& w) {
    std::vector<int64_t> axis, start, stop, step, has_start, has_stop, is_index;
    for (auto& it : items) {
        axis.push_back(it.axis);
        start.push_back(it.start.value_or(0));
        stop.push_back(it.stop.value_or(0));
        step.push_back(it.step);
        has_start.push_back(it.start.has_value());
        has_stop.push_back(it.stop.has_value());
        is_index.push_back(it.is_index);
    }
    w.write_ints("axis", axis);
    w.write_ints("start", start);
    w.write_ints("stop", stop);
    w.write_ints("step", step);
    w.write_ints("has_start", has_start);
    w.write_ints("has_stop", has_stop);
    w.write_ints("is_index", is_index);
}

std::vector<AxisIndex> load_items(const ParamReader& r) {
    auto axis = r.read_int_list<int>("axis");
    auto start = r.read_int_list<long>("start");
    auto stop = r.read_int_list<long>("stop");
    auto step = r.read_int_list<long>("step");
    auto has_start = r.read_ints("has_start");
    auto has_stop = r.read_ints("has_stop");
    auto is_index = r.read_ints("is_index");
    size_t n = axis.size();
    if (n > TensorShape::MAX_NDIM)
        BRAID_THROW(SerializationError,
                    "{}: {} indexing items; each indexes another axis, so at most {}", r.context(),
                    n, TensorShape::MAX_NDIM);
    const std::pair<const char*, size_t> lengths[] = {
        {"start", start.size()},       {"stop", stop.size()},
        {"step", step.size()},         {"has_start", has_start.size()},
        {"has_stop", has_stop.size()}, {"is_index", is_index.size()}};
    for (auto& [name, len] : lengths)
        if (len != n)
            BRAID_THROW(SerializationError,
                        "{}: param \"{}\" has {} entries, param \"axis\" has {} (one per item)",
                        r.context(), name, len, n);
    auto flag = [&](const char* name, int64_t v, size_t k) {
        if (v != 0 && v != 1)
            BRAID_THROW(SerializationError,
                        "{}: param \"{}\" holds {} for item {}; expected 0 or 1", r.context(), name,
                        v, k);
        return v == 1;
    };
    std::vector<AxisIndex> items;
    for (size_t k = 0; k < n; ++k) {
        AxisIndex it;
        it.axis = axis[k];
        if (flag("has_start", has_start[k], k)) it.start = start[k];
        if (flag("has_stop", has_stop[k], k)) it.stop = stop[k];
        it.step = step[k];
        it.is_index = flag("is_index", is_index[k], k);
        if (it.is_index && !it.start)
            BRAID_THROW(SerializationError,
                        "{}: item {} is an index, which needs a start (the index itself)",
                        r.context(), k);
        if (it.step == 0)
            BRAID_THROW(SerializationError, "{}: item {} has step 0; the step must be nonzero",
                        r.context(), k);
        items.push_back(it);
    }
    // make() checks the axes against the input's rank and that none is indexed twice.
    return items;
}

} // namespace

static void dump_subtensor(const OperatorNode& opr, ParamWriter& w) {
    dump_items(opr_cast<Subtensor>(opr).items(), w);
}

static SymbolVarArray load_subtensor(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 1);
    return {Subtensor::make(ctx.input(0), load_items(ctx.params), ctx.config)};
}

static void dump_set_subtensor(const OperatorNode& opr, ParamWriter& w) {
    dump_items(opr_cast<SetSubtensor>(opr).items(), w);
}

static SymbolVarArray load_set_subtensor(const OprLoadContext& ctx) {
    ctx.expect_inputs(2, 2);
    return {SetSubtensor::make(ctx.input(0), ctx.input(1), SetSubtensor::Kind::SET,
                               load_items(ctx.params), ctx.config)};
}

static void dump_incr_subtensor(const OperatorNode& opr, ParamWriter& w) {
    dump_items(opr_cast<SetSubtensor>(opr).items(), w);
}

static SymbolVarArray load_incr_subtensor(const OprLoadContext& ctx) {
    ctx.expect_inputs(2, 2);
    return {SetSubtensor::make(ctx.input(0), ctx.input(1), SetSubtensor::Kind::INCR,
                               load_items(ctx.params), ctx.config)};
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_subtensor_kernels();
}
#endif

void register_subtensor_operators() {
    auto& reg = OperatorRegistry::instance();
    reg.add("Subtensor", "subtensor", dump_subtensor, load_subtensor);
    reg.add("SetSubtensor", "subtensor", dump_set_subtensor, load_set_subtensor);
    reg.add("IncrSubtensor", "subtensor", dump_incr_subtensor, load_incr_subtensor);
    register_grad_rule("Subtensor", Subtensor::grad_rule);
    register_grad_rule("SetSubtensor", SetSubtensor::grad_rule);
    register_grad_rule("IncrSubtensor", SetSubtensor::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_subtensor_kernels(); // operators/cuda/subtensor.cpp
#endif
}

} // namespace braid::opr
