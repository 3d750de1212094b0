// CUDA memory: a caching device allocator and a caching pinned-host allocator (CUDA builds
// only).
//
// Device memory comes from cudaMalloc (never managed memory). Freed blocks go to free lists
// bucketed by rounded size and are handed out again for requests of the same bucket, so a
// run that re-allocates dynamic shapes does not call cudaMalloc (which is slow) or cudaFree
// (which synchronises the device) each time. One request may be as large as the device
// allows, so a memory planner's whole arena is one allocation.
//
// Reuse rule: each CUDA comp node (one stream) owns its own CudaDeviceAllocator, and a block
// is only reused by work on that stream, so stream order makes reuse safe even when a block
// is freed on the host while kernels that read it are still queued. When cudaMalloc fails,
// every cached block is released and the request retried once before the error is thrown.
//
// Pinned host memory (cudaMallocHost) is host memory (Device::cpu()) that the GPU copies
// from and to asynchronously; braid uses it for input staging and fetched outputs. A pinned
// block is reused as soon as it is freed: free one only after the copies using it finished.
//
// Both allocators are thread-safe.
#pragma once

#include "memory/allocator.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace braid {

//! Size-bucketed free lists over a raw allocation function. Thread-safe.
class CachingAllocator : public Allocator {
public:
    //! Usage counters, for tests and logging.
    struct Stats {
        size_t in_use_bytes = 0;  //!< bucket bytes handed out and not freed
        size_t cached_bytes = 0;  //!< bucket bytes on the free lists
        size_t nr_raw_allocs = 0; //!< calls of the raw allocation function so far
    };

    ~CachingAllocator() override;
    void* alloc(size_t size) override;
    void free(void* ptr) override;
    //! Returns every cached (free) block to the raw allocator.
    void release_cached();
    Stats stats() const;
    //! The bucket a request of `size` bytes is served from: multiples of 512 bytes up to
    //! 1 MiB, of 2 MiB above.
    static size_t bucket_size(size_t size);

protected:
    //! Allocates `size` raw bytes; returns nullptr when out of memory, throws for other errors.
    virtual void* raw_alloc(size_t size) = 0;
    virtual void raw_free(void* ptr) noexcept = 0;
    //! Text for out-of-memory messages, e.g. "cuda0 device memory".
    virtual std::string what() const = 0;
    //! Derived destructors call this first, while raw_free still works.
    void release_all_cached() noexcept;

private:
    mutable std::mutex m_mutex;
    std::unordered_map<void*, size_t> m_in_use;  //!< block -> bucket size
    std::map<size_t, std::vector<void*>> m_free; //!< bucket size -> free blocks
    Stats m_stats;
};

//! Device memory of one CUDA device for one comp node (cudaMalloc, cached).
class CudaDeviceAllocator final : public CachingAllocator {
public:
    static constexpr size_t ALIGNMENT = 256;
    explicit CudaDeviceAllocator(int device) : m_device(device) {}
    ~CudaDeviceAllocator() override;
    Device device() const override { return {Device::Kind::CUDA, m_device}; }
    size_t alignment() const override { return ALIGNMENT; }

private:
    void* raw_alloc(size_t size) override;
    void raw_free(void* ptr) noexcept override;
    std::string what() const override;
    int m_device;
};

//! Pinned (page-locked) host memory (cudaMallocHost, cached).
class CudaHostAllocator final : public CachingAllocator {
public:
    static constexpr size_t ALIGNMENT = 256;
    ~CudaHostAllocator() override;
    Device device() const override { return Device::cpu(); }
    size_t alignment() const override { return ALIGNMENT; }
    //! The process-wide pinned allocator.
    static std::shared_ptr<CudaHostAllocator> instance();

private:
    void* raw_alloc(size_t size) override;
    void raw_free(void* ptr) noexcept override;
    std::string what() const override { return "pinned host memory"; }
};

//! Sets the calling thread's current CUDA device for the guard's lifetime.
class CudaDeviceGuard {
public:
    explicit CudaDeviceGuard(int device);
    ~CudaDeviceGuard();
    CudaDeviceGuard(const CudaDeviceGuard&) = delete;
    CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

private:
    int m_prev = -1;
    int m_device;
};

} // namespace braid
