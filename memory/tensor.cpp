#include "memory/tensor.h"

#include "base/error.h"

#include <algorithm>

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
    if (layout.is_empty()) return;
    // Element 0 sits at `offset`; negative strides address bytes below it.
    ptrdiff_t lo = 0, hi = 0;
    for (size_t i = 0; i < layout.ndim(); ++i) {
        ptrdiff_t ext = ptrdiff_t(layout[i] - 1) * layout.stride[i];
        (ext < 0 ? lo : hi) += ext;
    }
    ptrdiff_t es = ptrdiff_t(layout.dtype.size());
    ptrdiff_t first = ptrdiff_t(offset) + lo * es, end = ptrdiff_t(offset) + (hi + 1) * es;
    if (first < 0 || size_t(end) > m_storage.size())
        BRAID_THROW(ShapeError,
                    "tensor view {} at byte offset {} addresses bytes [{}, {}) but the storage "
                    "has {}",
                    layout.to_string(), ptrdiff_t(offset), first, end, m_storage.size());
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

namespace {

//! Copies `n` elements of `es` bytes with element strides `ds` and `ss`.
template <typename T>
void copy_run(uint8_t* d, ptrdiff_t ds, const uint8_t* s, ptrdiff_t ss, size_t n) {
    T* dp = reinterpret_cast<T*>(d);
    const T* sp = reinterpret_cast<const T*>(s);
    if (ds == 1 && ss == 1) {
        std::memcpy(dp, sp, n * sizeof(T));
        return;
    }
    for (size_t i = 0; i < n; ++i) dp[ptrdiff_t(i) * ds] = sp[ptrdiff_t(i) * ss];
}

void copy_run_bytes(uint8_t* d, ptrdiff_t ds, const uint8_t* s, ptrdiff_t ss, size_t n, size_t es) {
    switch (es) {
    case 1:
        return copy_run<uint8_t>(d, ds, s, ss, n);
    case 2:
        return copy_run<uint16_t>(d, ds, s, ss, n);
    case 4:
        return copy_run<uint32_t>(d, ds, s, ss, n);
    case 8:
        return copy_run<uint64_t>(d, ds, s, ss, n);
    default:
        for (size_t i = 0; i < n; ++i)
            std::memcpy(d + ptrdiff_t(i) * ds * ptrdiff_t(es),
                        s + ptrdiff_t(i) * ss * ptrdiff_t(es), es);
    }
}

} // namespace

size_t collapse_copy_dims(const TensorLayout& dl, const TensorLayout& sl, size_t* shape,
                          ptrdiff_t* ds, ptrdiff_t* ss) {
    size_t nd = 0;
    for (size_t i = 0; i < dl.ndim(); ++i) {
        if (dl[i] == 1) continue;
        if (nd && ds[nd - 1] == dl.stride[i] * ptrdiff_t(dl[i]) &&
            ss[nd - 1] == sl.stride[i] * ptrdiff_t(dl[i])) {
            shape[nd - 1] *= dl[i];
            ds[nd - 1] = dl.stride[i];
            ss[nd - 1] = sl.stride[i];
            continue;
        }
        shape[nd] = dl[i];
        ds[nd] = dl.stride[i];
        ss[nd] = sl.stride[i];
        ++nd;
    }
    return nd;
}

namespace {

//! Strided copy of `shape` between two layouts (strides in elements). Dims are collapsed
//! first; when the source is read across its contiguous dim (a transpose), the two
//! innermost dims are walked in square tiles so both sides stay in cache.
void strided_copy(uint8_t* dst, const TensorLayout& dl, const uint8_t* src,
                  const TensorLayout& sl) {
    size_t es = dl.dtype.size();
    size_t shape[TensorShape::MAX_NDIM];
    ptrdiff_t ds[TensorShape::MAX_NDIM], ss[TensorShape::MAX_NDIM];
    size_t nd = collapse_copy_dims(dl, sl, shape, ds, ss);
    if (nd == 0) {
        std::memcpy(dst, src, es);
        return;
    }
    bool tiled = false;
    if (nd >= 2 && ss[nd - 1] != 1 && ds[nd - 1] == 1) {
        for (size_t k = 0; k + 1 < nd; ++k)
            if (ss[k] == 1) {
                std::swap(shape[k], shape[nd - 2]);
                std::swap(ds[k], ds[nd - 2]);
                std::swap(ss[k], ss[nd - 2]);
                tiled = true;
                break;
            }
    }
    size_t outer_nd = tiled ? nd - 2 : nd - 1;
    size_t outer = 1;
    for (size_t i = 0; i < outer_nd; ++i) outer *= shape[i];
    size_t idx[TensorShape::MAX_NDIM] = {};
    ptrdiff_t doff = 0, soff = 0, bes = ptrdiff_t(es);
    constexpr size_t TILE = 64;
    for (size_t o = 0; o < outer; ++o) {
        if (!tiled) {
            copy_run_bytes(dst + doff * bes, ds[nd - 1], src + soff * bes, ss[nd - 1],
                           shape[nd - 1], es);
        } else {
            size_t na = shape[nd - 2], nb = shape[nd - 1];
            // Tiles sweep along the source's contiguous dim (a) innermost: the source is read
            // as TILE sequential streams, which the prefetchers follow.
            for (size_t b0 = 0; b0 < nb; b0 += TILE)
                for (size_t a0 = 0; a0 < na; a0 += TILE)
                    for (size_t a = a0; a < std::min(na, a0 + TILE); ++a) {
                        ptrdiff_t da =
                            doff + ptrdiff_t(a) * ds[nd - 2] + ptrdiff_t(b0) * ds[nd - 1];
                        ptrdiff_t sa =
                            soff + ptrdiff_t(a) * ss[nd - 2] + ptrdiff_t(b0) * ss[nd - 1];
                        copy_run_bytes(dst + da * bes, ds[nd - 1], src + sa * bes, ss[nd - 1],
                                       std::min(nb, b0 + TILE) - b0, es);
                    }
        }
        for (size_t d = outer_nd; d-- > 0;) {
            if (++idx[d] < shape[d]) {
                doff += ds[d];
                soff += ss[d];
                break;
            }
            doff -= ptrdiff_t(idx[d] - 1) * ds[d];
            soff -= ptrdiff_t(idx[d] - 1) * ss[d];
            idx[d] = 0;
        }
    }
}

} // namespace

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
    if (src.layout().is_contiguous() && m_layout.is_contiguous()) {
        if (nr_bytes()) std::memmove(raw_ptr(), src.raw_ptr(), nr_bytes());
        return;
    }
    if (shape().is_empty()) return;
    strided_copy(raw_ptr(), m_layout, src.raw_ptr(), src.layout());
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
