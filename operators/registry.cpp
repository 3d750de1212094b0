#include "operators/registry.h"

#include "base/hash.h"
#include "operators/copy.h"
#include "operators/elemwise.h"
#include "operators/grad_util.h"
#include "operators/io.h"
#include "operators/matmul.h"
#include "operators/reduce.h"
#include "operators/tensor_manip.h"

#include <mutex>

#if BRAID_WITH_CUDA
#include "operators/cuda/cuda_kernels.h"
#endif

namespace braid {

namespace {
std::mutex g_registry_mutex;
}

OperatorRegistry& OperatorRegistry::instance() {
    static OperatorRegistry reg;
    return reg;
}

void OperatorRegistry::add(OperatorTraits traits) {
    std::lock_guard lk(g_registry_mutex);
    auto name = traits.type_name;
    m_types[name] = std::move(traits);
}

const OperatorTraits* OperatorRegistry::find(const std::string& type_name) const {
    std::lock_guard lk(g_registry_mutex);
    auto it = m_types.find(type_name);
    return it == m_types.end() ? nullptr : &it->second;
}

uint64_t operator_type_id(std::string_view type_name) {
    return xxhash64(type_name.data(), type_name.size());
}

std::vector<std::string> OperatorRegistry::type_names() const {
    std::lock_guard lk(g_registry_mutex);
    std::vector<std::string> names;
    for (auto& [name, _] : m_types) names.push_back(name);
    return names;
}

void register_all_operators() {
    static std::once_flag once;
    std::call_once(once, [] {
        auto& reg = OperatorRegistry::instance();
        // One line per type: name, family, and (for serializable types) the params dumper
        // and loader defined at the end of the family's .cpp.
        using namespace opr;
        reg.add({"Input", "io", dump_input, load_input});
        reg.add({"ImmutableTensor", "io", dump_immutable_tensor, load_immutable_tensor});
        reg.add({"SharedParam", "io", dump_shared_param, load_shared_param});
        reg.add({"Elemwise", "elemwise", dump_elemwise, load_elemwise});
        reg.add({"Reshape", "tensor_manip", dump_reshape, load_reshape});
        reg.add({"GetVarShape", "tensor_manip", dump_get_var_shape, load_get_var_shape});
        reg.add({"Broadcast", "tensor_manip", dump_broadcast, load_broadcast});
        reg.add({"TypeCvt", "tensor_manip", dump_type_cvt, load_type_cvt});
        reg.add({"MatMul", "matmul", dump_matmul, load_matmul});
        reg.add({"Reduce", "reduce", dump_reduce, load_reduce});
        reg.add({"BatchedMatMul", "matmul"});
        reg.add({"Conv2d", "conv"});
        reg.add({"Pooling", "pooling"});
        reg.add({"BatchNorm", "batch_norm"});
        reg.add({"Attention", "attention"});
        reg.add({"ArgReduce", "reduce"});
        for (auto* t : {"Dimshuffle", "AxisAddRemove"}) reg.add({t, "tensor_manip"});
        for (auto* t : {"Softmax", "LayerNorm", "RMSNorm"}) reg.add({t, "normalization"});
        for (auto* t : {"Subtensor", "SetSubtensor", "IncrSubtensor"}) reg.add({t, "subtensor"});
        for (auto* t : {"Gather", "IndexingOneHot", "Embedding"}) reg.add({t, "indexing"});
        for (auto* t : {"Concat", "Split"}) reg.add({t, "concat_split"});
        for (auto* t : {"Fill", "Arange"}) reg.add({t, "fill"});
        reg.add({"ParamUpdate", "optimizer"});
        reg.add({"Copy", "copy"});

        // Gradient rules, one line per family.
        opr::register_grad_arith();
        opr::register_elemwise_grad();
        opr::register_matmul_grad();
        opr::register_reduce_grad();
        opr::register_tensor_manip_grad();
        opr::register_optimizer_grad();
        opr::register_normalization_grad();
        opr::register_concat_split_grad();
        opr::register_subtensor_grad();
        opr::register_indexing_grad();
        opr::register_conv_grad();
        opr::register_pooling_grad();
        opr::register_batch_norm_grad();
        opr::register_attention_grad();
        opr::register_fill_grad();
        // Operators the gradient rules insert (also usable directly).
        for (auto* t : {"ScatterAdd", "IndexAdd"}) reg.add({t, "scatter"});
        for (auto* t : {"Conv2dBackwardData", "Conv2dBackwardFilter"})
            reg.add({t, "conv_grad_ops"});
        reg.add({"PoolingBackward", "pooling_grad_ops"});

        // Cross-device copies (graph rule, gradient, kernels).
        opr::register_copy();
#if BRAID_WITH_CUDA
        // CUDA kernels of every family above (operators/cuda/).
        opr::register_cuda_kernels();
#endif
    });
}

} // namespace braid
