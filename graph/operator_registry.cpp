#include "graph/operator_registry.h"

#include "base/hash.h"

#include <mutex>

namespace braid {

namespace {
std::mutex g_registry_mutex;
}

OperatorRegistry& OperatorRegistry::instance() {
    static OperatorRegistry reg;
    return reg;
}

void OperatorRegistry::add(OperatorDescriptor desc) {
    std::lock_guard lk(g_registry_mutex);
    auto& d = m_types[desc.type_name];
    d.type_name = desc.type_name;
    d.family = std::move(desc.family);
    d.dump_params = desc.dump_params;
    d.load = desc.load;
    d.version = desc.version;
    d.rank_dependent = desc.rank_dependent;
    if (desc.grad) {
        d.grad = std::move(desc.grad);
        d.grad_always_run = desc.grad_always_run;
    }
    if (!desc.non_differentiable_reason.empty())
        d.non_differentiable_reason = std::move(desc.non_differentiable_reason);
    for (auto& [kind, fn] : desc.kernels) d.kernels[kind] = fn;
    if (desc.example) d.example = desc.example;
}

void OperatorRegistry::add(std::string type_name, std::string family, ParamsDumper dump_params,
                           OperatorLoader load, OperatorExample example, uint32_t version,
                           bool rank_dependent) {
    OperatorDescriptor desc;
    desc.type_name = std::move(type_name);
    desc.family = std::move(family);
    desc.dump_params = dump_params;
    desc.load = load;
    desc.version = version;
    desc.rank_dependent = rank_dependent;
    desc.example = example;
    add(std::move(desc));
}

void OperatorRegistry::update(const std::string& type_name,
                              const std::function<void(OperatorDescriptor&)>& edit) {
    std::lock_guard lk(g_registry_mutex);
    auto& d = m_types[type_name];
    d.type_name = type_name;
    edit(d);
}

const OperatorDescriptor* OperatorRegistry::find(const std::string& type_name) const {
    std::lock_guard lk(g_registry_mutex);
    auto it = m_types.find(type_name);
    return it == m_types.end() ? nullptr : &it->second;
}

std::vector<std::string> OperatorRegistry::type_names() const {
    std::lock_guard lk(g_registry_mutex);
    std::vector<std::string> names;
    for (auto& [name, _] : m_types) names.push_back(name);
    return names;
}

uint64_t operator_type_id(std::string_view type_name) {
    return xxhash64(type_name.data(), type_name.size());
}

} // namespace braid
