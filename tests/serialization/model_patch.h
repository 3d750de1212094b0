// White-box helpers that edit a dumped model in place, to build the broken files the loader
// must reject (and valid files with unusual content).
#pragma once

#include "serialization/format.h"

#include <cstring>
#include <string>
#include <vector>

namespace braid::test {

//! Recomputes the checksum after an edit, so the edit reaches the checks past it.
inline void reseal(std::vector<uint8_t>& bytes) {
    auto* model = fbs::GetMutableModel(bytes.data());
    size_t at = serial::checksum_field_offset(bytes.data());
    model->mutate_checksum(serial::model_checksum(bytes.data(), bytes.size(), at));
}

//! The mutable root of a dumped model.
inline fbs::Model* mutable_model(std::vector<uint8_t>& bytes) {
    return fbs::GetMutableModel(bytes.data());
}

//! Renames every operator of type `from` to `to` (same length), fixing the type id.
inline void rename_operator_type(std::vector<uint8_t>& bytes, const std::string& from,
                                 const std::string& to) {
    auto* model = mutable_model(bytes);
    auto* oprs = model->mutable_operators();
    for (flatbuffers::uoffset_t i = 0; i < oprs->size(); ++i) {
        auto* o = oprs->GetMutableObject(i);
        auto* name = o->mutable_type_name();
        if (name->str() != from) continue;
        BRAID_ASSERT(from.size() == to.size(), "same length only");
        std::memcpy(name->data(), to.data(), to.size());
        o->mutate_type_id(operator_type_id(to));
    }
    reseal(bytes);
}

} // namespace braid::test
