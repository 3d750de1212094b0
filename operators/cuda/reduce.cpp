// CUDA kernel of Reduce (every mode): groups adjacent reduced axes, reduces the groups from the
// innermost one outwards with (outer, n, inner) passes, splitting long axes over several blocks,
// then converts the accumulators into the output dtype (dividing for MEAN). ArgReduce: one
// launch over the (outer, n, inner) view of its axis.
#include "operators/reduce.h"
#include "base/error.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/reduce_kernels.h"
#include "operators/kernel_utils.h"

#include <algorithm>

namespace braid::opr::cuda {

namespace {

using braid::cuda::ReduceCombine;
using braid::cuda::ReducePass;

//! How many pieces to split a reduced axis into so that the device has enough work.
int64_t choose_splits(int64_t outer, int64_t n, int64_t inner, int sm_count) {
    if (n <= 1) return 1;
    if (inner == 1) {
        // One block per (row, split): aim for 4 blocks per multiprocessor, >= 4096 items each.
        int64_t want = (int64_t(sm_count) * 4 + outer - 1) / outer;
        return std::clamp<int64_t>(std::min(want, (n + 4095) / 4096), 1, 1024);
    }
    // One thread per (outer, split, inner): aim for 1024 threads per multiprocessor, each
    // walking >= 64 items.
    int64_t cols = outer * inner;
    int64_t want = (int64_t(sm_count) * 1024 + cols - 1) / cols;
    return std::clamp<int64_t>(std::min(want, (n + 63) / 64), 1, 1024);
}

void reduce_cuda(OperatorNode& opr, ExecCtx& ctx) {
    auto& red = static_cast<Reduce&>(opr);
    CompNode cn = opr.comp_node();
    auto& cuda = cuda_context(cn);
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    int64_t ny = int64_t(y.shape().total_nr_elems());
    if (ny == 0) return;

    // The reduced axes (same rules as the CPU kernel: empty list = every axis).
    const auto& param = red.param();
    TensorShape shape = x.shape();
    size_t nd = shape.ndim();
    std::vector<bool> reduced(nd, param.axes.empty());
    for (int a : param.axes) reduced[size_t(a < 0 ? a + int(nd) : a)] = true;
    int64_t count = 1;
    for (size_t d = 0; d < nd; ++d)
        if (reduced[d]) count *= int64_t(shape[d]);

    // Never float64 here: resolve_kernel refuses CUDA kernels for float64 vars.
    bool float_acc = x.dtype().is_float();
    ReduceCombine combine = ReduceCombine::SUM; // SUM and MEAN
    switch (param.mode) {
    case ReduceMode::MAX:
        combine = ReduceCombine::MAX;
        break;
    case ReduceMode::MIN:
        combine = ReduceCombine::MIN;
        break;
    case ReduceMode::PROD:
        combine = ReduceCombine::PROD;
        break;
    case ReduceMode::SUM_SQR:
        combine = ReduceCombine::SUM_SQR;
        break;
    default:
        break;
    }
    // Accumulators: float32 for float inputs, double for their products (the CPU multiplies
    // in double too), int64 for integers. Doubles live in int64-typed buffers (same size).
    bool f64_acc = float_acc && combine == ReduceCombine::PROD;
    DType acc_dtype = float_acc && !f64_acc ? dtype::Float32() : dtype::Int64();
    int acc_code = f64_acc ? braid::cuda::REDUCE_ACC_F64 : dtype_code(acc_dtype);
    bool mean = param.mode == ReduceMode::MEAN;

    // Groups of adjacent reduced axes, innermost first.
    std::vector<std::pair<size_t, size_t>> groups; // [begin, end)
    for (size_t d = nd; d-- > 0;) {
        if (!reduced[d]) continue;
        if (!groups.empty() && groups.back().first == d + 1)
            groups.back().first = d;
        else
            groups.emplace_back(d, d + 1);
    }

    const void* cur = x.raw_ptr();
    int cur_dtype = dtype_code(x.dtype());
    Tensor cur_buf; // keeps the previous pass's accumulators alive
    auto run_pass = [&](int64_t outer, int64_t n, int64_t inner, void* out_ptr, int64_t splits) {
        ReducePass p;
        p.in_dtype = cur_dtype;
        p.combine = combine;
        p.in = cur;
        p.out = out_ptr;
        p.outer = outer;
        p.n = n;
        p.inner = inner;
        p.splits = splits;
        if (!braid::cuda::launch_reduce_pass(p, cuda.stream()))
            BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                        x.dtype().name());
        cur = out_ptr;
        cur_dtype = acc_code;
        // SUM_SQR squared the elements; its accumulators only need summing.
        if (combine == ReduceCombine::SUM_SQR) combine = ReduceCombine::SUM;
    };
    bool need_finalize = mean || f64_acc || y.dtype() != acc_dtype;
    if (groups.empty()) {
        // Nothing reduced: a copy through one pass over n = 1.
        Tensor acc(TensorShape{size_t(ny)}, acc_dtype, cn.allocator());
        run_pass(ny, 1, 1, acc.raw_ptr(), 1);
        cur_buf = acc;
    }
    for (size_t g = 0; g < groups.size(); ++g) {
        auto [b, e] = groups[g];
        int64_t outer = 1, n = 1, inner = 1;
        for (size_t d = 0; d < b; ++d) outer *= int64_t(shape[d]);
        for (size_t d = b; d < e; ++d) n *= int64_t(shape[d]);
        for (size_t d = e; d < nd; ++d) inner *= int64_t(shape[d]);
        for (size_t d = b; d < e; ++d) shape[d] = 1;
        bool last_group = g + 1 == groups.size();
        int64_t splits = choose_splits(outer, n, inner, cuda.sm_count());
        while (true) {
            bool final_pass = last_group && splits == 1;
            void* out_ptr = nullptr;
            Tensor acc;
            if (final_pass && !need_finalize) {
                out_ptr = y.raw_ptr(); // the accumulator type is the output type
            } else {
                acc =
                    Tensor(TensorShape{size_t(outer * splits * inner)}, acc_dtype, cn.allocator());
                out_ptr = acc.raw_ptr();
            }
            run_pass(outer, n, inner, out_ptr, splits);
            if (!acc.empty()) cur_buf = acc;
            if (splits == 1) break;
            n = splits; // reduce the partial results (outer, splits, inner) again
            splits = choose_splits(outer, n, inner, cuda.sm_count());
        }
    }
    if (need_finalize || groups.empty()) {
        if (!braid::cuda::launch_reduce_finalize(acc_code, cur, dtype_code(y.dtype()), y.raw_ptr(),
                                                 ny, mean, count, cuda.stream()))
            BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                        y.dtype().name());
    }
}

void arg_reduce_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const auto& param = static_cast<ArgReduce&>(opr).param();
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    size_t axis = normalize_axis(param.axis, x.shape().ndim(), opr.describe());
    AxisSplit sp = split_shape(x.shape(), axis, axis + 1);
    if (!braid::cuda::launch_arg_reduce(dtype_code(x.dtype()), param.mode == ArgReduceMode::ARGMAX,
                                        x.raw_ptr(), reinterpret_cast<int32_t*>(y.raw_ptr()),
                                        int64_t(sp.outer), int64_t(sp.n), int64_t(sp.inner),
                                        cuda_context(opr.comp_node()).stream()))
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(),
                    x.dtype().name());
}

} // namespace

void register_reduce_kernels() {
    register_kernel("Reduce", Device::Kind::CUDA, &reduce_cuda);
    register_kernel("ArgReduce", Device::Kind::CUDA, &arg_reduce_cuda);
}

} // namespace braid::opr::cuda
