// Kernels per device kind.
//
// An operator's CPU kernel is its execute(). Kernels for other devices live in their own
// files (operators/cuda/*.cu) and are registered by operator type name and device kind, so
// operator files stay device-agnostic:
//
//     register_kernel("Elemwise", Device::Kind::CUDA, elemwise_cuda);
//
// Compiling a graph resolves each operator's kernel for its comp node's device once; an
// operator type with no kernel for that device is a GraphError at compile time naming the
// operator and the comp node (there is no silent fallback to the CPU kernel). Kernels run on
// the comp node's worker thread; a device kernel enqueues its work on the comp node's queue
// (for CUDA: cuda_context(opr.comp_node()).stream()) and returns.
//
// Registration is thread-safe; resolve_kernel() is meant for compile time, not per step.
#pragma once

#include "memory/allocator.h"

#include <string>

namespace braid {

class OperatorNode;
class ExecCtx;

//! A kernel: computes (or enqueues the computation of) `opr`'s outputs from the tensors in
//! `ctx`, on the operator's comp node.
using KernelFn = void (*)(OperatorNode& opr, ExecCtx& ctx);

//! Registers the kernel of operator type `type_name` for devices of `kind`, replacing any
//! earlier one. A CPU registration overrides OperatorNode::execute().
void register_kernel(const std::string& type_name, Device::Kind kind, KernelFn fn);

//! Whether a kernel of `type_name` for `kind` was registered (CPU: an override).
bool has_kernel(const std::string& type_name, Device::Kind kind);

/*!
 * The kernel that runs `opr` on a device of `kind`; `where` names the comp node for the error
 * message. CPU: the registered override, else a kernel that calls opr.execute(). Other kinds:
 * the registered kernel, else GraphError, e.g.
 *   `MatMul "y" has no CUDA kernel, so it cannot run on comp node cuda0 ...`
 * An operator with a float64 input or output has no kernel on any device but the CPU: that is
 * a DTypeError naming the operator, the var and the comp node.
 */
KernelFn resolve_kernel(const OperatorNode& opr, Device::Kind kind, const std::string& where);

//! Name of a device kind for messages: "CPU", "CUDA".
const char* device_kind_name(Device::Kind kind);

} // namespace braid
