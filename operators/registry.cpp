#include "operators/registry.h"

#include "operators/grad_util.h"

#include <mutex>

namespace braid::opr {
// One per family, defined at the end of operators/<family>.cpp.
void register_io_operators();
void register_constant_fold_pass();
void register_elemwise_operators();
void register_elemwise_pattern_passes();
void register_elemwise_chain_operators();
void register_conv_chain_pass();
void register_attention_fusion_pass();
void register_tensor_manip_operators();
void register_matmul_operators();
void register_fused_matmul_operators();
void register_reduce_operators();
void register_conv_operators();
void register_conv_integer_operators();
void register_quantize_operators();
void register_fused_conv_operators();
void register_conv_backward_operators();
void register_pooling_operators();
void register_pooling_backward_operators();
void register_batch_norm_operators();
void register_attention_operators();
void register_normalization_operators();
void register_subtensor_operators();
void register_indexing_operators();
void register_scatter_operators();
void register_concat_split_operators();
void register_fill_operators();
void register_optimizer_operators();
void register_copy_operators();
void register_cumsum_operators();
void register_det_operators();
void register_selection_operators();
void register_roi_align_operators();
void register_ngram_operators();
void register_control_flow_operators();
} // namespace braid::opr

namespace braid {

void register_operator_library() {
    static std::once_flag once;
    std::call_once(once, [] {
        using namespace opr;
        // The arithmetic the autodiff walk itself uses.
        register_grad_arith();
        register_io_operators();
        // First: the other passes then see the constants that folding makes.
        register_constant_fold_pass();
        register_elemwise_operators();
        // Before the matmul fusion pass, which folds the GELU it produces.
        register_elemwise_pattern_passes();
        register_attention_fusion_pass();
        register_tensor_manip_operators();
        register_matmul_operators();
        register_fused_matmul_operators();
        register_reduce_operators();
        register_conv_operators();
        register_conv_integer_operators();
        register_quantize_operators();
        register_fused_conv_operators();
        register_conv_backward_operators();
        register_pooling_operators();
        register_pooling_backward_operators();
        register_batch_norm_operators();
        register_attention_operators();
        register_normalization_operators();
        register_subtensor_operators();
        register_indexing_operators();
        register_scatter_operators();
        register_concat_split_operators();
        register_fill_operators();
        register_optimizer_operators();
        register_copy_operators();
        register_cumsum_operators();
        register_det_operators();
        register_selection_operators();
        register_roi_align_operators();
        register_ngram_operators();
        register_control_flow_operators();
        // Last: its pass joins what the other fusion passes left, and the next pass folds
        // the chains that follow a convolution into it.
        register_elemwise_chain_operators();
        register_conv_chain_pass();
    });
}

} // namespace braid
