// CUDA kernel of Elemwise: picks the flat or the strided launch and reports integer division
// by zero like the CPU kernel.
#include "operators/elemwise.h"
#include "base/cuda_check.h"
#include "base/error.h"
#include "memory/cuda_allocator.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/elemwise_kernels.h"

namespace braid::opr::cuda {

namespace {

//! The mode numbering of elemwise.cu, or -1 for modes that have no CUDA kernel yet.
int cuda_mode(ElemMode mode) {
    switch (mode) {
    case ElemMode::NEG:
        return 0;
    case ElemMode::ABS:
        return 1;
    case ElemMode::RELU:
        return 2;
    case ElemMode::EXP:
        return 3;
    case ElemMode::LOG:
        return 4;
    case ElemMode::TANH:
        return 5;
    case ElemMode::SIGMOID:
        return 6;
    case ElemMode::ADD:
        return 7;
    case ElemMode::SUB:
        return 8;
    case ElemMode::MUL:
        return 9;
    case ElemMode::TRUE_DIV:
        return 10;
    case ElemMode::FLOOR_DIV:
        return 11;
    case ElemMode::MAX:
        return 12;
    case ElemMode::MIN:
        return 13;
    default:
        return -1;
    }
}

//! A device-visible error flag in pinned memory (integer division by zero).
struct ElemwiseState final : KernelState {
    Storage flag;
};

void elemwise_cuda(OperatorNode& opr, ExecCtx& ctx) {
    auto& ew = static_cast<Elemwise&>(opr);
    auto& cuda = cuda_context(opr.comp_node());
    Tensor& y = ctx.output(0);
    braid::cuda::ElemwiseLaunch L;
    L.n = int64_t(y.shape().total_nr_elems());
    if (L.n == 0) return;
    L.mode = cuda_mode(ew.mode());
    if (L.mode < 0)
        BRAID_THROW(GraphError, "{} has no CUDA kernel for mode {} on {}", opr.describe(),
                    elem_mode_name(ew.mode()), opr.comp_node().locator());
    L.dtype = dtype_code(y.dtype());
    L.arity = int(ctx.nr_inputs());
    L.out = y.raw_ptr();
    L.max_blocks = int64_t(cuda.sm_count()) * 8;
    for (int i = 0; i < L.arity; ++i) {
        const Tensor& x = ctx.input(size_t(i));
        L.in[i] = x.raw_ptr();
        int64_t nx = int64_t(x.shape().total_nr_elems());
        L.scalar[i] = nx == 1 && L.n != 1;
        // Same element count as a broadcastable output means the same row-major order.
        if (!(L.scalar[i] || (nx == L.n && x.layout().is_contiguous()))) L.flat = false;
    }
    if (!L.flat) {
        L.scalar[0] = L.scalar[1] = false;
        const TensorShape& ys = y.shape();
        L.ndim = int(ys.ndim());
        for (int d = 0; d < L.ndim; ++d) L.shape[d] = int64_t(ys[size_t(d)]);
        for (int i = 0; i < L.arity; ++i) {
            TensorLayout lb = ctx.input(size_t(i)).layout().broadcast(ys);
            for (int d = 0; d < L.ndim; ++d) L.stride[i][d] = lb.stride[size_t(d)];
        }
    }
    bool int_div = ew.mode() == ElemMode::FLOOR_DIV && !y.dtype().is_float();
    int* flag = nullptr;
    if (int_div) {
        auto& st = kernel_state<ElemwiseState>(opr);
        if (st.flag.empty()) st.flag = Storage::make(sizeof(int), CudaHostAllocator::instance());
        flag = reinterpret_cast<int*>(st.flag.ptr());
        *flag = 0; // the previous run's kernel finished (each run ends synchronised)
    }
    L.error_flag = flag;
    if (!braid::cuda::launch_elemwise(L, cuda.stream()))
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                    y.dtype().name());
    if (int_div) {
        // Rare (shape arithmetic): wait for the result to report division by zero as the CPU
        // kernel does.
        cuda.synchronize();
        if (*flag) BRAID_THROW(DTypeError, "Elemwise(FLOOR_DIV): integer division by zero");
    }
}

} // namespace

void register_elemwise_kernels() {
    register_kernel("Elemwise", Device::Kind::CUDA, &elemwise_cuda);
}

} // namespace braid::opr::cuda
