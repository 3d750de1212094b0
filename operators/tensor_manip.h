// Shape manipulation: Reshape (a view), GetVarShape (a shape as a value), Broadcast, TypeCvt.
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! Reshape to a target given as params (one dim may be -1) or as the value of an int32
//! shape var (input 1). Read-only view of the input when it is contiguous.
class Reshape final : public OperatorNode {
public:
    Reshape(VarNode* x, VarNode* shape_var, std::vector<long> target, const OperatorConfig& config);
    static SymbolVar make(SymbolVar x, const std::vector<long>& target,
                          const OperatorConfig& config = {});
    static SymbolVar make(SymbolVar x, SymbolVar shape_var, const OperatorConfig& config = {});

    const char* type_name() const override { return "Reshape"; }
    void hash_params(Hasher& h) const override;
    bool params_equal(const OperatorNode& rhs) const override;
    std::string param_string() const override;
    void init_output_dtypes() override;
    bool shape_needs_value(size_t i) const override { return i == 1; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    OutputMem output_mem(size_t) const override { return OutputMem::READONLY_FORWARD; }
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;
    const std::vector<long>& target() const { return m_target; }

private:
    std::vector<long> m_target; //!< empty when the target comes from input 1
};

//! The shape of its input as a 1-D int32 tensor; known statically whenever the shape is.
class GetVarShape final : public OperatorNode {
public:
    GetVarShape(VarNode* x, const OperatorConfig& config);
    static SymbolVar make(SymbolVar x, const OperatorConfig& config = {});

    const char* type_name() const override { return "GetVarShape"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    ValueInference value_inference() const override { return ValueInference::FROM_SHAPES; }
    void infer_value(const InferCtx& ctx, Tensor* out) const override;
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;
};

//! Numpy broadcast of the input to a target shape (params, or the value of input 1).
class Broadcast final : public OperatorNode {
public:
    Broadcast(VarNode* x, VarNode* shape_var, const TensorShape& target,
              const OperatorConfig& config);
    static SymbolVar make(SymbolVar x, const TensorShape& target,
                          const OperatorConfig& config = {});
    static SymbolVar make(SymbolVar x, SymbolVar shape_var, const OperatorConfig& config = {});

    const char* type_name() const override { return "Broadcast"; }
    void hash_params(Hasher& h) const override;
    bool params_equal(const OperatorNode& rhs) const override;
    void init_output_dtypes() override;
    bool shape_needs_value(size_t i) const override { return i == 1; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override;
    const TensorShape& target() const { return m_target; }

private:
    TensorShape m_target;
    bool m_from_var;
};

//! Element type conversion (float16/bfloat16 round to nearest even; float to int truncates).
class TypeCvt final : public OperatorNode {
public:
    TypeCvt(VarNode* x, DType dtype, const OperatorConfig& config);
    static SymbolVar make(SymbolVar x, DType dtype, const OperatorConfig& config = {});

    const char* type_name() const override { return "TypeCvt"; }
    void hash_params(Hasher& h) const override;
    bool params_equal(const OperatorNode& rhs) const override;
    std::string param_string() const override { return m_dtype.name(); }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
    DType target_dtype() const { return m_dtype; }

private:
    DType m_dtype;
};

//! Reads a 1-D int32/int64 shape tensor; throws ShapeError naming `who` for bad values.
std::vector<long> shape_value_to_dims(const Tensor& value, const std::string& who);

} // namespace braid::opr

// ---- serialization: params dump and load (serialization/params.h), one pair per type,
// registered in register_all_operators().
namespace braid {
class ParamWriter;
struct OprLoadContext;
} // namespace braid

namespace braid::opr {
//! Writes Reshape's params into a model.
void dump_reshape(const OperatorNode& opr, ParamWriter& w);
//! Rebuilds a Reshape from a model.
SymbolVarArray load_reshape(const OprLoadContext& ctx);
//! Writes GetVarShape's params into a model.
void dump_get_var_shape(const OperatorNode& opr, ParamWriter& w);
//! Rebuilds a GetVarShape from a model.
SymbolVarArray load_get_var_shape(const OprLoadContext& ctx);
//! Writes Broadcast's params into a model.
void dump_broadcast(const OperatorNode& opr, ParamWriter& w);
//! Rebuilds a Broadcast from a model.
SymbolVarArray load_broadcast(const OprLoadContext& ctx);
//! Writes TypeCvt's params into a model.
void dump_type_cvt(const OperatorNode& opr, ParamWriter& w);
//! Rebuilds a TypeCvt from a model.
SymbolVarArray load_type_cvt(const OprLoadContext& ctx);
} // namespace braid::opr
