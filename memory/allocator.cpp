#include "memory/allocator.h"

#include "base/error.h"

#include <cstdlib>
#include <fmt/format.h>

namespace braid {

std::string Device::to_string() const {
    return fmt::format("{}{}", kind == Kind::CPU ? "cpu" : "cuda", index);
}

void* CpuAllocator::alloc(size_t size) {
    if (size == 0) return nullptr;
    size_t rounded = (size + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    void* p = std::aligned_alloc(ALIGNMENT, rounded);
    if (!p) BRAID_THROW(Error, "host allocation of {} bytes failed: out of memory", size);
    return p;
}

void CpuAllocator::free(void* ptr) {
    std::free(ptr);
}

std::shared_ptr<Allocator> CpuAllocator::instance() {
    static auto inst = std::make_shared<CpuAllocator>();
    return inst;
}

} // namespace braid
