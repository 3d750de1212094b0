#include "operators/tensor_manip.h"

#include "base/error.h"
#include "base/hash.h"

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

std::string dims_string(const std::vector<long>& d) {
    std::string s = "{";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s + "}";
}

TensorShape resolve_reshape(const TensorShape& in, const std::vector<long>& target,
                            const std::string& who) {
    size_t known = 1;
    int unknown_at = -1;
    for (size_t i = 0; i < target.size(); ++i) {
        if (target[i] == -1) {
            if (unknown_at >= 0)
                BRAID_THROW(ShapeError, "{}: target {} has more than one -1", who,
                            dims_string(target));
            unknown_at = int(i);
        } else if (target[i] < 0) {
            BRAID_THROW(ShapeError, "{}: target {} has a negative dim", who, dims_string(target));
        } else {
            known *= size_t(target[i]);
        }
    }
    TensorShape res;
    res.set_ndim(target.size());
    for (size_t i = 0; i < target.size(); ++i) res[i] = target[i] < 0 ? 0 : size_t(target[i]);
    size_t total = in.total_nr_elems();
    if (unknown_at >= 0) {
        if (known == 0 || total % known != 0)
            BRAID_THROW(ShapeError, "{}: cannot reshape {} ({} elements) to {}", who,
                        in.to_string(), total, dims_string(target));
        res[size_t(unknown_at)] = total / known;
    } else if (known != total) {
        BRAID_THROW(ShapeError, "{}: cannot reshape {} ({} elements) to {} ({} elements)", who,
                    in.to_string(), total, dims_string(target), known);
    }
    return res;
}

} // namespace

// ---------------------------------------------------------------- Reshape
Reshape::Reshape(VarNode* x, VarNode* shape_var, std::vector<long> target,
                 const OperatorConfig& config)
    : OperatorNode(config), m_target(std::move(target)) {
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

void Reshape::hash_params(Hasher& h) const {
    for (long d : m_target) h.add_pod(d);
}

bool Reshape::params_equal(const OperatorNode& rhs) const {
    return static_cast<const Reshape&>(rhs).m_target == m_target;
}

std::string Reshape::param_string() const {
    return inputs().size() > 1 ? std::string() : dims_string(m_target);
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
        out[0] = resolve_reshape(*ctx.shape(0), m_target, describe());
    }
    return true;
}

void Reshape::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    TensorShape shape =
        ctx.nr_inputs() > 1
            ? resolve_reshape(x.shape(), shape_value_to_dims(ctx.input(1), describe()), describe())
            : resolve_reshape(x.shape(), m_target, describe());
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
    : OperatorNode(config), m_target(target), m_from_var(shape_var != nullptr) {
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

void Broadcast::hash_params(Hasher& h) const {
    for (size_t d : m_target.dims()) h.add_pod(d);
    h.add_pod(m_from_var);
}

bool Broadcast::params_equal(const OperatorNode& rhs) const {
    auto& o = static_cast<const Broadcast&>(rhs);
    return o.m_target == m_target && o.m_from_var == m_from_var;
}

void Broadcast::init_output_dtypes() {
    output(0)->set_dtype(input(0)->dtype());
}

bool Broadcast::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    TensorShape target = m_target;
    if (m_from_var) {
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
    : OperatorNode(config), m_dtype(dtype) {
    add_input(x);
    add_output();
}

SymbolVar TypeCvt::make(SymbolVar x, DType dtype, const OperatorConfig& config) {
    return x.graph().insert_opr(std::make_unique<TypeCvt>(x.node(), dtype, config))->output(0);
}

void TypeCvt::hash_params(Hasher& h) const {
    h.add_pod(m_dtype.enumv());
}

bool TypeCvt::params_equal(const OperatorNode& rhs) const {
    return static_cast<const TypeCvt&>(rhs).m_dtype == m_dtype;
}

void TypeCvt::init_output_dtypes() {
    if (!m_dtype.valid()) BRAID_THROW(DTypeError, "{}: target dtype is invalid", describe());
    output(0)->set_dtype(m_dtype);
}

bool TypeCvt::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    if (!ctx.shape(0)) return false;
    out[0] = *ctx.shape(0);
    return true;
}

void TypeCvt::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    convert_elements(x.dtype(), x.raw_ptr(), m_dtype, ctx.output(0).raw_ptr(),
                     x.shape().total_nr_elems());
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

// ---- serialization: params dump and load, registered in register_all_operators()
#include "serialization/params.h"

namespace braid::opr {

void dump_reshape(const OperatorNode& opr, ParamWriter& w) {
    auto& r = opr_cast<Reshape>(opr);
    if (r.inputs().size() == 1) w.write_int_list("target", r.target()); // else from input 1
}

SymbolVarArray load_reshape(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 2);
    if (ctx.inputs.size() == 2) return {Reshape::make(ctx.input(0), ctx.input(1), ctx.config)};
    return {Reshape::make(ctx.input(0), ctx.params.read_int_list<long>("target"), ctx.config)};
}

void dump_get_var_shape(const OperatorNode&, ParamWriter&) {}

SymbolVarArray load_get_var_shape(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 1);
    return {GetVarShape::make(ctx.input(0), ctx.config)};
}

void dump_broadcast(const OperatorNode& opr, ParamWriter& w) {
    auto& b = opr_cast<Broadcast>(opr);
    if (b.inputs().size() == 1) w.write_shape("target", b.target()); // else from input 1
}

SymbolVarArray load_broadcast(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 2);
    if (ctx.inputs.size() == 2) return {Broadcast::make(ctx.input(0), ctx.input(1), ctx.config)};
    return {Broadcast::make(ctx.input(0), ctx.params.read_shape("target"), ctx.config)};
}

void dump_type_cvt(const OperatorNode& opr, ParamWriter& w) {
    w.write_dtype("dtype", opr_cast<TypeCvt>(opr).target_dtype());
}

SymbolVarArray load_type_cvt(const OprLoadContext& ctx) {
    ctx.expect_inputs(1, 1);
    return {TypeCvt::make(ctx.input(0), ctx.params.read_dtype("dtype"), ctx.config)};
}

} // namespace braid::opr
