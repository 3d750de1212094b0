// Memory allocators and the device a block of memory lives on.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace braid {

//! Where memory lives: host memory (shared by every CPU comp node) or one CUDA device.
struct Device {
    enum class Kind : uint8_t { CPU, CUDA };
    Kind kind = Kind::CPU;
    int index = 0;

    bool operator==(const Device&) const = default;
    std::string to_string() const;
    static Device cpu() { return {}; }
};

//! Allocates raw memory on one device. Implementations are thread-safe.
class Allocator {
public:
    virtual ~Allocator() = default;
    //! Returns `size` bytes aligned to alignment(); never nullptr for size > 0 (throws instead).
    virtual void* alloc(size_t size) = 0;
    //! Releases memory returned by alloc().
    virtual void free(void* ptr) = 0;
    virtual Device device() const = 0;
    //! Guaranteed alignment of every pointer returned by alloc().
    virtual size_t alignment() const = 0;
};

//! Host allocator with 64-byte alignment (a cache line; enough for AVX-512 loads).
class CpuAllocator final : public Allocator {
public:
    static constexpr size_t ALIGNMENT = 64;
    void* alloc(size_t size) override;
    void free(void* ptr) override;
    Device device() const override { return Device::cpu(); }
    size_t alignment() const override { return ALIGNMENT; }

    //! The process-wide host allocator.
    static std::shared_ptr<Allocator> instance();
};

} // namespace braid
