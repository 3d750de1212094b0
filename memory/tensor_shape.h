// TensorShape (up to 7 dims) and TensorLayout (shape + strides + dtype).
#pragma once

#include "memory/dtype.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace braid {

/*!
 * The most bytes (and so elements) one tensor may have: 2^56, far beyond any memory. A shape
 * within it keeps every size computed from it (element counts, byte sizes, strides, products of
 * some of its dims) free of overflow, so code past shape inference may multiply dims freely.
 */
constexpr size_t MAX_TENSOR_BYTES = size_t(1) << 56;

//! A tensor shape of rank 0 to MAX_NDIM. Rank 0 is a scalar with one element.
class TensorShape {
public:
    static constexpr size_t MAX_NDIM = 7;

    TensorShape() = default;
    TensorShape(std::initializer_list<size_t> dims);
    explicit TensorShape(const std::vector<size_t>& dims);

    size_t ndim() const { return m_ndim; }
    size_t operator[](size_t i) const { return m_shape[i]; }
    size_t& operator[](size_t i) { return m_shape[i]; }
    //! Product of the dims (1 for a scalar, 0 when any dim is 0); throws ShapeError when the
    //! shape is out of bounds (see packed_bytes()).
    size_t total_nr_elems() const;
    /*!
     * Bytes of a packed tensor of this shape and `dtype`, or nullopt when the shape is out of
     * bounds: the product of its non-zero dims times the dtype's size exceeds MAX_TENSOR_BYTES.
     * The one overflow-checked shape -> elements -> bytes computation; the others call it.
     */
    std::optional<size_t> packed_bytes(DType dtype) const noexcept;
    //! packed_bytes(), throwing ShapeError (naming the shape and dtype) when out of bounds.
    size_t nr_bytes(DType dtype) const;
    bool is_scalar() const { return m_ndim == 0; }
    bool is_empty() const { return total_nr_elems() == 0; }
    std::vector<size_t> dims() const { return {m_shape.begin(), m_shape.begin() + m_ndim}; }
    //! Sets the rank; throws ShapeError above MAX_NDIM.
    void set_ndim(size_t ndim);

    bool operator==(const TensorShape& rhs) const;
    bool operator!=(const TensorShape& rhs) const { return !(*this == rhs); }
    //! "{2,3}", "{}" for a scalar.
    std::string to_string() const;

private:
    size_t m_ndim = 0;
    std::array<size_t, MAX_NDIM> m_shape{};
};

//! A shape with strides (in elements) and a dtype: how a tensor's bytes are laid out.
class TensorLayout : public TensorShape {
public:
    std::array<ptrdiff_t, MAX_NDIM> stride{};
    DType dtype;

    TensorLayout() = default;
    //! Contiguous (row-major) layout of `shape`.
    TensorLayout(const TensorShape& shape, DType dtype);

    //! Strides of a row-major packed tensor.
    void init_contiguous_stride();
    //! True when the elements are packed in row-major order (size-1 dims ignored).
    bool is_contiguous() const;
    //! Bytes from the lowest to one past the highest element addressed (0 when empty).
    size_t span_bytes() const;
    //! Bytes of the packed tensor: elements × dtype size (checked, see packed_bytes()).
    size_t nr_bytes() const { return TensorShape::nr_bytes(dtype); }
    //! Layout with dims broadcast to `target` (stride 0 on broadcast dims);
    //! throws ShapeError when not broadcastable.
    TensorLayout broadcast(const TensorShape& target) const;
    std::string to_string() const;
};

//! The numpy broadcast of `shapes`; false (and `out` untouched) when they are incompatible.
bool broadcast_shapes(const TensorShape* const* shapes, size_t n, TensorShape& out);

} // namespace braid
