// The explicit operator registry: every operator type, by its stable type name.
//
// register_all_operators() lists every operator family; tools and tests call it once.
// Registration is explicit so that no operator depends on the linker keeping a static
// constructor. Each type also names its params dumper and loader (serialization/params.h),
// so a model file can name the type and rebuild it.
#pragma once

#include "serialization/params.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace braid {

//! What the runtime knows about one operator type.
struct OperatorTraits {
    std::string type_name;
    //! The family (file pair) that defines it, e.g. "elemwise".
    std::string family;
    //! Writes an operator's params into a model; null: the type cannot be dumped.
    ParamsDumper dump_params = nullptr;
    //! Rebuilds the operator from a model; null: the type cannot be loaded.
    OperatorLoader load = nullptr;
    //! Version of the params layout; bump it when a field's meaning changes, and keep the
    //! loader reading older versions (ParamReader::version()).
    uint32_t version = 1;
};

//! The stable id of an operator type stored in model files: xxHash64 of the type name.
uint64_t operator_type_id(std::string_view type_name);

//! Process-wide table of operator types. Registration is thread-safe; lookups after
//! registration are read-only.
class OperatorRegistry {
public:
    static OperatorRegistry& instance();
    //! Adds a type; registering the same name again replaces it.
    void add(OperatorTraits traits);
    //! The traits of `type_name`, or nullptr.
    const OperatorTraits* find(const std::string& type_name) const;
    //! Every registered type name, sorted.
    std::vector<std::string> type_names() const;

private:
    std::map<std::string, OperatorTraits> m_types;
};

//! Registers every operator family (idempotent).
void register_all_operators();

} // namespace braid
