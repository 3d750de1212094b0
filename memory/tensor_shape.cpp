#include "memory/tensor_shape.h"

#include "base/error.h"

#include <algorithm>

namespace braid {

TensorShape::TensorShape(std::initializer_list<size_t> dims) {
    set_ndim(dims.size());
    size_t i = 0;
    for (auto d : dims) m_shape[i++] = d;
}

TensorShape::TensorShape(const std::vector<size_t>& dims) {
    set_ndim(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) m_shape[i] = dims[i];
}

void TensorShape::set_ndim(size_t ndim) {
    if (ndim > MAX_NDIM)
        BRAID_THROW(ShapeError, "tensor rank {} exceeds the maximum of {}", ndim, MAX_NDIM);
    m_ndim = ndim;
}

std::optional<size_t> TensorShape::packed_bytes(DType dtype) const noexcept {
    // Zero dims count as one in the bound, so no partial product of a shape in bounds
    // overflows either.
    size_t bound = dtype.valid() ? dtype.size() : 1, elems = 1;
    for (size_t i = 0; i < m_ndim; ++i) {
        size_t d = m_shape[i];
        if (d > 1 && (__builtin_mul_overflow(bound, d, &bound) || bound > MAX_TENSOR_BYTES))
            return std::nullopt;
        elems *= d;
    }
    if (bound > MAX_TENSOR_BYTES) return std::nullopt;
    return elems * (dtype.valid() ? dtype.size() : 1);
}

size_t TensorShape::nr_bytes(DType dtype) const {
    auto bytes = packed_bytes(dtype);
    if (!bytes)
        BRAID_THROW(ShapeError, "shape {} of {} is too large: more than 2^56 bytes", to_string(),
                    dtype.valid() ? dtype.name() : "elements");
    return *bytes;
}

size_t TensorShape::total_nr_elems() const {
    size_t n = 1, bound = 1;
    for (size_t i = 0; i < m_ndim; ++i) {
        size_t d = m_shape[i];
        if (d > 1 && (__builtin_mul_overflow(bound, d, &bound) || bound > MAX_TENSOR_BYTES))
            [[unlikely]]
            BRAID_THROW(ShapeError, "shape {} is too large: more than 2^56 elements", to_string());
        n *= d;
    }
    return n;
}

bool TensorShape::operator==(const TensorShape& rhs) const {
    if (m_ndim != rhs.m_ndim) return false;
    for (size_t i = 0; i < m_ndim; ++i)
        if (m_shape[i] != rhs.m_shape[i]) return false;
    return true;
}

std::string TensorShape::to_string() const {
    std::string s = "{";
    for (size_t i = 0; i < m_ndim; ++i) {
        if (i) s += ",";
        s += std::to_string(m_shape[i]);
    }
    return s + "}";
}

TensorLayout::TensorLayout(const TensorShape& shape, DType dt) : TensorShape(shape), dtype(dt) {
    init_contiguous_stride();
}

void TensorLayout::init_contiguous_stride() {
    // Unsigned: a shape out of bounds wraps here instead of overflowing; it is refused
    // wherever its size is asked for.
    size_t s = 1;
    for (size_t i = ndim(); i-- > 0;) {
        stride[i] = ptrdiff_t(s);
        s *= (*this)[i];
    }
}

bool TensorLayout::is_contiguous() const {
    ptrdiff_t expect = 1;
    for (size_t i = ndim(); i-- > 0;) {
        if ((*this)[i] == 1) continue;
        if (stride[i] != expect) return false;
        expect *= ptrdiff_t((*this)[i]);
    }
    return true;
}

size_t TensorLayout::span_bytes() const {
    if (is_empty()) return 0;
    ptrdiff_t lo = 0, hi = 0;
    for (size_t i = 0; i < ndim(); ++i) {
        ptrdiff_t ext = ptrdiff_t((*this)[i] - 1) * stride[i];
        if (ext < 0)
            lo += ext;
        else
            hi += ext;
    }
    return size_t(hi - lo + 1) * dtype.size();
}

TensorLayout TensorLayout::broadcast(const TensorShape& target) const {
    if (target.ndim() < ndim())
        BRAID_THROW(ShapeError, "cannot broadcast {} to {}: target has fewer dims",
                    TensorShape::to_string(), target.to_string());
    TensorLayout res;
    static_cast<TensorShape&>(res) = target;
    res.dtype = dtype;
    size_t off = target.ndim() - ndim();
    for (size_t i = 0; i < target.ndim(); ++i) {
        if (i < off) {
            res.stride[i] = 0;
            continue;
        }
        size_t src = (*this)[i - off];
        if (src == target[i]) {
            res.stride[i] = target[i] == 1 ? 0 : stride[i - off];
        } else if (src == 1) {
            res.stride[i] = 0;
        } else {
            BRAID_THROW(ShapeError, "cannot broadcast {} to {}", TensorShape::to_string(),
                        target.to_string());
        }
    }
    return res;
}

std::string TensorLayout::to_string() const {
    std::string s = TensorShape::to_string() + " strides {";
    for (size_t i = 0; i < ndim(); ++i) {
        if (i) s += ",";
        s += std::to_string(stride[i]);
    }
    return s + "} " + dtype.name();
}

bool broadcast_shapes(const TensorShape* const* shapes, size_t n, TensorShape& out) {
    size_t nd = 0;
    for (size_t i = 0; i < n; ++i) nd = std::max(nd, shapes[i]->ndim());
    TensorShape res;
    res.set_ndim(nd);
    for (size_t d = 0; d < nd; ++d) {
        size_t dim = 1;
        for (size_t i = 0; i < n; ++i) {
            const auto& s = *shapes[i];
            size_t off = nd - s.ndim();
            if (d < off) continue;
            size_t v = s[d - off];
            if (v == dim || v == 1) continue;
            if (dim != 1) return false;
            dim = v;
        }
        res[d] = dim;
    }
    out = res;
    return true;
}

} // namespace braid
