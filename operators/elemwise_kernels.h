// The CPU kernels behind Elemwise: one small loop per (mode, compute dtype), found by
// find_elem_kernel(). Each kernel computes a run of n outputs from inputs that either advance
// one element per output or stay on one broadcast element; elemwise.cpp walks the broadcast
// shape, stages float16/bfloat16 through float32 and splits large outputs across threads.
// Internal to operators/.
#pragma once

#include "memory/dtype.h"
#include "operators/elemwise.h"

#include <cstddef>
#include <cstdint>

namespace braid::opr {

//! Computes `n` outputs into `out`. Input k points at its first element and advances
//! step[k] elements (0 or 1) per output. Integer kernels throw DTypeError for a division
//! by zero or a negative integer exponent (the executable adds the operator's name).
using ElemKernel = void (*)(const void* const* in, const uint8_t* step, void* out, size_t n);

//! The kernel of `mode` computing in `compute` (FLOAT32, FLOAT64, INT32, INT64 or BOOL; for WHERE
//! the dtype of a and b, any size), or nullptr when the mode has none for that dtype.
ElemKernel find_elem_kernel(ElemMode mode, DTypeEnum compute);

//! The activations FusedMatMul and FusedConv2d apply to their result in the same pass.
inline bool fusable_activation(ElemMode mode) {
    return mode == ElemMode::RELU || mode == ElemMode::SIGMOID || mode == ElemMode::TANH ||
           mode == ElemMode::GELU || mode == ElemMode::GELU_TANH;
}

} // namespace braid::opr
