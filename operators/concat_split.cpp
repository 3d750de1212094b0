#include "operators/concat_split.h"
#include "graph/operator_registry.h"
#include "operators/grad_util.h"

#include "base/error.h"
#include "base/hash.h"
#include "operators/kernel_utils.h"

#include <array>
#include <cstring>
#include <limits>

namespace braid::opr {

// ---------------------------------------------------------------- Concat
Concat::Concat(const VarNodeArray& inputs, int axis, const OperatorConfig& config)
    : ParamOperator({axis}, config) {
    if (inputs.empty()) BRAID_THROW(GraphError, "Concat: needs at least one input, got none");
    for (auto* in : inputs) add_input(in);
    add_output();
}

SymbolVar Concat::make(const SymbolVarArray& inputs, int axis, const OperatorConfig& config) {
    if (inputs.empty() || !inputs[0].valid())
        BRAID_THROW(GraphError, "Concat: needs at least one valid input var");
    VarNodeArray in;
    for (auto& v : inputs) in.push_back(v.node());
    return inputs[0].graph().insert_opr(std::make_unique<Concat>(in, axis, config))->output(0);
}

void Concat::init_output_dtypes() {
    DType dt = input(0)->dtype();
    for (auto* in : inputs())
        if (in->dtype() != dt)
            BRAID_THROW(DTypeError, "{}: inputs have different dtypes: \"{}\" is {}, \"{}\" is {}",
                        describe(), input(0)->name(), dt.name(), in->name(), in->dtype().name());
    output(0)->set_dtype(dt);
}

bool Concat::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    for (size_t i = 0; i < ctx.nr_inputs(); ++i)
        if (!ctx.shape(i)) return false;
    const TensorShape& first = *ctx.shape(0);
    size_t axis = normalize_axis(m_param.axis, first.ndim(), describe());
    TensorShape res = first;
    res[axis] = 0;
    for (size_t i = 0; i < ctx.nr_inputs(); ++i) {
        const TensorShape& s = *ctx.shape(i);
        bool ok = s.ndim() == first.ndim();
        for (size_t d = 0; ok && d < s.ndim(); ++d) ok = d == axis || s[d] == first[d];
        if (!ok)
            BRAID_THROW(ShapeError,
                        "{}: input {} \"{}\" has shape {} but input 0 \"{}\" has {}; every dim "
                        "but axis {} must match",
                        describe(), i, input(i)->name(), s.to_string(), input(0)->name(),
                        first.to_string(), m_param.axis);
        res[axis] += s[axis];
    }
    out[0] = res;
    return true;
}

void Concat::execute(ExecCtx& ctx) {
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    size_t axis = normalize_axis(m_param.axis, y.shape().ndim(), describe());
    AxisSplit ys = split_shape(y.shape(), axis, axis + 1);
    size_t es = y.dtype().size();
    size_t nin = ctx.nr_inputs();
    // Block (o, k): input k's slab for outer index o, at its offset in the output row.
    std::vector<size_t> row_bytes(nin), out_off(nin);
    size_t off = 0;
    for (size_t k = 0; k < nin; ++k) {
        row_bytes[k] = ctx.input(k).shape()[axis] * ys.inner * es;
        out_off[k] = off;
        off += row_bytes[k];
    }
    size_t out_row = off;
    uint8_t* yp = y.raw_ptr();
    auto copy_block = [&](size_t o, size_t k, size_t b0, size_t b1) {
        std::memcpy(yp + o * out_row + out_off[k] + b0,
                    ctx.input(k).raw_ptr() + o * row_bytes[k] + b0, b1 - b0);
    };
    if (ys.outer >= 2 * kernel_threads() || y.nr_bytes() < PARALLEL_MIN_ELEMS * 4) {
        parallel_range(ys.outer, out_row / 4, [&](size_t b, size_t e) {
            for (size_t o = b; o < e; ++o)
                for (size_t k = 0; k < nin; ++k)
                    if (row_bytes[k]) copy_block(o, k, 0, row_bytes[k]);
        });
        return;
    }
    // Few large slabs: cut every slab into 64 KiB pieces.
    constexpr size_t PIECE = 1 << 16;
    std::vector<std::array<size_t, 3>> pieces; // (o, k, byte offset)
    for (size_t o = 0; o < ys.outer; ++o)
        for (size_t k = 0; k < nin; ++k)
            for (size_t b = 0; b < row_bytes[k]; b += PIECE) pieces.push_back({o, k, b});
    parallel_range(pieces.size(), PIECE / 4, [&](size_t b, size_t e) {
        for (size_t p = b; p < e; ++p) {
            auto [o, k, b0] = pieces[p];
            copy_block(o, k, b0, std::min(row_bytes[k], b0 + PIECE));
        }
    });
}

SymbolVar concat(const SymbolVarArray& inputs, int axis) {
    return Concat::make(inputs, axis);
}

