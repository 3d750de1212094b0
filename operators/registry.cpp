#include "operators/registry.h"

#include "base/hash.h"
#include "operators/attention.h"
#include "operators/batch_norm.h"
#include "operators/collective_modes.h"
#include "operators/concat_split.h"
#include "operators/conv.h"
#include "operators/conv_grad_ops.h"
#include "operators/copy.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/grad_util.h"
#include "operators/indexing.h"
#include "operators/io.h"
#include "operators/matmul.h"
#include "operators/normalization.h"
#include "operators/optimizer.h"
#include "operators/pooling.h"
#include "operators/pooling_grad_ops.h"
#include "operators/reduce.h"
#include "operators/scatter.h"
#include "operators/subtensor.h"
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
        reg.add({"BatchedMatMul", "matmul", dump_batched_matmul, load_batched_matmul});
        reg.add({"Conv2d", "conv", dump_conv2d, load_conv2d});
        reg.add({"Pooling", "pooling", dump_pooling, load_pooling});
        reg.add({"BatchNorm", "batch_norm", dump_batch_norm, load_batch_norm});
        reg.add({"Attention", "attention", dump_attention, load_attention});
        reg.add({"ArgReduce", "reduce", dump_arg_reduce, load_arg_reduce});
        reg.add({"Dimshuffle", "tensor_manip", dump_dimshuffle, load_dimshuffle});
        reg.add({"AxisAddRemove", "tensor_manip", dump_axis_add_remove, load_axis_add_remove});
        reg.add({"Softmax", "normalization", dump_softmax, load_softmax});
        reg.add({"LayerNorm", "normalization", dump_layer_norm, load_layer_norm});
        reg.add({"RMSNorm", "normalization", dump_rms_norm, load_rms_norm});
        reg.add({"Subtensor", "subtensor", dump_subtensor, load_subtensor});
        reg.add({"SetSubtensor", "subtensor", dump_set_subtensor, load_set_subtensor});
        reg.add({"IncrSubtensor", "subtensor", dump_incr_subtensor, load_incr_subtensor});
        reg.add({"Gather", "indexing", dump_gather, load_gather});
        reg.add({"IndexingOneHot", "indexing", dump_indexing_one_hot, load_indexing_one_hot});
        reg.add({"Embedding", "indexing", dump_embedding, load_embedding});
        reg.add({"Concat", "concat_split", dump_concat, load_concat});
        reg.add({"Split", "concat_split", dump_split, load_split});
        reg.add({"Fill", "fill", dump_fill, load_fill});
        reg.add({"Arange", "fill", dump_arange, load_arange});
        reg.add({"ParamUpdate", "optimizer", dump_param_update, load_param_update});
        reg.add({"Copy", "copy", dump_copy, load_copy});
        reg.add({"CollectiveComm", "collective_comm", dump_collective_comm, load_collective_comm});
        // Backward operators that gradient rules insert, so training graphs can be dumped.
        reg.add({"ScatterAdd", "scatter", dump_scatter_add, load_scatter_add});
        reg.add({"IndexAdd", "scatter", dump_index_add, load_index_add});
        reg.add({"Conv2dBackwardData", "conv_grad_ops", dump_conv2d_backward_data,
                 load_conv2d_backward_data});
        reg.add({"Conv2dBackwardFilter", "conv_grad_ops", dump_conv2d_backward_filter,
                 load_conv2d_backward_filter});
        reg.add(
            {"PoolingBackward", "pooling_grad_ops", dump_pooling_backward, load_pooling_backward});

        // Gradient rules, one line per family.
        opr::register_grad_arith();
        opr::register_elemwise_grad();
        opr::register_matmul_grad();
        opr::register_reduce_grad();
        opr::register_tensor_manip_grad();
        opr::register_optimizer_grad();
        opr::register_collective_grad();
        opr::register_normalization_grad();
        opr::register_concat_split_grad();
        opr::register_subtensor_grad();
        opr::register_indexing_grad();
        opr::register_conv_grad();
        opr::register_pooling_grad();
        opr::register_batch_norm_grad();
        opr::register_attention_grad();
        opr::register_fill_grad();

        // Cross-device copies (graph rule, gradient, kernels).
        opr::register_copy();
        // CollectiveComm on CUDA comp nodes (backend "nccl").
        opr::register_collective_kernels();
#if BRAID_WITH_CUDA
        // CUDA kernels of every family above (operators/cuda/).
        opr::register_cuda_kernels();
#endif
    });
}

} // namespace braid
