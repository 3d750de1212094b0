// CUDA kernel of Elemwise (every mode): picks the flat or the strided launch and reports integer
// division by zero and negative integer exponents like the CPU kernel.
#include "operators/elemwise.h"
#include "base/cuda_check.h"
#include "base/error.h"
#include "memory/cuda_allocator.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/elemwise_kernels.h"

namespace braid::opr::cuda {

namespace {

using braid::cuda::ElemKernelMode;

// The kernels number the modes like ElemMode.
#define BRAID_SAME_MODE(M)                                                                         \
    static_assert(int(ElemMode::M) == int(ElemKernelMode::M), "ElemKernelMode::" #M)
BRAID_SAME_MODE(NEG);
BRAID_SAME_MODE(ABS);
BRAID_SAME_MODE(SIGN);
BRAID_SAME_MODE(RELU);
BRAID_SAME_MODE(EXP);
BRAID_SAME_MODE(EXPM1);
BRAID_SAME_MODE(LOG);
BRAID_SAME_MODE(LOG1P);
BRAID_SAME_MODE(SQRT);
BRAID_SAME_MODE(RSQRT);
BRAID_SAME_MODE(SQUARE);
BRAID_SAME_MODE(SIN);
BRAID_SAME_MODE(COS);
BRAID_SAME_MODE(TANH);
BRAID_SAME_MODE(SIGMOID);
BRAID_SAME_MODE(GELU);
BRAID_SAME_MODE(GELU_TANH);
BRAID_SAME_MODE(SILU);
BRAID_SAME_MODE(ERF);
BRAID_SAME_MODE(FLOOR);
BRAID_SAME_MODE(CEIL);
BRAID_SAME_MODE(ROUND);
BRAID_SAME_MODE(LOGICAL_NOT);
BRAID_SAME_MODE(ADD);
BRAID_SAME_MODE(SUB);
BRAID_SAME_MODE(MUL);
BRAID_SAME_MODE(TRUE_DIV);
BRAID_SAME_MODE(FLOOR_DIV);
BRAID_SAME_MODE(MOD);
BRAID_SAME_MODE(POW);
BRAID_SAME_MODE(MAX);
BRAID_SAME_MODE(MIN);
BRAID_SAME_MODE(LT);
BRAID_SAME_MODE(LEQ);
BRAID_SAME_MODE(EQ);
BRAID_SAME_MODE(NEQ);
BRAID_SAME_MODE(LOGICAL_AND);
BRAID_SAME_MODE(LOGICAL_OR);
BRAID_SAME_MODE(LOGICAL_XOR);
BRAID_SAME_MODE(CLIP);
BRAID_SAME_MODE(WHERE);
BRAID_SAME_MODE(COND_LEQ_MOV);
BRAID_SAME_MODE(FMA3);
#undef BRAID_SAME_MODE
static_assert(int(ElemMode::FMA3) + 1 == int(ElemKernelMode::NR_MODES),
              "operators/cuda/elemwise_kernels.h lists every ElemMode");

//! A device-visible error flag in pinned memory (integer division by zero, negative integer
//! exponent).
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
    ElemMode mode = ew.mode();
    L.mode = ElemKernelMode(int(mode));
    // The dtype the mode computes on: the inputs' (WHERE: its branches', after the condition).
    DType compute = ctx.input(mode == ElemMode::WHERE ? 1 : 0).dtype();
    L.dtype = dtype_code(compute);
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
        for (bool& s : L.scalar) s = false;
        const TensorShape& ys = y.shape();
        L.ndim = int(ys.ndim());
        for (int d = 0; d < L.ndim; ++d) L.shape[d] = int64_t(ys[size_t(d)]);
        for (int i = 0; i < L.arity; ++i) {
            TensorLayout lb = ctx.input(size_t(i)).layout().broadcast(ys);
            for (int d = 0; d < L.ndim; ++d) L.stride[i][d] = lb.stride[size_t(d)];
        }
    }
    // Integer FLOOR_DIV and MOD fail on a zero divisor, integer POW on a negative exponent.
    bool checked =
        (mode == ElemMode::FLOOR_DIV || mode == ElemMode::MOD || mode == ElemMode::POW) &&
        compute.is_integer();
    int* flag = nullptr;
    if (checked) {
        auto& st = kernel_state<ElemwiseState>(opr);
        if (st.flag.empty()) st.flag = Storage::make(sizeof(int), CudaHostAllocator::instance());
        flag = reinterpret_cast<int*>(st.flag.ptr());
        *flag = braid::cuda::ELEM_ERR_NONE; // the previous run's kernel finished (runs end
                                            // synchronised)
    }
    L.error_flag = flag;
    if (!braid::cuda::launch_elemwise(L, cuda.stream()))
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for mode {} on dtype {}", opr.describe(),
                    elem_mode_name(mode), compute.name());
    if (checked) {
        // Rare (shape arithmetic): wait for the result to report the error as the CPU kernel
        // does.
        cuda.synchronize();
        if (*flag == braid::cuda::ELEM_ERR_DIV_ZERO)
            BRAID_THROW(ValueError, "{}: integer division by zero", opr.describe());
        if (*flag == braid::cuda::ELEM_ERR_NEGATIVE_EXP)
            BRAID_THROW(ValueError, "{}: an integer base cannot take a negative integer exponent",
                        opr.describe());
    }
}

} // namespace

void register_elemwise_kernels() {
    register_kernel("Elemwise", Device::Kind::CUDA, &elemwise_cuda);
}

} // namespace braid::opr::cuda
