// Reductions over a set of axes (or all axes), with keepdims.
#pragma once

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

namespace braid::opr {

enum class ReduceMode : uint8_t { SUM, MEAN, MAX, MIN };

const char* reduce_mode_name(ReduceMode mode);

//! Reduces `axes` (negative counts from the end; empty = every axis). Without keepdims the
//! reduced axes disappear (reducing every axis gives a scalar); with keepdims they become 1.
//! Float types accumulate in double, integers in int64.
class Reduce final : public OperatorNode {
public:
    struct Param {
        ReduceMode mode = ReduceMode::SUM;
        std::vector<int> axes; //!< empty: all axes
        bool keepdims = false;
    };
    Reduce(VarNode* x, Param param, const OperatorConfig& config);
    static SymbolVar make(SymbolVar x, Param param, const OperatorConfig& config = {});

    const char* type_name() const override { return "Reduce"; }
    const Param& param() const { return m_param; }
    void hash_params(Hasher& h) const override;
    bool params_equal(const OperatorNode& rhs) const override;
    std::string param_string() const override;
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;

private:
    //! The sorted, non-negative axes for an input of rank `ndim`; throws for bad axes.
    std::vector<size_t> normalized_axes(size_t ndim) const;
    Param m_param;
};

SymbolVar reduce_sum(SymbolVar x, std::vector<int> axes = {}, bool keepdims = false);
SymbolVar reduce_mean(SymbolVar x, std::vector<int> axes = {}, bool keepdims = false);
SymbolVar reduce_max(SymbolVar x, std::vector<int> axes = {}, bool keepdims = false);
SymbolVar reduce_min(SymbolVar x, std::vector<int> axes = {}, bool keepdims = false);

} // namespace braid::opr

// ---- serialization: params dump and load (serialization/params.h), one pair per type,
// registered in register_all_operators().
namespace braid {
class ParamWriter;
struct OprLoadContext;
} // namespace braid

namespace braid::opr {
//! Writes Reduce's params into a model.
void dump_reduce(const OperatorNode& opr, ParamWriter& w);
//! Rebuilds a Reduce from a model.
SymbolVarArray load_reduce(const OprLoadContext& ctx);
} // namespace braid::opr
