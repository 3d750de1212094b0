#include "operators/indexing.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "operators/kernel_utils.h"

#include <cstring>

namespace braid::opr {

namespace {

void check_index_dtype(const OperatorNode& opr, VarNode* index, const char* role) {
    if (index->dtype() != dtype::Int32())
        BRAID_THROW(DTypeError, "{}: {} \"{}\" has dtype {}; expected int32", opr.describe(), role,
                    index->name(), index->dtype().name());
}

template <typename T>
void gather_elems(const T* x, const int32_t* idx, T* y, size_t outer, size_t n, size_t m,
                  size_t inner, const std::string& who, size_t axis) {
    parallel_range(outer * m, inner, [&](size_t b, size_t e) {
        for (size_t r = b; r < e; ++r) {
            size_t o = r / m;
            const int32_t* ir = idx + r * inner;
            T* yr = y + r * inner;
            const T* xo = x + o * n * inner;
            for (size_t i = 0; i < inner; ++i) {
                int32_t k = ir[i];
                if (k < 0 || size_t(k) >= n)
                    BRAID_THROW(ValueError,
                                "{}: index {} at position {} is out of range for axis {} of size "
                                "{} (valid: 0..{})",
                                who, k, r * inner + i, axis, n, long(n) - 1);
                yr[i] = xo[size_t(k) * inner + i];
            }
        }
    });
}

//! y[o, j, i] = x[o, idx[o, j, i], i] for o < outer, j < m, i < inner; x has n along the axis.
void gather_kernel(const Tensor& x, const Tensor& idx, Tensor& y, size_t outer, size_t n, size_t m,
                   size_t inner, const std::string& who, size_t axis) {
    const int32_t* ip = idx.ptr<int32_t>();
    switch (x.dtype().size()) {
    case 1:
        return gather_elems(x.ptr<uint8_t>(), ip, y.ptr<uint8_t>(), outer, n, m, inner, who, axis);
    case 2:
        return gather_elems(x.ptr<uint16_t>(), ip, y.ptr<uint16_t>(), outer, n, m, inner, who,
                            axis);
    case 4:
        return gather_elems(x.ptr<uint32_t>(), ip, y.ptr<uint32_t>(), outer, n, m, inner, who,
                            axis);
    default:
        return gather_elems(x.ptr<uint64_t>(), ip, y.ptr<uint64_t>(), outer, n, m, inner, who,
                            axis);
    }
}

} // namespace

// ---------------------------------------------------------------- Gather
Gather::Gather(VarNode* x, VarNode* index, int axis, const OperatorConfig& config)
    : ParamOperator({axis}, config) {
    add_input(x);
    add_input(index);
    add_output();
}

SymbolVar Gather::make(SymbolVar x, SymbolVar index, int axis, const OperatorConfig& config) {
    return x.graph()
        .insert_opr(std::make_unique<Gather>(x.node(), index.node(), axis, config))
        ->output(0);
}

void Gather::init_output_dtypes() {
    check_index_dtype(*this, input(1), "index");
    output(0)->set_dtype(input(0)->dtype());
}

bool Gather::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    const TensorShape &xs = *ctx.shape(0), &is = *ctx.shape(1);
    size_t axis = normalize_axis(m_param.axis, xs.ndim(), describe());
    bool ok = is.ndim() == xs.ndim();
    for (size_t d = 0; ok && d < xs.ndim(); ++d) ok = d == axis || is[d] == xs[d];
    if (!ok)
        BRAID_THROW(ShapeError,
                    "{}: index shape {} does not fit input shape {}: it needs the input's rank "
                    "and dims on every axis but {}",
                    describe(), is.to_string(), xs.to_string(), m_param.axis);
    if (xs[axis] == 0 && is[axis] != 0 && is.total_nr_elems() != 0)
        BRAID_THROW(ShapeError, "{}: cannot gather from the empty axis {} of {}", describe(),
                    m_param.axis, xs.to_string());
    out[0] = is;
    return true;
}

void Gather::execute(ExecCtx& ctx) {
    const Tensor &x = ctx.input(0), &idx = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    size_t axis = normalize_axis(m_param.axis, x.shape().ndim(), describe());
    AxisSplit xs = split_shape(x.shape(), axis, axis + 1);
    gather_kernel(x, idx, y, xs.outer, xs.n, idx.shape()[axis], xs.inner, describe(), axis);
}

SymbolVar gather(SymbolVar x, SymbolVar index, int axis) {
    return Gather::make(x, index, axis);
}

// ---------------------------------------------------------------- IndexingOneHot
IndexingOneHot::IndexingOneHot(VarNode* x, VarNode* index, int axis, bool keepdims,
                               const OperatorConfig& config)
    : ParamOperator({axis, keepdims}, config) {
    add_input(x);
    add_input(index);
    add_output();
}

SymbolVar IndexingOneHot::make(SymbolVar x, SymbolVar index, int axis, bool keepdims,
                               const OperatorConfig& config) {
    return x.graph()
        .insert_opr(
            std::make_unique<IndexingOneHot>(x.node(), index.node(), axis, keepdims, config))
        ->output(0);
}

