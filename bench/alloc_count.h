// Heap allocation counting for a benchmark program: glibc's malloc family replaced (forwarding
// to __libc_*), so that libstdc++'s operator new, std::make_shared and braid's aligned_alloc for
// tensors are all counted, on every thread. Included by exactly one source file of a program
// (its definitions replace the C library's).
#pragma once

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace {
//! Heap allocations so far (every thread).
std::atomic<uint64_t> g_allocs{0};
void count_alloc() {
    g_allocs.fetch_add(1, std::memory_order_relaxed);
}
} // namespace

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* p);
void* memalign(size_t alignment, size_t size) noexcept;

void* malloc(size_t size) noexcept {
    count_alloc();
    return __libc_malloc(size);
}
void* calloc(size_t n, size_t size) noexcept {
    count_alloc();
    return __libc_calloc(n, size);
}
void* realloc(void* p, size_t size) noexcept {
    count_alloc();
    return __libc_realloc(p, size);
}
void* memalign(size_t alignment, size_t size) noexcept {
    count_alloc();
    return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) noexcept {
    return memalign(alignment, size);
}
int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
    if (alignment % sizeof(void*) || (alignment & (alignment - 1))) return EINVAL;
    void* p = memalign(alignment, size);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
void free(void* p) noexcept {
    __libc_free(p);
}
}
