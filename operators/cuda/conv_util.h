// What the CUDA kernels of Conv2d (operators/cuda/conv.cpp) and of its gradient operators
// (operators/cuda/conv_backward.cpp) share: the dimensions of a convolution, the cuBLAS data type
// of a float dtype, and, with cuDNN, the descriptors of one convolution, the plan kept between
// executions (algorithm and workspace for the last shapes seen) and the rule that picks an
// algorithm among cuDNN's heuristic results.
//
// Algorithm rule: the first result (cuDNN lists them best first) that succeeded, needs at most
// MAX_CUDNN_WORKSPACE bytes and, for float32, uses FMA math (never TF32 tensor cores, which
// round the inputs to 10 mantissa bits); a deterministic one is preferred over a faster one that
// is not (backward algorithms that add with atomics would make training runs differ).
#pragma once

#include "graph/operator_node.h"
#include "memory/tensor.h"
#include "operators/conv.h"
#include "operators/cuda/conv_kernels.h"

#include <library_types.h>

#include <cstddef>
#include <limits>

#if BRAID_WITH_CUDNN
#include "base/error.h"
#include "base/log.h"
#include "operators/cuda/cudnn_library.h"
#endif

namespace braid::opr::cuda {

//! The dims of a convolution of x [n, c, h, w] with w [o, cg, kh, kw] giving y [n, o, oh, ow].
struct ConvDims {
    size_t n, c, h, w;     //!< input
    size_t o, kh, kw;      //!< weight (o filters of cg x kh x kw)
    size_t oh, ow;         //!< output spatial size
    size_t groups, cg, og; //!< groups, input and output channels per group
};

//! The dims of the convolution `p` of an x of shape `xs` with a w of shape `ws` giving `ys`.
ConvDims conv_dims(const Conv2dParam& p, const TensorShape& xs, const TensorShape& ws,
                   const TensorShape& ys);

//! Whether the im2col columns of the convolution are its input itself (1x1 kernel, stride 1,
//! no padding).
bool is_pointwise(const Conv2dParam& p, const ConvDims& d);

//! The geometry of one batch item of `d` for the im2col and col2im kernels.
braid::cuda::Im2colGeometry im2col_geometry(const Conv2dParam& p, const ConvDims& d);

//! The largest size cuBLAS and cuDNN's legacy API take (int).
constexpr size_t INT_LIMIT = size_t(std::numeric_limits<int>::max());

//! Throws ShapeError naming `opr` when the per-group GEMMs of the im2col / col2im kernels
//! (og x oh·ow x cg·kh·kw, over `groups` batches) exceed cuBLAS's 32-bit sizes.
void check_gemm_dims(const OperatorNode& opr, const ConvDims& d);

//! The cuBLAS data type of float dtype `dt`; DTypeError naming `opr` for another dtype.
cudaDataType cuda_data_type(const OperatorNode& opr, DType dt);

#if BRAID_WITH_CUDNN

//! The largest workspace a cuDNN algorithm may ask for.
constexpr size_t MAX_CUDNN_WORKSPACE = size_t(1) << 30;

//! Whether cuDNN's legacy API can take the convolution `d`: every dim and the element count of
//! x and y fit an int (its algorithms index with 32 bits).
bool fits_cudnn(const ConvDims& d);

//! The descriptors of one convolution: x, w, y and the convolution itself. Created by the first
//! set(), destroyed with the object. Not thread-safe (one per operator).
struct CudnnConvDescriptors {
    const CudnnApi* api = nullptr;
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;

    CudnnConvDescriptors() = default;
    CudnnConvDescriptors(const CudnnConvDescriptors&) = delete;
    CudnnConvDescriptors& operator=(const CudnnConvDescriptors&) = delete;
    ~CudnnConvDescriptors();

    //! Describes the NCHW cross-correlation `d` with geometry `p` in dtype `dt`, accumulated
    //! in float32 (float32: FMA math only; float16 and bfloat16: tensor cores allowed).
    void set(const CudnnApi& cudnn, const Conv2dParam& p, const ConvDims& d, DType dt);
};

//! What a CUDA convolution kernel keeps between executions: the descriptors and the algorithm
//! of the last operand shapes and dtype it saw.
template <typename Algo> struct CudnnConvPlan final : KernelState {
    CudnnConvDescriptors desc;
    TensorShape a, b;       //!< the two operand shapes planned for
    DType dtype;            //!< the dtype planned for
    bool planned = false;   //!< the fields below describe a, b and dtype
    bool use_cudnn = false; //!< false: cuDNN has no algorithm for them (fallback kernel instead)
    Algo algo{};
    size_t workspace = 0; //!< bytes the algorithm needs
};

//! A cuDNN workspace of `bytes` from `cn`'s allocator; `ptr` is null for 0 bytes.
struct CudnnWorkspace {
    Tensor buffer;
    void* ptr = nullptr;
    CudnnWorkspace(CompNode cn, size_t bytes) {
        if (!bytes) return;
        buffer = Tensor(TensorShape{bytes}, dtype::Uint8(), cn.allocator());
        ptr = buffer.raw_ptr();
    }
};

//! The result `perf[i]` (i < count) the algorithm rule in the file comment picks for dtype `dt`,
//! or nullptr when none qualifies. Perf is one of cuDNN's *AlgoPerf_t result types.
template <typename Perf> const Perf* pick_cudnn_algo(const Perf* perf, int count, DType dt) {
    const Perf* fallback = nullptr;
    for (int i = 0; i < count; ++i) {
        const Perf& r = perf[i];
        if (r.status != CUDNN_STATUS_SUCCESS || r.memory > MAX_CUDNN_WORKSPACE) continue;
        if (dt == dtype::Float32() && r.mathType != CUDNN_FMA_MATH &&
            r.mathType != CUDNN_DEFAULT_MATH)
            continue; // a tensor-core (TF32) algorithm
        if (r.determinism == CUDNN_DETERMINISTIC) return &r;
        if (!fallback) fallback = &r;
    }
    return fallback;
}

/*!
 * Makes `plan` describe operand shapes `a`, `b` and dtype `dt` unless it already does:
 * `make_plan()` sets the descriptors and picks the algorithm, returning false when cuDNN has
 * none; a LibraryError while planning is logged as a warning naming `opr` and counts as none
 * (the kernel then uses its fallback). Returns whether cuDNN runs these shapes.
 */
template <typename Algo, typename MakePlan>
bool ensure_cudnn_plan(CudnnConvPlan<Algo>& plan, const OperatorNode& opr, const TensorShape& a,
                       const TensorShape& b, DType dt, MakePlan&& make_plan) {
    if (plan.planned && plan.a == a && plan.b == b && plan.dtype == dt) return plan.use_cudnn;
    plan.planned = false;
    try {
        plan.use_cudnn = make_plan();
    } catch (const LibraryError& e) {
        logger()->warn(
            "{}: cuDNN cannot run this convolution ({}); using im2col / col2im and cuBLAS",
            opr.describe(), e.what());
        plan.use_cudnn = false;
    }
    plan.a = a;
    plan.b = b;
    plan.dtype = dt;
    plan.planned = true;
    return plan.use_cudnn;
}

#endif // BRAID_WITH_CUDNN

} // namespace braid::opr::cuda
