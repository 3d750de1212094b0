// ElemwiseChain: a chain of float32 elementwise operators run as one pass over memory, and the
// compile-time pass (graph/graph_pass.h) "fuse_elemwise_chains" that forms it.
//
// Exporters write activations as chains of primitives (HardSwish as x * min(max(x + 3, 0), 6)
// / 6, HardSigmoid, clipped scales), and each Elemwise reads and writes the whole tensor. The
// chain computes every step on one block of elements at a time (a few KiB, in cache) with
// Elemwise's own kernels, so its result equals the unfused operators' bit for bit.
//
// The pass joins Elemwise operators on a CPU comp node whose output is float32 of one shape,
// where each intermediate result is read by the next operator of the chain alone and by nothing
// else in the executable, and whose other inputs are float32 of that shape or single elements
// (constants such as 3 and 6). Only the exact arithmetic modes join (FUSABLE_CHAIN_MODES): their
// kernels give the same value for an element wherever it falls in a block. Like the other
// passes it rewrites one executable only; the graph keeps its Elemwise operators and gradients.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"
#include "operators/elemwise.h"
#include "operators/elemwise_kernels.h"

#include <array>
#include <cstdint>
#include <vector>

namespace braid::opr {

//! Whether `mode` may be a step of an ElemwiseChain: NEG, ABS, RELU, SQUARE, SQRT, ADD, SUB,
//! MUL, TRUE_DIV, MAX, MIN and CLIP.
bool chainable_mode(ElemMode mode);

//! Params of ElemwiseChain: its steps in order. Step s applies modes[s] to operands
//! 3s .. 3s + arity - 1, each an input of the operator (below its input count) or the result
//! of an earlier step (input count + that step); the last step's result is the output.
struct ElemwiseChainParam {
    std::vector<int32_t> modes; //!< ElemMode values
    std::vector<int32_t> operands;
    static constexpr auto fields() {
        using P = ElemwiseChainParam;
        return std::tuple{param_field("modes", &P::modes), param_field("operands", &P::operands)};
    }
};

//! Checks `param` for a chain of `inputs` inputs: ValueError naming `who` for no steps, a step
//! whose mode does not chain, or an operand that is not an input or an earlier step.
void check_chain_param(const ElemwiseChainParam& param, size_t inputs, const char* who);

//! Elements a chain computes a step at a time, every intermediate result in cache.
constexpr size_t CHAIN_BLOCK = 1024;

//! A chain ready to run on the calling thread. Chains of the forms exporters write for
//! activations and scales (x * clip(x + a, lo, hi) / d, x * clip(x * a + b, lo, hi),
//! clip(x * a + b, lo, hi), x * a + b, with a, b, lo, hi, d single values) run as one loop of
//! their own; others run each step over blocks of CHAIN_BLOCK elements with Elemwise's
//! kernels. Both give the bits of the steps run one by one.
class ChainRunner {
public:
    //! `p`'s input i advances one value per element where advance[i] is 1 and is one value
    //! for every element where it is 0. `p` must outlive the runner.
    ChainRunner(const ElemwiseChainParam& p, std::vector<uint8_t> advance);
    //! Whether the chain runs as one loop of its own.
    bool one_loop() const { return m_loop.form != Form::NONE; }
    //! Elements [begin, end): input i reads base[i][e] (base[i][0] where it does not advance);
    //! the last step writes y[e]. y may be an input: each element is read before it is written.
    void run(const float* const* base, float* y, size_t begin, size_t end) const;

private:
    enum class Form { NONE, HARD_SWISH_DIV, HARD_SWISH_MUL, HARD_SIGMOID, AFFINE };
    //! The form, the input it maps and its single values in the order of the form's loop.
    struct Loop {
        Form form = Form::NONE;
        int32_t x = -1;
        std::array<int32_t, 4> scalars{};
    };
    static Loop recognize(const ElemwiseChainParam& p, size_t nin, const uint8_t* advance);

    const ElemwiseChainParam& m_param;
    std::vector<uint8_t> m_advance;
    Loop m_loop;
    std::vector<ElemKernel> m_kernels; //!< per step, where there is no loop
};

//! The steps of ElemwiseChainParam run as one pass over memory (float32, CPU). No gradient rule:
//! it exists only in compiled executables.
class ElemwiseChain final : public ParamOperator<ElemwiseChain, ElemwiseChainParam> {
public:
    ElemwiseChain(const VarNodeArray& inputs, Param param, const OperatorConfig& config);
    //! Throws ValueError for a step whose mode does not chain or whose operands are not inputs
    //! or earlier steps, DTypeError unless every input is float32.
    static SymbolVar make(const SymbolVarArray& inputs, Param param,
                          const OperatorConfig& config = {});

    const char* type_name() const override { return "ElemwiseChain"; }
    void init_output_dtypes() override;
    //! The broadcast of the inputs' shapes, as the chain's Elemwise operators give.
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

} // namespace braid::opr
