// Graph sources: user-fed inputs, immutable constants and shared parameters.
#pragma once

#include "graph/computing_graph.h"
#include "graph/input_node.h"
#include "graph/symbol_var.h"

#include <optional>

namespace braid::opr {

//! A named input the user feeds through Executable::feed(). Its shape is the declared one
//! until a tensor is fed; feeding another shape re-infers the graph on the next execute().
//! The fed tensor is held by the executable (see InputNode).
class Input final : public InputNode {
public:
    Input(DType dtype, const TensorShape& shape, const OperatorConfig& config);
    static SymbolVar make(ComputingGraph& graph, const std::string& name, DType dtype,
                          const TensorShape& shape, CompNode cn = {});

    const char* type_name() const override { return "Input"; }
    bool allow_dedup() const override { return false; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    ValueInference value_inference() const override { return ValueInference::NONE; }
    OutputMem output_mem(size_t) const override { return OutputMem::BOUND; }
    void execute(ExecCtx& ctx) override;
    DType declared_dtype() const { return input_dtype(); }
    const TensorShape& declared_shape() const { return m_shape; }

private:
    TensorShape m_shape;
};

//! A constant tensor whose value is part of the graph (known statically).
class ImmutableTensor final : public OperatorNode {
public:
    ImmutableTensor(Tensor value, const OperatorConfig& config);
    static SymbolVar make(ComputingGraph& graph, const Tensor& value,
                          const OperatorConfig& config = {});
    //! A scalar (rank-0) constant of `dtype`.
    static SymbolVar make_scalar(ComputingGraph& graph, double value, DType dtype,
                                 const OperatorConfig& config = {});

    const char* type_name() const override { return "ImmutableTensor"; }
    void hash_params(Hasher& h) const override;
    bool params_equal(const OperatorNode& rhs) const override;
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    OutputMem output_mem(size_t) const override { return OutputMem::BOUND; }
    bool accepts_strided_inputs() const override { return true; }
    void execute(ExecCtx& ctx) override { ctx.output(0) = m_value; }
    const Tensor& value() const { return m_value; }

private:
    Tensor m_value;
};

//! The value of `var` when an ImmutableTensor on a CPU comp node produces it and it is one
//! float32 element (of any shape), else nothing (also for null); what the compile-time
//! patterns check their constants with.
std::optional<float> float32_scalar_constant(VarNode* var);

//! A parameter tensor shared by every graph that uses it: one storage, read at each
//! execution (so updates between runs, or by a training step, are seen).
class SharedParam final : public OperatorNode {
public:
    SharedParam(std::shared_ptr<Tensor> param, const OperatorConfig& config);
    static SymbolVar make(ComputingGraph& graph, std::shared_ptr<Tensor> param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "SharedParam"; }
    void hash_params(Hasher& h) const override;
    bool params_equal(const OperatorNode& rhs) const override;
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    ValueInference value_inference() const override { return ValueInference::NONE; }
    OutputMem output_mem(size_t) const override { return OutputMem::BOUND; }
    void execute(ExecCtx& ctx) override { ctx.output(0) = *m_param; }
    const std::shared_ptr<Tensor>& param() const { return m_param; }

private:
    std::shared_ptr<Tensor> m_param;
};

} // namespace braid::opr
