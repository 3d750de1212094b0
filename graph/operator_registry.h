// The operator registry: one descriptor per operator type, by its stable type name. A
// descriptor carries everything braid knows about the type: its family, how its params are
// dumped and loaded (graph/param_io.h), its gradient rule (graph/grad.h) and its kernels per
// device kind (graph/kernel_registry.h). Each operator family registers its descriptors from
// its own file (operators/<family>.cpp: register_<family>()); register_all_operators() calls
// one such function per family. Serialization, autodiff and kernel dispatch find operator
// types only through this registry and never name a concrete one. A descriptor may carry an
// example, which builds one instance of the type: the serialization round trip and the
// hostile-model corpus build every example (examples::build_every_operator()), so a new type
// is dumped, loaded and compared without a line outside its own files.
//
// Registration is thread-safe and happens once, before graphs are compiled, dumped or loaded;
// lookups afterwards are read-only.
#pragma once

#include "graph/grad.h"
#include "graph/kernel_registry.h"
#include "graph/param_io.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

//! Builds instances of one operator type from `x`, a float32 {4,6} graph input, and returns
//! the vars to check (they are outputs of a graph that is dumped, loaded and run).
using OperatorExample = SymbolVarArray (*)(SymbolVar x);

//! What the runtime knows about one operator type.
struct OperatorDescriptor {
    std::string type_name;
    //! The family (file pair in operators/) that defines it, e.g. "elemwise".
    std::string family;
    //! Writes an operator's params into a model; null: the type cannot be dumped.
    ParamsDumper dump_params = nullptr;
    //! Rebuilds the operator from a model; null: the type cannot be loaded.
    OperatorLoader load = nullptr;
    //! Version of the params layout; bump it when a field's meaning changes, and keep the
    //! loader reading older versions (ParamReader::version()).
    uint32_t version = 1;
    //! The operator's output shapes depend on the rank binding given at load time (a
    //! collective's world size), so loaded shapes may differ from the recorded ones.
    bool rank_dependent = false;
    //! The gradient rule (graph/grad.h); empty: not differentiable.
    GradRule grad;
    //! The rule also runs when only the outputs get a gradient (see register_grad_rule()).
    bool grad_always_run = false;
    //! Why the type is not differentiable, when it was declared so.
    std::string non_differentiable_reason;
    //! Kernels by device kind; a CPU entry overrides OperatorNode::execute().
    std::map<Device::Kind, KernelFn> kernels;
    //! Instances of the type for the round-trip checks; null for the types that
    //! examples::build_every_operator() builds by hand.
    OperatorExample example = nullptr;
};

//! The stable id of an operator type stored in model files: xxHash64 of the type name.
uint64_t operator_type_id(std::string_view type_name);

//! Process-wide table of operator descriptors.
class OperatorRegistry {
public:
    static OperatorRegistry& instance();
    /*!
     * Adds or completes the descriptor of `desc.type_name`: name, family, params functions,
     * version and traits are taken from `desc`; a gradient rule and kernels are added when
     * `desc` has them, and otherwise those registered earlier are kept.
     */
    void add(OperatorDescriptor desc);
    //! add() of a descriptor with these fields, the way a family registers its types.
    void add(std::string type_name, std::string family, ParamsDumper dump_params,
             OperatorLoader load, OperatorExample example = nullptr, uint32_t version = 1,
             bool rank_dependent = false);
    //! Runs `edit` on the descriptor of `type_name` (created empty when absent) under the
    //! registry's lock: how kernels and gradient rules are registered.
    void update(const std::string& type_name, const std::function<void(OperatorDescriptor&)>& edit);
    //! The descriptor of `type_name`, or nullptr. Stays valid for the process's lifetime.
    const OperatorDescriptor* find(const std::string& type_name) const;
    //! Every registered type name, sorted.
    std::vector<std::string> type_names() const;

private:
    std::map<std::string, OperatorDescriptor> m_types;
};

} // namespace braid
