// Direct convolution of stride 1, dilation 1 and one group, on AVX2 or AVX-512: no im2col
// matrix and no padded copy. Output positions run over the input's grid (row r, column col:
// r·w + col), so every kernel tap (i, j) reads the input at a fixed offset (i − pad_h)·w +
// (j − pad_w) from the position: an output block is a GEMM whose B rows are shifted views of
// the input planes, with the lanes that fall into the padding masked off (read as zero).
// Convolutions that narrow the width compute the positions past the output width and drop
// them. A tile of output channels by 48 (AVX-512) or 16 (AVX2) positions keeps its sums in
// registers over every input channel and tap.
//
// Each output is one chain of fused multiply-adds over k = (channel, kernel row, kernel column)
// in order, from zero: the order of im2col + ordered_sgemm, so the results are the same bits as
// deterministic mode's and do not depend on the thread count or instruction set.
// Internal to operators/.
#pragma once

#include "memory/tensor.h"
#include "operators/conv.h"

namespace braid::opr {

//! True when conv_direct_forward() runs this convolution: one group, stride and dilation 1, not
//! a pointwise kernel without padding (a plain GEMM), kernels of at most DIRECT_MAX_KERNEL rows
//! and columns, a width padding that does not widen the output (2·pad_w < kw), a CPU with AVX2
//! at least, an input of at most DIRECT_MAX_INPUT_BYTES per batch item, and positions (see
//! above) for at least a quarter of a tile.
bool conv_direct_applies(const Conv2dParam& param, const TensorShape& x, const TensorShape& w);

//! Per-channel steps a fused convolution applies to each output while it is in registers, in
//! this order (FusedConv2d's bias, batch norm and relu): y += bias[o]; y = y · scale[o] +
//! shift[o] (one fused multiply-add); y = max(y, 0) (NaN gives 0). Null arrays are skipped.
struct DirectOutputOps {
    const float* bias = nullptr;
    const float* scale = nullptr;
    const float* shift = nullptr;
    bool relu = false;
};

//! conv2d_forward()'s contract (float32 contiguous x, w and y; the epilogue per finished block,
//! after `ops` when given) for convolutions conv_direct_applies() accepts; returns false, having
//! written nothing, for the others.
bool conv_direct_forward(const Conv2dParam& param, const Tensor& x, const Tensor& w, Tensor& y,
                         const ConvEpilogue* epilogue, const DirectOutputOps* ops = nullptr);

//! Largest kernel side the direct kernel takes.
constexpr size_t DIRECT_MAX_KERNEL = 11;

//! Input of one batch item above which the direct kernel is not used: its tiles read
//! every input channel's plane for each block of positions, which must stay in L2.
constexpr size_t DIRECT_MAX_INPUT_BYTES = size_t(2) << 20;

} // namespace braid::opr