void IndexingOneHot::init_output_dtypes() {
    check_index_dtype(*this, input(1), "index");
    output(0)->set_dtype(input(0)->dtype());
}

bool IndexingOneHot::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    const TensorShape &xs = *ctx.shape(0), &is = *ctx.shape(1);
    size_t axis = normalize_axis(m_param.axis, xs.ndim(), describe());
    std::vector<size_t> rest, kept;
    for (size_t d = 0; d < xs.ndim(); ++d) {
        if (d != axis) rest.push_back(xs[d]);
        kept.push_back(d == axis ? 1 : xs[d]);
    }
    TensorShape expected(rest);
    if (is != expected)
        BRAID_THROW(ShapeError, "{}: index shape {} does not fit input shape {}: expected {}",
                    describe(), is.to_string(), xs.to_string(), expected.to_string());
    if (xs[axis] == 0 && !expected.is_empty())
        BRAID_THROW(ShapeError, "{}: cannot index the empty axis {} of {}", describe(),
                    m_param.axis, xs.to_string());
    out[0] = m_param.keepdims ? TensorShape(kept) : expected;
    return true;
}

void IndexingOneHot::execute(ExecCtx& ctx) {
    const Tensor &x = ctx.input(0), &idx = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    size_t axis = normalize_axis(m_param.axis, x.shape().ndim(), describe());
    AxisSplit xs = split_shape(x.shape(), axis, axis + 1);
    gather_kernel(x, idx, y, xs.outer, xs.n, 1, xs.inner, describe(), axis);
}

SymbolVar indexing_one_hot(SymbolVar x, SymbolVar index, int axis, bool keepdims) {
    return IndexingOneHot::make(x, index, axis, keepdims);
}

// ---------------------------------------------------------------- Embedding
Embedding::Embedding(VarNode* table, VarNode* ids, const OperatorConfig& config)
    : OperatorNode(config) {
    add_input(table);
    add_input(ids);
    add_output();
}

SymbolVar Embedding::make(SymbolVar table, SymbolVar ids, const OperatorConfig& config) {
    return table.graph()
        .insert_opr(std::make_unique<Embedding>(table.node(), ids.node(), config))
        ->output(0);
}

void Embedding::init_output_dtypes() {
    check_index_dtype(*this, input(1), "ids");
    output(0)->set_dtype(input(0)->dtype());
}

bool Embedding::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0) || !ctx.shape(1)) return false;
    const TensorShape &ts = *ctx.shape(0), &is = *ctx.shape(1);
    if (ts.ndim() != 2)
        BRAID_THROW(ShapeError, "{}: the table has shape {}; expected 2 dims [rows, dim]",
                    describe(), ts.to_string());
    if (is.ndim() + 1 > TensorShape::MAX_NDIM)
        BRAID_THROW(ShapeError, "{}: ids of rank {} give an output of rank {} (maximum {})",
                    describe(), is.ndim(), is.ndim() + 1, TensorShape::MAX_NDIM);
    std::vector<size_t> dims = is.dims();
    dims.push_back(ts[1]);
    out[0] = TensorShape(dims);
    return true;
}

void Embedding::execute(ExecCtx& ctx) {
    const Tensor &table = ctx.input(0), &ids = ctx.input(1);
    Tensor& y = ctx.output(0);
    size_t rows = table.shape()[0];
    size_t row_bytes = table.shape()[1] * table.dtype().size();
    size_t n = ids.shape().total_nr_elems();
    const int32_t* ip = ids.ptr<int32_t>();
    const uint8_t* tp = table.raw_ptr();
    uint8_t* yp = y.raw_ptr();
    parallel_range(n, table.shape()[1], [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
            int32_t id = ip[i];
            if (id < 0 || size_t(id) >= rows)
                BRAID_THROW(ValueError,
                            "{}: id {} at position {} is out of range for a table of {} rows "
                            "(valid ids: 0..{})",
                            describe(), id, i, rows, long(rows) - 1);
            if (row_bytes) std::memcpy(yp + i * row_bytes, tp + size_t(id) * row_bytes, row_bytes);
        }
    });
}

SymbolVar embedding(SymbolVar table, SymbolVar ids) {
    return Embedding::make(table, ids);
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_indexing_kernels();
}
#endif

void register_indexing_operators() {
    auto& reg = OperatorRegistry::instance();
    // Loaded by make(), which checks the axis against the input's rank.
    reg.add("Gather", "indexing", dump_param<Gather>, load_param<Gather>);
    reg.add("IndexingOneHot", "indexing", dump_param<IndexingOneHot>, load_param<IndexingOneHot>);
    reg.add("Embedding", "indexing", no_params, load_param<Embedding>);
    register_grad_rule("Gather", Gather::grad_rule);
    register_grad_rule("IndexingOneHot", IndexingOneHot::grad_rule);
    register_grad_rule("Embedding", Embedding::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_indexing_kernels(); // operators/cuda/indexing.cpp
#endif
}

} // namespace braid::opr
