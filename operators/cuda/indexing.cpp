// CUDA kernels of the int32-indexed operators: Gather, IndexingOneHot, Embedding and their
// transposes ScatterAdd and IndexAdd.
//
// An index out of range is a ValueError naming the index, its position and the valid range, as
// on the CPU: the kernels record the first bad position in device memory and the glue waits for
// the stream after the launch to report it. That wait costs a stream synchronisation per
// execution of these operators (the host cannot run ahead of the device past them).
#include "operators/indexing.h"
#include "base/cuda_check.h"
#include "base/error.h"
#include "memory/cuda_allocator.h"
#include "operators/cuda/convert_kernels.h"
#include "operators/cuda/cuda_kernels.h"
#include "operators/cuda/indexing_kernels.h"
#include "operators/kernel_utils.h"
#include "operators/scatter.h"

#include <cstring>

namespace braid::opr::cuda {

namespace {

//! The first bad index position: device memory the kernels lower, and a pinned host copy.
struct IndexCheckState final : KernelState {
    Tensor device;
    Storage host;
};

//! Resets the bad position (to UINT64_MAX) on the stream; returns its device address.
unsigned long long* begin_check(OperatorNode& opr, cudaStream_t stream) {
    auto& st = kernel_state<IndexCheckState>(opr);
    if (st.device.empty())
        st.device = Tensor(TensorShape{1}, dtype::Int64(), opr.comp_node().allocator());
    if (st.host.empty()) st.host = Storage::make(sizeof(uint64_t), CudaHostAllocator::instance());
    BRAID_CUDA_CHECK(cudaMemsetAsync(st.device.raw_ptr(), 0xff, sizeof(uint64_t), stream));
    return reinterpret_cast<unsigned long long*>(st.device.raw_ptr());
}

//! Waits for the kernels enqueued so far; returns the first bad position, or -1 when every
//! index was in range.
int64_t finish_check(OperatorNode& opr) {
    auto& st = kernel_state<IndexCheckState>(opr);
    auto& cuda = cuda_context(opr.comp_node());
    BRAID_CUDA_CHECK(cudaMemcpyAsync(st.host.ptr(), st.device.raw_ptr(), sizeof(uint64_t),
                                     cudaMemcpyDeviceToHost, cuda.stream()));
    cuda.synchronize();
    uint64_t pos;
    std::memcpy(&pos, st.host.ptr(), sizeof(pos));
    return pos == ~uint64_t(0) ? -1 : int64_t(pos);
}

//! Element `pos` of the device int32 tensor `idx` (after finish_check: the stream is idle).
int32_t index_at(const Tensor& idx, int64_t pos) {
    int32_t v = 0;
    BRAID_CUDA_CHECK(cudaMemcpy(&v, idx.ptr<int32_t>() + pos, sizeof(v), cudaMemcpyDeviceToHost));
    return v;
}

[[noreturn]] void bad_index(const OperatorNode& opr, const Tensor& idx, int64_t pos, size_t axis,
                            size_t n) {
    BRAID_THROW(ValueError,
                "{}: index {} at position {} is out of range for axis {} of size {} (valid: "
                "0..{})",
                opr.describe(), index_at(idx, pos), pos, axis, n, long(n) - 1);
}

//! Gather (m = the index's length along the axis) and IndexingOneHot (m = 1).
void gather_along(OperatorNode& opr, ExecCtx& ctx, int axis_param, bool one_hot) {
    const Tensor &x = ctx.input(0), &idx = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    cudaStream_t stream = cuda_context(opr.comp_node()).stream();
    size_t axis = normalize_axis(axis_param, x.shape().ndim(), opr.describe());
    AxisSplit xs = split_shape(x.shape(), axis, axis + 1);
    size_t m = one_hot ? 1 : idx.shape()[axis];
    unsigned long long* bad = begin_check(opr, stream);
    braid::cuda::launch_gather(x.raw_ptr(), idx.ptr<int32_t>(), y.raw_ptr(), int64_t(xs.outer),
                               int64_t(xs.n), int64_t(m), int64_t(xs.inner), int(x.dtype().size()),
                               bad, stream);
    int64_t pos = finish_check(opr);
    if (pos >= 0) bad_index(opr, idx, pos, axis, xs.n);
}

void gather_cuda(OperatorNode& opr, ExecCtx& ctx) {
    gather_along(opr, ctx, static_cast<Gather&>(opr).axis(), false);
}

void indexing_one_hot_cuda(OperatorNode& opr, ExecCtx& ctx) {
    gather_along(opr, ctx, static_cast<IndexingOneHot&>(opr).axis(), true);
}

void embedding_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const Tensor &table = ctx.input(0), &ids = ctx.input(1);
    Tensor& y = ctx.output(0);
    size_t rows = table.shape()[0], dim = table.shape()[1];
    size_t count = ids.shape().total_nr_elems();
    if (count == 0) return; // ids are checked even when the rows are empty, as on the CPU
    cudaStream_t stream = cuda_context(opr.comp_node()).stream();
    unsigned long long* bad = begin_check(opr, stream);
    braid::cuda::launch_embedding(table.raw_ptr(), ids.ptr<int32_t>(), y.raw_ptr(), int64_t(count),
                                  int64_t(rows), int64_t(dim), int(table.dtype().size()), bad,
                                  stream);
    int64_t pos = finish_check(opr);
    if (pos >= 0)
        BRAID_THROW(ValueError,
                    "{}: id {} at position {} is out of range for a table of {} rows (valid ids: "
                    "0..{})",
                    opr.describe(), index_at(ids, pos), pos, rows, long(rows) - 1);
}

//! ScatterAdd (`per_element`) and IndexAdd: out = x, then the values added in float32 (float
//! dtypes; float16/bfloat16 through a float32 copy, rounded once at the end) or in the integer
//! type.
void scatter_along(OperatorNode& opr, ExecCtx& ctx, int axis_param, bool per_element) {
    const Tensor &x = ctx.input(0), &idx = ctx.input(1), &value = ctx.input(2);
    Tensor& out = ctx.output(0);
    if (out.shape().is_empty()) return;
    CompNode cn = opr.comp_node();
    cudaStream_t stream = cuda_context(cn).stream();
    size_t axis = normalize_axis(axis_param, x.shape().ndim(), opr.describe());
    AxisSplit xs = split_shape(x.shape(), axis, axis + 1);
    size_t m = per_element ? idx.shape()[axis] : idx.shape()[0];
    DType dt = out.dtype();
    int64_t n = int64_t(out.shape().total_nr_elems());
    bool staged = dt == dtype::Float16() || dt == dtype::BFloat16();
    Tensor acc;
    if (staged) {
        acc = Tensor(x.shape(), dtype::Float32(), cn.allocator());
        braid::cuda::launch_convert(dtype_code(dt), x.raw_ptr(), dtype_code(dtype::Float32()),
                                    acc.raw_ptr(), n, stream);
    } else {
        if (out.raw_ptr() != x.raw_ptr()) cn.copy(out, x);
        acc = out;
    }
    unsigned long long* bad = begin_check(opr, stream);
    if (!braid::cuda::launch_scatter_add(dtype_code(acc.dtype()), acc.raw_ptr(),
                                         dtype_code(value.dtype()), value.raw_ptr(),
                                         idx.ptr<int32_t>(), per_element, int64_t(xs.outer),
                                         int64_t(xs.n), int64_t(m), int64_t(xs.inner), bad, stream))
        BRAID_THROW(DTypeError, "{}: no CUDA kernel for dtype {}", opr.describe(), dt.name());
    if (staged)
        braid::cuda::launch_convert(dtype_code(dtype::Float32()), acc.raw_ptr(), dtype_code(dt),
                                    out.raw_ptr(), n, stream);
    int64_t pos = finish_check(opr);
    if (pos >= 0) bad_index(opr, idx, pos, axis, xs.n);
}

void scatter_add_cuda(OperatorNode& opr, ExecCtx& ctx) {
    scatter_along(opr, ctx, static_cast<ScatterAdd&>(opr).axis(), true);
}

void index_add_cuda(OperatorNode& opr, ExecCtx& ctx) {
    scatter_along(opr, ctx, static_cast<IndexAdd&>(opr).axis(), false);
}

} // namespace

void register_indexing_kernels() {
    register_kernel("Gather", Device::Kind::CUDA, &gather_cuda);
    register_kernel("IndexingOneHot", Device::Kind::CUDA, &indexing_one_hot_cuda);
    register_kernel("Embedding", Device::Kind::CUDA, &embedding_cuda);
    register_kernel("ScatterAdd", Device::Kind::CUDA, &scatter_add_cuda);
    register_kernel("IndexAdd", Device::Kind::CUDA, &index_add_cuda);
}

} // namespace braid::opr::cuda
