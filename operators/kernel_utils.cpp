#include "operators/kernel_utils.h"

#include "base/error.h"

namespace braid::opr {

size_t normalize_axis(long axis, size_t ndim, const std::string& who) {
    long v = axis < 0 ? axis + long(ndim) : axis;
    if (v < 0 || v >= long(ndim)) {
        if (ndim == 0)
            BRAID_THROW(ShapeError, "{}: axis {} out of range for a rank-0 input (it has no axes)",
                        who, axis);
        BRAID_THROW(ShapeError, "{}: axis {} out of range for a rank-{} input (valid: {}..{})", who,
                    axis, ndim, -long(ndim), long(ndim) - 1);
    }
    return size_t(v);
}

AxisSplit split_shape(const TensorShape& shape, size_t axis_begin, size_t axis_end) {
    AxisSplit s;
    for (size_t i = 0; i < shape.ndim(); ++i) {
        if (i < axis_begin)
            s.outer *= shape[i];
        else if (i < axis_end)
            s.n *= shape[i];
        else
            s.inner *= shape[i];
    }
    return s;
}

Tensor as_float32(const Tensor& t) {
    if (t.dtype() == dtype::Float32()) return t;
    // float64 has its own kernels; staging it here would compute it in float32 silently.
    BRAID_ASSERT(t.dtype() != dtype::Float64(), "float64 tensor staged through float32");
    Tensor r(t.shape(), dtype::Float32());
    Tensor src = t.contiguous();
    size_t n = t.shape().total_nr_elems();
    parallel_range(n, 1, [&](size_t b, size_t e) {
        convert_elements(src.dtype(), src.raw_ptr() + b * src.dtype().size(), dtype::Float32(),
                         r.ptr<float>() + b, e - b);
    });
    return r;
}

Tensor float32_like(const Tensor& out) {
    BRAID_ASSERT(out.dtype() != dtype::Float64(), "float64 output computed in float32");
    return out.dtype() == dtype::Float32() ? out : Tensor(out.shape(), dtype::Float32());
}

void store_float32(const Tensor& f32, Tensor& out) {
    if (f32.raw_ptr() == out.raw_ptr()) return;
    size_t n = out.shape().total_nr_elems();
    size_t es = out.dtype().size();
    parallel_range(n, 1, [&](size_t b, size_t e) {
        convert_elements(dtype::Float32(), f32.ptr<float>() + b, out.dtype(),
                         out.raw_ptr() + b * es, e - b);
    });
}

void parallel_copy(Tensor& dst, const Tensor& src) {
    const TensorShape& shape = dst.shape();
    size_t total = shape.total_nr_elems();
    size_t d = 0;
    while (d < shape.ndim() && shape[d] == 1) ++d;
    if (total < PARALLEL_MIN_ELEMS || d == shape.ndim()) {
        dst.copy_from(src);
        return;
    }
    ptrdiff_t es = ptrdiff_t(dst.dtype().size());
    parallel_range(shape[d], total / shape[d], [&](size_t b, size_t e) {
        TensorLayout dl = dst.layout(), sl = src.layout();
        dl[d] = sl[d] = e - b;
        Tensor dv = dst.view(dl, size_t(ptrdiff_t(b) * dl.stride[d] * es));
        dv.copy_from(src.view(sl, size_t(ptrdiff_t(b) * sl.stride[d] * es)));
    });
}

std::string dtype_list(std::initializer_list<DType> dtypes) {
    std::string s;
    size_t i = 0, n = dtypes.size();
    for (DType d : dtypes) {
        if (i) s += i + 1 == n ? " or " : ", ";
        s += d.name();
        ++i;
    }
    return s;
}

std::string dims_to_string(const std::vector<long>& dims) {
    std::string s = "{";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
    return s + "}";
}

} // namespace braid::opr
