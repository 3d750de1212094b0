#include "memory/tensor.h"

#include "base/error.h"

namespace braid {

Storage Storage::make(size_t size, std::shared_ptr<Allocator> alloc) {
    Storage s;
    s.m_size = size;
    s.m_device = alloc->device();
    void* p = alloc->alloc(size);
    s.m_ptr = static_cast<uint8_t*>(p);
    s.m_block = std::shared_ptr<void>(p, [alloc](void* q) {
        if (q) alloc->free(q);
    });
    if (!p) s.m_block = std::make_shared<int>(0); // zero-byte block still has an identity
    return s;
}

Storage Storage::wrap(void* ptr, size_t size, Device device, std::shared_ptr<void> keep_alive) {
    Storage s;
    s.m_ptr = static_cast<uint8_t*>(ptr);
    s.m_size = size;
    s.m_device = device;
    s.m_block = keep_alive ? std::move(keep_alive) : std::make_shared<int>(0);
    return s;
}

Tensor::Tensor(const TensorShape& shape, DType dtype, std::shared_ptr<Allocator> alloc)
    : m_layout(shape, dtype) {
    m_storage = Storage::make(m_layout.nr_bytes(), std::move(alloc));
}

Tensor::Tensor(Storage storage, size_t offset, const TensorLayout& layout)
    : m_storage(std::move(storage)), m_offset(offset), m_layout(layout) {
    if (offset + layout.span_bytes() > m_storage.size())
        BRAID_THROW(ShapeError,
                    "tensor view {} at byte offset {} needs {} bytes but the storage has {}",
                    layout.to_string(), offset, offset + layout.span_bytes(), m_storage.size());
}

void Tensor::check_elem_size(size_t sz) const {
    if (sz != m_layout.dtype.size())
        BRAID_THROW(DTypeError, "accessing a {} tensor with a {}-byte element type",
                    m_layout.dtype.name(), sz);
}

Tensor Tensor::view(const TensorLayout& layout, size_t byte_offset) const {
    return Tensor(m_storage, m_offset + byte_offset, layout);
}

Tensor Tensor::reshape(const TensorShape& shape) const {
    if (shape.total_nr_elems() != m_layout.total_nr_elems())
        BRAID_THROW(ShapeError, "cannot reshape {} ({} elements) to {} ({} elements)",
                    m_layout.TensorShape::to_string(), m_layout.total_nr_elems(), shape.to_string(),
                    shape.total_nr_elems());
    if (!m_layout.is_contiguous())
        BRAID_THROW(ShapeError, "cannot reshape non-contiguous tensor {} as a view",
                    m_layout.to_string());
    return view(TensorLayout(shape, m_layout.dtype));
}

Tensor Tensor::contiguous() const {
    if (m_layout.is_contiguous()) return *this;
    return copy();
}

Tensor Tensor::copy(std::shared_ptr<Allocator> alloc) const {
    Tensor res(m_layout, m_layout.dtype, std::move(alloc));
    res.copy_from(*this);
    return res;
}

void Tensor::copy_from(const Tensor& src) {
    if (src.shape() != shape() || src.dtype() != dtype())
        BRAID_THROW(ShapeError, "copy from {} {} into {} {}: shape or dtype differ",
                    src.shape().to_string(), src.dtype().name(), shape().to_string(),
                    dtype().name());
    if (device().kind != Device::Kind::CPU || src.device().kind != Device::Kind::CPU)
        BRAID_THROW(ValueError,
                    "Tensor::copy_from copies host memory only (from {} into {}); device memory "
                    "is copied with CompNode::copy",
                    src.device().to_string(), device().to_string());
    size_t es = dtype().size();
    if (src.layout().is_contiguous() && m_layout.is_contiguous()) {
        if (nr_bytes()) std::memmove(raw_ptr(), src.raw_ptr(), nr_bytes());
        return;
    }
    // Strided copy: walk the source and the destination in step.
    std::vector<ptrdiff_t> dst_offs;
    dst_offs.reserve(shape().total_nr_elems());
    for_each_strided(m_layout, [&](size_t, ptrdiff_t off) { dst_offs.push_back(off); });
    uint8_t* d = raw_ptr();
    const uint8_t* s = src.raw_ptr();
    for_each_strided(src.layout(), [&](size_t i, ptrdiff_t off) {
        std::memcpy(d + dst_offs[i] * ptrdiff_t(es), s + off * ptrdiff_t(es), es);
    });
}

void Tensor::resize(const TensorShape& shape, DType dtype) {
    TensorLayout layout(shape, dtype);
    if (!m_storage.empty() && m_offset == 0 && layout.nr_bytes() <= m_storage.size() &&
        m_storage.device() == Device::cpu()) {
        m_layout = layout;
        return;
    }
    *this = Tensor(shape, dtype);
}

double Tensor::at(size_t i) const {
    if (i >= m_layout.total_nr_elems())
        BRAID_THROW(ValueError, "element {} out of range for shape {}", i,
                    m_layout.TensorShape::to_string());
    if (device().kind != Device::Kind::CPU)
        BRAID_THROW(ValueError, "element access on a {} tensor; copy it to the host first",
                    device().to_string());
    // Translate the row-major index into a strided offset.
    ptrdiff_t off = 0;
    size_t rest = i;
    for (size_t d = m_layout.ndim(); d-- > 0;) {
        off += ptrdiff_t(rest % m_layout[d]) * m_layout.stride[d];
        rest /= m_layout[d];
    }
    return load_as_double(dtype(), raw_ptr(), size_t(off));
}

} // namespace braid
