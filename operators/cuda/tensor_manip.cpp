// CUDA kernels of Reshape, GetVarShape, Broadcast, TypeCvt, Dimshuffle and AxisAddRemove.
#include "operators/tensor_manip.h"
#include "base/error.h"
#include "memory/cuda_copy.h"
#include "operators/cuda/convert_kernels.h"
#include "operators/cuda/cuda_kernels.h"

namespace braid::opr::cuda {

namespace {

//! A host copy of device tensor `t`, complete on return.
Tensor to_host(CompNode cn, const Tensor& t) {
    Tensor host(t.shape(), t.dtype());
    cn.copy(host, t);
    cn.device_sync();
    return host;
}

void reshape_cuda(OperatorNode& opr, ExecCtx& ctx) {
    CompNode cn = opr.comp_node();
    const Tensor& x = ctx.input(0);
    TensorShape shape;
    if (opr.output(0)->shape_known()) {
        shape = opr.output(0)->shape();
    } else {
        // A dynamic target: run the shape rule on the host value of the shape var.
        std::vector<const TensorShape*> shapes;
        std::vector<Tensor> host(ctx.nr_inputs());
        std::vector<const Tensor*> values;
        for (size_t i = 0; i < ctx.nr_inputs(); ++i) {
            shapes.push_back(&ctx.input(i).shape());
            if (opr.shape_needs_value(i)) host[i] = to_host(cn, ctx.input(i));
            values.push_back(opr.shape_needs_value(i) ? &host[i] : &ctx.input(i));
        }
        InferCtx ictx(shapes.data(), values.data(), shapes.size());
        bool ok = opr.infer_output_shapes(ictx, &shape);
        BRAID_ASSERT(ok, "{}: shape inference failed with every input known", opr.describe());
    }
    ctx.output(0) = contiguous_on(cn, x).reshape(shape);
}

struct ShapeState final : KernelState {
    PinnedStaging staging;
};

void get_var_shape_cuda(OperatorNode& opr, ExecCtx& ctx) {
    // The shape is known on the host: write it there and copy it up.
    const TensorShape& s = ctx.input(0).shape();
    Tensor host(TensorShape{s.ndim()}, dtype::Int32());
    for (size_t i = 0; i < s.ndim(); ++i) host.ptr<int32_t>()[i] = int32_t(s[i]);
    upload(opr.comp_node(), ctx.output(0), host, kernel_state<ShapeState>(opr).staging);
}

void broadcast_cuda(OperatorNode& opr, ExecCtx& ctx) {
    Tensor& out = ctx.output(0);
    const Tensor& x = ctx.input(0);
    cuda_copy_strided(out, x.view(x.layout().broadcast(out.shape())),
                      cuda_context(opr.comp_node()).stream());
}

void typecvt_cuda(OperatorNode& opr, ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (x.dtype() == y.dtype()) { // exact, as on the CPU (int64 would not survive a double)
        opr.comp_node().copy(y, x);
        return;
    }
    braid::cuda::launch_convert(dtype_code(x.dtype()), x.raw_ptr(), dtype_code(y.dtype()),
                                y.raw_ptr(), int64_t(x.shape().total_nr_elems()),
                                cuda_context(opr.comp_node()).stream());
}

void dimshuffle_cuda(OperatorNode& opr, ExecCtx& ctx) {
    if (opr.output_mem(0) == OutputMem::READONLY_FORWARD) {
        opr.execute(ctx); // the axes keep their order: a view, the same on every device
        return;
    }
    // A permutation: a strided device copy of the permuted view into the planned output.
    const auto& pattern = static_cast<Dimshuffle&>(opr).pattern();
    const Tensor& x = ctx.input(0);
    TensorLayout l;
    l.dtype = x.dtype();
    l.set_ndim(pattern.size());
    for (size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] < 0) { // a new unit axis
            l[i] = 1;
            l.stride[i] = 0;
        } else {
            l[i] = x.shape()[size_t(pattern[i])];
            l.stride[i] = x.layout().stride[size_t(pattern[i])];
        }
    }
    Tensor& y = ctx.output(0);
    if (y.shape().is_empty()) return;
    cuda_copy_strided(y, x.view(l), cuda_context(opr.comp_node()).stream());
}

void axis_add_remove_cuda(OperatorNode& opr, ExecCtx& ctx) {
    opr.execute(ctx); // always a view of the input
}

} // namespace

void register_tensor_manip_kernels() {
    register_kernel("Reshape", Device::Kind::CUDA, &reshape_cuda);
    register_kernel("GetVarShape", Device::Kind::CUDA, &get_var_shape_cuda);
    register_kernel("Broadcast", Device::Kind::CUDA, &broadcast_cuda);
    register_kernel("TypeCvt", Device::Kind::CUDA, &typecvt_cuda);
    register_kernel("Dimshuffle", Device::Kind::CUDA, &dimshuffle_cuda);
    register_kernel("AxisAddRemove", Device::Kind::CUDA, &axis_add_remove_cuda);
}

} // namespace braid::opr::cuda
