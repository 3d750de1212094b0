// oneDNN kernels for the CPU convolution (operators/conv.h, operators/fused_conv.h) and the
// integer convolution (operators/conv_integer.h: u8/s8 x s8 -> s32 where oneDNN sums exactly),
// used when braid is built with oneDNN (BRAID_WITH_DNNL) and the case is one oneDNN runs with a
// JIT kernel; every other case runs braid's own kernel.
//
// Threading follows the policy of operators/dense_kernels.h: braid's pool is the only source of
// parallelism. Every oneDNN primitive runs single-threaded on the thread that executes it
// (kern::dnnl_single_thread() sets that thread's OpenMP thread count to 1 before its first
// call, so no OpenMP team is ever created), and braid splits a convolution into tasks of one
// batch item each, and a batch of fewer items than threads into bands of output rows (or blocks
// of output channels where there are few rows), each its own primitive execution, run by
// parallel_for.
//
// A convolution's buffers (the source and destination in the primitive's layouts, scratchpads)
// live in a Workspace (memory/workspace.h): the memory plan places it in the arena for the
// operator's step, sized by dnnl_conv2d_workspace() or dnnl_conv_integer_workspace() on the
// static shapes, so they share the arena instead of staying with each thread between runs.
//
// Primitives are created once per geometry and cached (process-wide, thread-safe). Weights in
// the primitive's layout are kept per (primitive, weight buffer) with a copy of the plain
// weights they came from; every run compares the current weights with that copy (a memcmp) and
// reorders again when they differ, so weights updated in place between runs (an optimizer's
// step) are always used. The kept copies cost twice the convolution weights' size in memory
// (bounded at 256 MiB, then dropped).
//
// BRAID_DNNL_CONV=0 in the environment (read once) turns the oneDNN convolutions off, and
// set_dnnl_conv_enabled() does so for the calling process (tests compare both paths). It does
// not affect the oneDNN sgemm of operators/dense_kernels.h.
#pragma once

#include "memory/tensor.h"
#include "memory/workspace.h"
#include "operators/conv.h"

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

namespace braid::opr::kern {

//! Whether the oneDNN kernels are built in and enabled (see the file comment).
bool dnnl_conv_enabled();
//! Turns the oneDNN kernels on or off for later calls (no effect without oneDNN). Thread-safe.
void set_dnnl_conv_enabled(bool on);

/*!
 * The weights of one convolution operator whose weights are constants (a model's
 * initializers), in the layouts its oneDNN primitives take, scaled by its folded batch norm:
 * made on the first run of each primitive and block, then used as they are, where weights
 * that may change are compared with a kept copy on every run (a memcmp of the weights and,
 * with a batch norm, a scaled copy: 0.2 ms per run for a 1024->64 3x3 convolution's 2.4 MB).
 * Owned by the operator, so it lives exactly as long as the constants it was made from.
 * Thread-safe.
 */
class DnnlConstantWeights {
public:
    DnnlConstantWeights();
    ~DnnlConstantWeights();
    DnnlConstantWeights(const DnnlConstantWeights&) = delete;
    DnnlConstantWeights& operator=(const DnnlConstantWeights&) = delete;
    struct Impl;
    Impl& impl() { return *m_impl; }

private:
    std::unique_ptr<Impl> m_impl;
};

//! `kept` when every var of `vars` is a constant (an ImmutableTensor's value), else null: what
//! a convolution passes as DnnlConvFusion::constant_weights for its weights (and batch norm).
DnnlConstantWeights* if_constant(DnnlConstantWeights& kept, std::initializer_list<VarNode*> vars);

//! What is fused into a oneDNN convolution, per output channel c:
//! y = conv(x, w · scale[c]) + shift[c], where a null scale or shift is 1 or 0. Activations run
//! in the caller's epilogue: oneDNN's relu post-op maps NaN to 0 at some instruction sets and
//! passes it at others, where braid's relu passes it everywhere.
struct DnnlConvFusion {
    const float* scale = nullptr; //!< folded into the weights before the convolution
    const float* shift = nullptr; //!< the convolution's bias
    //! Set when w and scale are the same on every run while this lives: their primitive forms
    //! are kept in it instead of compared with a copy on each run.
    DnnlConstantWeights* constant_weights = nullptr;
};

/*!
 * Runs conv2d_forward()'s convolution with oneDNN on float32 contiguous NCHW x, OIHW w and
 * y (allocated with the output shape), with `fusion` applied and then `epilogue` (if any) over
 * each finished block of y, as conv2d_forward() calls it. Returns false, having written
 * nothing, when oneDNN is disabled, has no JIT kernel for the case, or braid's kernel runs it
 * faster (pointwise convolutions, and ungrouped ones of one input channel); the caller then
 * runs braid's own kernel. Its buffers come from `workspace`.
 */
bool dnnl_conv2d_forward(const Conv2dParam& param, const Tensor& x, const Tensor& w, Tensor& y,
                         const DnnlConvFusion& fusion, const ConvEpilogue* epilogue,
                         Workspace& workspace);

//! The workspace bytes dnnl_conv2d_forward() asks for on x and w of these shapes (which of
//! `fusion`'s pointers are set matters, not their values) at the calling thread's kernel
//! threads; nullopt where it declines the case (braid's kernel runs it). Creates and caches
//! the primitives.
std::optional<size_t> dnnl_conv2d_workspace(const Conv2dParam& param, const TensorShape& x,
                                            const TensorShape& w, const DnnlConvFusion& fusion);

/*!
 * Runs an integer convolution with oneDNN on contiguous NCHW x (uint8 or int8), OIHW w (int8)
 * and int32 y (allocated with the output shape): y = the sum of (x - x_zero_point) * w over
 * each window, padding contributing nothing (as if x were padded with its zero point), exact.
 * Returns false, having written nothing, when oneDNN is disabled or has no exact kernel for the
 * case: its int8 kernels sum 8-bit products exactly only with VNNI or AMX instructions (without,
 * pairs of products are added in 16 bits with saturation), unless `source_below_128` says that
 * a uint8 x holds values below 128 only: then a pair of products stays within 16 bits (at most
 * 2 * 127 * 128) and every int8 kernel sums exactly. `constant_weights`, when set, keeps w's
 * primitive forms as for dnnl_conv2d_forward().
 */
bool dnnl_conv_integer_forward(const Conv2dParam& param, const Tensor& x, const Tensor& w,
                               int32_t x_zero_point, Tensor& y,
                               DnnlConstantWeights* constant_weights, Workspace& workspace,
                               bool source_below_128 = false);

//! The workspace bytes dnnl_conv_integer_forward() asks for, as dnnl_conv2d_workspace().
size_t dnnl_conv_integer_workspace(const Conv2dParam& param, const TensorShape& x, DType x_dtype,
                                   const TensorShape& w, bool source_below_128 = false);

/*!
 * The oneDNN implementation dnnl_conv2d_forward() runs for one batch item of x [N, C, H, W]
 * convolved with w [O, C/groups, KH, KW] computing all O channels (e.g. "jit:avx2" or
 * "jit_fp32_wino_2x3:avx512_core"), or "" where it runs braid's own kernel. For tests and
 * benchmarks; creates and caches the primitive.
 */
std::string dnnl_conv2d_impl(const Conv2dParam& param, const TensorShape& x, const TensorShape& w,
                             const DnnlConvFusion& fusion = {});

} // namespace braid::opr::kern
