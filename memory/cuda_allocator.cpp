#include "memory/cuda_allocator.h"

#include "base/cuda_check.h"
#include "base/error.h"

namespace braid {

// ---------------------------------------------------------------- CachingAllocator
CachingAllocator::~CachingAllocator() = default;

size_t CachingAllocator::bucket_size(size_t size) {
    constexpr size_t SMALL = 512, LARGE = size_t(2) << 20, SMALL_LIMIT = size_t(1) << 20;
    if (size <= SMALL_LIMIT) return (size + SMALL - 1) / SMALL * SMALL;
    return (size + LARGE - 1) / LARGE * LARGE;
}

void* CachingAllocator::alloc(size_t size) {
    if (size == 0) return nullptr;
    size_t bucket = bucket_size(size);
    {
        std::lock_guard lk(m_mutex);
        auto it = m_free.find(bucket);
        if (it != m_free.end() && !it->second.empty()) {
            void* p = it->second.back();
            it->second.pop_back();
            m_stats.cached_bytes -= bucket;
            m_stats.in_use_bytes += bucket;
            m_in_use.emplace(p, bucket);
            return p;
        }
    }
    void* p = raw_alloc(bucket);
    if (!p) {
        // Out of memory: give the cached blocks back and try once more.
        release_cached();
        p = raw_alloc(bucket);
    }
    if (!p) {
        auto s = stats();
        BRAID_THROW(LibraryError,
                    "out of {}: cannot allocate {} bytes ({} bytes in use by braid, cache "
                    "released)",
                    what(), size, s.in_use_bytes);
    }
    std::lock_guard lk(m_mutex);
    ++m_stats.nr_raw_allocs;
    m_stats.in_use_bytes += bucket;
    m_in_use.emplace(p, bucket);
    return p;
}

void CachingAllocator::free(void* ptr) {
    if (!ptr) return;
    std::lock_guard lk(m_mutex);
    auto it = m_in_use.find(ptr);
    BRAID_ASSERT(it != m_in_use.end(), "freeing a block this {} allocator did not hand out",
                 what());
    size_t bucket = it->second;
    m_in_use.erase(it);
    m_stats.in_use_bytes -= bucket;
    m_stats.cached_bytes += bucket;
    m_free[bucket].push_back(ptr);
}

void CachingAllocator::release_cached() {
    std::map<size_t, std::vector<void*>> blocks;
    {
        std::lock_guard lk(m_mutex);
        blocks.swap(m_free);
        m_stats.cached_bytes = 0;
    }
    for (auto& [_, list] : blocks)
        for (void* p : list) raw_free(p);
}

void CachingAllocator::release_all_cached() noexcept {
    try {
        release_cached();
    } catch (...) {
    }
}

CachingAllocator::Stats CachingAllocator::stats() const {
    std::lock_guard lk(m_mutex);
    return m_stats;
}

// ---------------------------------------------------------------- CudaDeviceGuard
CudaDeviceGuard::CudaDeviceGuard(int device) : m_device(device) {
    BRAID_CUDA_CHECK(cudaGetDevice(&m_prev));
    if (m_prev != m_device) BRAID_CUDA_CHECK(cudaSetDevice(m_device));
}

CudaDeviceGuard::~CudaDeviceGuard() {
    if (m_prev >= 0 && m_prev != m_device) (void)cudaSetDevice(m_prev);
}

// ---------------------------------------------------------------- CudaDeviceAllocator
CudaDeviceAllocator::~CudaDeviceAllocator() {
    release_all_cached();
}

void* CudaDeviceAllocator::raw_alloc(size_t size) {
    CudaDeviceGuard guard(m_device);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); // not sticky; clear it
        return nullptr;
    }
    BRAID_CUDA_CHECK(err);
    return p;
}

void CudaDeviceAllocator::raw_free(void* ptr) noexcept {
    // At process exit the CUDA runtime may be unloading already; errors are ignored.
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && prev != m_device) (void)cudaSetDevice(m_device);
    // No logging: this also runs during static destruction, when the logger may be gone.
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
    if (prev >= 0 && prev != m_device) (void)cudaSetDevice(prev);
}

std::string CudaDeviceAllocator::what() const {
    return fmt::format("cuda{} device memory", m_device);
}

// ---------------------------------------------------------------- CudaHostAllocator
CudaHostAllocator::~CudaHostAllocator() {
    release_all_cached();
}

std::shared_ptr<CudaHostAllocator> CudaHostAllocator::instance() {
    static auto inst = std::make_shared<CudaHostAllocator>();
    return inst;
}

void* CudaHostAllocator::raw_alloc(size_t size) {
    void* p = nullptr;
    cudaError_t err = cudaMallocHost(&p, size);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return nullptr;
    }
    BRAID_CUDA_CHECK(err);
    return p;
}

void CudaHostAllocator::raw_free(void* ptr) noexcept {
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError(); // see raw_free above
}

} // namespace braid
