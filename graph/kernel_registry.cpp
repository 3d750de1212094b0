#include "graph/kernel_registry.h"

#include "base/error.h"
#include "graph/operator_node.h"
#include "graph/operator_registry.h"

namespace braid {

namespace {

void cpu_execute(OperatorNode& opr, ExecCtx& ctx) {
    opr.execute(ctx);
}

// Kernels live in the operator descriptors (graph/operator_registry.h).
KernelFn find_kernel(const std::string& type_name, Device::Kind kind) {
    auto* desc = OperatorRegistry::instance().find(type_name);
    if (!desc) return nullptr;
    auto it = desc->kernels.find(kind);
    return it == desc->kernels.end() ? nullptr : it->second;
}

size_t nr_kernels(Device::Kind kind) {
    auto& reg = OperatorRegistry::instance();
    size_t n = 0;
    for (auto& name : reg.type_names()) n += reg.find(name)->kernels.count(kind);
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
    OperatorRegistry::instance().update(type_name,
                                        [&](OperatorDescriptor& d) { d.kernels[kind] = fn; });
}

bool has_kernel(const std::string& type_name, Device::Kind kind) {
    return find_kernel(type_name, kind) != nullptr;
}

namespace {

//! Whether device kernels take `dt`: float32, float16, bfloat16, int8, uint8, int32, int64 and
//! bool. None takes float64, int16, uint16, uint32 or uint64: such a buffer would be read as
//! another dtype.
bool device_dtype(DType dt) {
    return !(dt == dtype::Float64() || dt == dtype::Int16() || dt == dtype::Uint16() ||
             dt == dtype::Uint32() || dt == dtype::Uint64());
}

//! A var of `opr` of a dtype device kernels do not take, or nullptr.
const VarNode* host_only_var(const OperatorNode& opr) {
    for (auto* v : opr.inputs())
        if (!device_dtype(v->dtype())) return v;
    for (auto* v : opr.outputs())
        if (!device_dtype(v->dtype())) return v;
    return nullptr;
}

} // namespace

KernelFn resolve_kernel(const OperatorNode& opr, Device::Kind kind, const std::string& where) {
    if (kind != Device::Kind::CPU)
        if (const VarNode* v = host_only_var(opr))
            BRAID_THROW(DTypeError,
                        "{}: no {} kernel for {} (var \"{}\"), so it cannot run on comp node "
                        "{}; {} kernels take float32, float16, bfloat16, int8, uint8, int32, "
                        "int64 and bool. Put it on a CPU comp node (OperatorConfig) or convert "
                        "with TypeCvt",
                        opr.describe(), device_kind_name(kind), v->dtype().name(), v->name(), where,
                        device_kind_name(kind));
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
