#include "graph/kernel_registry.h"

#include "base/error.h"
#include "graph/operator_node.h"

#include <map>
#include <mutex>

namespace braid {

namespace {

struct KernelTable {
    std::mutex mutex;
    std::map<std::pair<std::string, Device::Kind>, KernelFn> kernels;
};

KernelTable& table() {
    static KernelTable t;
    return t;
}

void cpu_execute(OperatorNode& opr, ExecCtx& ctx) {
    opr.execute(ctx);
}

KernelFn find_kernel(const std::string& type_name, Device::Kind kind) {
    auto& t = table();
    std::lock_guard lk(t.mutex);
    auto it = t.kernels.find({type_name, kind});
    return it == t.kernels.end() ? nullptr : it->second;
}

size_t nr_kernels(Device::Kind kind) {
    auto& t = table();
    std::lock_guard lk(t.mutex);
    size_t n = 0;
    for (auto& [key, _] : t.kernels) n += key.second == kind;
    return n;
}

} // namespace

const char* device_kind_name(Device::Kind kind) {
    switch (kind) {
    case Device::Kind::CPU:
        return "CPU";
    case Device::Kind::CUDA:
        return "CUDA";
    }
    return "?";
}

void register_kernel(const std::string& type_name, Device::Kind kind, KernelFn fn) {
    BRAID_ASSERT(fn, "register_kernel({}): null kernel", type_name);
    auto& t = table();
    std::lock_guard lk(t.mutex);
    t.kernels[{type_name, kind}] = fn;
}

bool has_kernel(const std::string& type_name, Device::Kind kind) {
    return find_kernel(type_name, kind) != nullptr;
}

KernelFn resolve_kernel(const OperatorNode& opr, Device::Kind kind, const std::string& where) {
    if (KernelFn fn = find_kernel(opr.type_name(), kind)) return fn;
    if (kind == Device::Kind::CPU) return &cpu_execute;
    const char* kind_name = device_kind_name(kind);
    if (nr_kernels(kind) == 0)
        BRAID_THROW(GraphError,
                    "{} cannot run on comp node {}: no {} kernel is registered at all; call "
                    "register_all_operators() before compiling",
                    opr.describe(), where, kind_name);
    BRAID_THROW(GraphError,
                "{} has no {} kernel, so it cannot run on comp node {}; put it on a CPU comp "
                "node (OperatorConfig) or add a kernel with register_kernel(\"{}\", "
                "Device::Kind::{}, fn)",
                opr.describe(), kind_name, where, opr.type_name(), kind_name);
}

} // namespace braid