// ---------------------------------------------------------------- Split
Split::Split(VarNode* x, Param param, const OperatorConfig& config)
    : ParamOperator(std::move(param), config) {
    size_t parts = m_param.sizes.empty() ? m_param.nr_parts : m_param.sizes.size();
    if (parts == 0)
        BRAID_THROW(GraphError, "Split: needs part sizes or a positive number of parts");
    add_input(x);
    for (size_t i = 0; i < parts; ++i) add_output(std::to_string(i));
}

SymbolVarArray Split::make(SymbolVar x, Param param, const OperatorConfig& config) {
    auto* opr = x.graph().insert_opr(std::make_unique<Split>(x.node(), std::move(param), config));
    SymbolVarArray res;
    for (auto* out : opr->outputs()) res.push_back(out);
    return res;
}

std::vector<size_t> Split::part_sizes(const TensorShape& shape, size_t axis) const {
    size_t len = shape[axis];
    if (m_param.sizes.empty()) {
        if (len % m_param.nr_parts)
            BRAID_THROW(ShapeError, "{}: axis {} of {} has length {}, not divisible into {} parts",
                        describe(), m_param.axis, shape.to_string(), len, m_param.nr_parts);
        return std::vector<size_t>(m_param.nr_parts, len / m_param.nr_parts);
    }
    size_t sum = 0;
    for (size_t s : m_param.sizes) sum += s;
    if (sum != len)
        BRAID_THROW(ShapeError, "{}: sizes sum to {} but axis {} of {} has length {}", describe(),
                    sum, m_param.axis, shape.to_string(), len);
    return m_param.sizes;
}

bool Split::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    const TensorShape& xs = *ctx.shape(0);
    size_t axis = normalize_axis(m_param.axis, xs.ndim(), describe());
    auto sizes = part_sizes(xs, axis);
    for (size_t k = 0; k < sizes.size(); ++k) {
        out[k] = xs;
        out[k][axis] = sizes[k];
    }
    return true;
}

void Split::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    size_t axis = normalize_axis(m_param.axis, x.shape().ndim(), describe());
    auto sizes = part_sizes(x.shape(), axis);
    ptrdiff_t step = x.layout().stride[axis] * ptrdiff_t(x.dtype().size());
    size_t start = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
        TensorLayout l = x.layout();
        l[axis] = sizes[k];
        ctx.output(k) = x.view(l, sizes[k] && !l.is_empty() ? size_t(ptrdiff_t(start) * step) : 0);
        start += sizes[k];
    }
}

SymbolVarArray split(SymbolVar x, int axis, std::vector<size_t> sizes) {
    return Split::make(x, {axis, std::move(sizes), 0});
}

SymbolVarArray split(SymbolVar x, int axis, size_t nr_parts) {
    return Split::make(x, {axis, {}, nr_parts});
}

} // namespace braid::opr

// ---- serialization: the params functions written by hand, registered below
#include "graph/param_io.h"

namespace braid::opr {

static SymbolVarArray load_split(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 1);
    const auto& r = ctx.params;
    auto p = read_param<Split::Param>(r);
    // Every part is an output var: bound their number, so that a few bytes of params cannot
    // ask for billions of vars.
    if (p.nr_parts > MAX_LOADED_SPLIT_PARTS)
        BRAID_THROW(SerializationError, "{}: param \"nr_parts\" is {}; expected 0..{}", r.context(),
                    p.nr_parts, MAX_LOADED_SPLIT_PARTS);
    if (p.sizes.size() > MAX_LOADED_SPLIT_PARTS)
        BRAID_THROW(SerializationError, "{}: param \"sizes\" lists {} parts; at most {}",
                    r.context(), p.sizes.size(), MAX_LOADED_SPLIT_PARTS);
    if (p.sizes.empty() && p.nr_parts == 0)
        BRAID_THROW(SerializationError,
                    "{}: param \"sizes\" is empty and param \"nr_parts\" is 0; expected part "
                    "sizes or a positive number of parts",
                    r.context());
    // The sizes must sum to the axis length, which make() checks.
    return Split::make(ctx.input(0), std::move(p), ctx.config);
}

} // namespace braid::opr

// ---- registration: this family's operator descriptors (graph/operator_registry.h): params
// functions, gradient rules and kernels.
namespace braid::opr {

#if BRAID_WITH_CUDA
namespace cuda {
void register_concat_split_kernels();
}
#endif

void register_concat_split_operators() {
    auto& reg = OperatorRegistry::instance();
    // Loaded by make(), which checks the axis and the inputs' shapes.
    reg.add("Concat", "concat_split", dump_param<Concat>, load_param<Concat>);
    reg.add("Split", "concat_split", dump_param<Split>, load_split);
    register_grad_rule("Concat", Concat::grad_rule);
    register_grad_rule("Split", Split::grad_rule);
#if BRAID_WITH_CUDA
    cuda::register_concat_split_kernels(); // operators/cuda/concat_split.cpp
#endif
}

} // namespace braid::opr
