// Elementwise operators with numpy broadcasting: one operator type, one mode per function.
//
// Inputs must share one dtype (no implicit promotion). Float modes run on float32 (float16 and
// bfloat16 are converted to float32 and back); integer modes run on int32 and int64.
// Memory: the output may overwrite an input of the same shape in place.
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

namespace braid::opr {

//! Elementwise functions. Arity 1 or 2.
enum class ElemMode : uint8_t {
    // unary
    NEG,
    ABS,
    RELU,
    EXP,
    LOG,
    TANH,
    SIGMOID,
    // binary
    ADD,
    SUB,
    MUL,
    TRUE_DIV,
    FLOOR_DIV,
    MAX,
    MIN,
};

//! Name of a mode, e.g. "ADD".
const char* elem_mode_name(ElemMode mode);
//! Number of inputs a mode takes.
size_t elem_mode_arity(ElemMode mode);

class Elemwise final : public OperatorNode {
public:
    Elemwise(ElemMode mode, const VarNodeArray& inputs, const OperatorConfig& config);
    static SymbolVar make(ElemMode mode, const SymbolVarArray& inputs,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "Elemwise"; }
    ElemMode mode() const { return m_mode; }
    void hash_params(Hasher& h) const override;
    bool params_equal(const OperatorNode& rhs) const override;
    std::string param_string() const override { return elem_mode_name(m_mode); }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    int inplace_input(size_t) const override;
    void execute(ExecCtx& ctx) override;

private:
    ElemMode m_mode;
};

SymbolVar add(SymbolVar a, SymbolVar b);
SymbolVar sub(SymbolVar a, SymbolVar b);
SymbolVar mul(SymbolVar a, SymbolVar b);
SymbolVar true_div(SymbolVar a, SymbolVar b);
SymbolVar floor_div(SymbolVar a, SymbolVar b);
SymbolVar maximum(SymbolVar a, SymbolVar b);
SymbolVar minimum(SymbolVar a, SymbolVar b);
SymbolVar neg(SymbolVar x);
SymbolVar abs(SymbolVar x);
SymbolVar relu(SymbolVar x);
SymbolVar exp(SymbolVar x);
SymbolVar log(SymbolVar x);
SymbolVar tanh(SymbolVar x);
SymbolVar sigmoid(SymbolVar x);

//! A rank-0 constant of `like`'s dtype in `like`'s graph.
SymbolVar scalar_like(SymbolVar like, double value);

} // namespace braid::opr

namespace braid {
SymbolVar operator+(SymbolVar a, SymbolVar b);
SymbolVar operator-(SymbolVar a, SymbolVar b);
SymbolVar operator*(SymbolVar a, SymbolVar b);
//! True division for float vars, floor division for integer vars.
SymbolVar operator/(SymbolVar a, SymbolVar b);
SymbolVar operator-(SymbolVar a);
SymbolVar operator+(SymbolVar a, double b);
SymbolVar operator-(SymbolVar a, double b);
SymbolVar operator*(SymbolVar a, double b);
SymbolVar operator/(SymbolVar a, double b);
SymbolVar operator+(double a, SymbolVar b);
SymbolVar operator-(double a, SymbolVar b);
SymbolVar operator*(double a, SymbolVar b);
SymbolVar operator/(double a, SymbolVar b);
} // namespace braid

// ---- serialization: params dump and load (serialization/params.h), one pair per type,
// registered in register_all_operators().
namespace braid {
class ParamWriter;
struct OprLoadContext;
} // namespace braid

namespace braid::opr {
//! Writes Elemwise's params into a model.
void dump_elemwise(const OperatorNode& opr, ParamWriter& w);
//! Rebuilds a Elemwise from a model.
SymbolVarArray load_elemwise(const OprLoadContext& ctx);
} // namespace braid::opr
