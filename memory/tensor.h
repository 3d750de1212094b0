// Reference-counted storage and tensors (a layout viewing part of a storage).
//
// A Storage is a shared block of bytes on one Device; copying a Storage or Tensor shares
// the bytes. A Tensor is an (offset, layout) view of a Storage, so reshapes and slices are
// views without copies. Tensors are not thread-safe; the shared block is freed exactly once.
#pragma once

#include "memory/allocator.h"
#include "memory/tensor_shape.h"

#include <cstring>
#include <memory>

namespace braid {

//! A shared, reference-counted block of device memory, or a non-owning wrapper around
//! memory someone else keeps alive (a memory-mapped file, a planner arena).
class Storage {
public:
    Storage() = default;
    //! Allocates `size` bytes from `alloc`.
    static Storage make(size_t size, std::shared_ptr<Allocator> alloc = CpuAllocator::instance());
    //! Wraps `ptr`; `keep_alive` (may be null) is held as long as any copy of the storage.
    static Storage wrap(void* ptr, size_t size, Device device,
                        std::shared_ptr<void> keep_alive = nullptr);

    uint8_t* ptr() const { return m_ptr; }
    size_t size() const { return m_size; }
    Device device() const { return m_device; }
    bool empty() const { return m_ptr == nullptr; }
    //! Identity of the underlying block (views of one block compare equal).
    const void* block_id() const { return m_block.get(); }

private:
    std::shared_ptr<void> m_block;
    uint8_t* m_ptr = nullptr;
    size_t m_size = 0;
    Device m_device;
};

//! A typed view of a Storage: layout plus byte offset. Used both for host tensors
//! (fed inputs, fetched outputs) and device tensors (what kernels read and write).
class Tensor {
public:
    Tensor() = default;
    //! Allocates a contiguous tensor of `shape` and `dtype` (uninitialised).
    Tensor(const TensorShape& shape, DType dtype,
           std::shared_ptr<Allocator> alloc = CpuAllocator::instance());
    //! A view of `storage` starting `offset` bytes in; throws ShapeError if it overruns.
    Tensor(Storage storage, size_t offset, const TensorLayout& layout);

    const TensorLayout& layout() const { return m_layout; }
    const TensorShape& shape() const { return m_layout; }
    DType dtype() const { return m_layout.dtype; }
    Device device() const { return m_storage.device(); }
    const Storage& storage() const { return m_storage; }
    size_t offset() const { return m_offset; }
    bool empty() const { return !m_layout.dtype.valid(); }
    //! Bytes of a packed tensor of this shape and dtype.
    size_t nr_bytes() const { return m_layout.nr_bytes(); }

    //! Pointer to element 0 (may be null for an empty tensor).
    uint8_t* raw_ptr() const { return m_storage.ptr() ? m_storage.ptr() + m_offset : nullptr; }
    //! Typed pointer to element 0; throws DTypeError when T's size disagrees with the dtype.
    template <typename T> T* ptr() const {
        check_elem_size(sizeof(T));
        return reinterpret_cast<T*>(raw_ptr());
    }

    //! A view with another layout over the same bytes (offset in bytes from this view).
    Tensor view(const TensorLayout& layout, size_t byte_offset = 0) const;
    //! A view with a new shape; requires a contiguous tensor and the same element count.
    Tensor reshape(const TensorShape& shape) const;
    //! A contiguous copy (this tensor itself when already contiguous).
    Tensor contiguous() const;
    //! A deep copy into fresh contiguous storage from `alloc`.
    Tensor copy(std::shared_ptr<Allocator> alloc = CpuAllocator::instance()) const;
    //! Copies the elements of `src` (same shape and dtype, any strides) into this tensor;
    //! host memory only (CompNode::copy copies device memory).
    void copy_from(const Tensor& src);
    //! Re-allocates when shape or dtype differ; keeps the storage when it is big enough.
    void resize(const TensorShape& shape, DType dtype);

    //! Element `i` (row-major index) as double; for tests and printing, not for kernels.
    //! Host tensors only.
    double at(size_t i) const;

private:
    void check_elem_size(size_t sz) const;

    Storage m_storage;
    size_t m_offset = 0;
    TensorLayout m_layout;
};

//! The dims of a copy from layout `src` to layout `dst` (one shape), size-1 dims dropped and
//! neighbouring dims merged where both layouts keep them adjacent: fills `shape` and both
//! strides (in elements; arrays of TensorShape::MAX_NDIM) and returns the number of dims.
size_t collapse_copy_dims(const TensorLayout& dst, const TensorLayout& src, size_t* shape,
                          ptrdiff_t* dst_stride, ptrdiff_t* src_stride);

//! Calls `fn(dst_byte_offset, src_byte_offset)` for each element of a strided copy: the
//! building block of every strided kernel that is not performance-critical.
template <typename Fn> void for_each_strided(const TensorLayout& layout, Fn&& fn) {
    size_t n = layout.total_nr_elems();
    if (n == 0) return;
    size_t nd = layout.ndim();
    std::array<size_t, TensorShape::MAX_NDIM> idx{};
    ptrdiff_t off = 0;
    for (size_t i = 0; i < n; ++i) {
        fn(i, off);
        for (size_t d = nd; d-- > 0;) {
            if (++idx[d] < layout[d]) {
                off += layout.stride[d];
                break;
            }
            off -= ptrdiff_t(idx[d] - 1) * layout.stride[d];
            idx[d] = 0;
        }
    }
}

} // namespace braid
