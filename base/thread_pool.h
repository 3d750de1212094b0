// The thread pool shared by braid's CPU kernels.
//
// parallel_for splits [0, n) into chunks run by the pool's workers and the calling thread.
// One parallel region runs at a time; a kernel that asks while another region is active
// (a second comp node's worker, say) runs its loop serially instead of oversubscribing the
// cores. Thread-safe. A worker that finishes a region polls for the next one for a moment
// (200 µs) before it sleeps on a condition variable, so a run of small kernels keeps both
// threads busy and an idle pool uses no CPU. Once every chunk of a region is taken the region
// closes: its caller waits for the workers running chunks, never for one still waking up.
//
// A run may cap the threads its kernels use (KernelThreadCap), and a run with a RunControl
// (base/run_control.h) stops between chunks once cancelled or past its deadline.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

namespace braid {

//! A callable fn(begin, end) passed by reference: no copy and no allocation, whatever the
//! lambda captures. The callable must outlive the call it is passed to.
class RangeFn {
public:
    template <typename F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, RangeFn>)
        RangeFn(F&& fn) // NOLINT: implicit, like std::function
        : m_obj(const_cast<void*>(static_cast<const void*>(&fn))),
          m_call([](void* obj, size_t b, size_t e) {
              (*static_cast<std::remove_reference_t<F>*>(obj))(b, e);
          }) {}
    void operator()(size_t begin, size_t end) const { m_call(m_obj, begin, end); }

private:
    void* m_obj;
    void (*m_call)(void*, size_t, size_t);
};

//! Number of threads kernels may use (workers + caller), at most this thread's
//! KernelThreadCap. From BRAID_NUM_THREADS, default the number of hardware threads.
size_t kernel_threads();
//! Sets the number of kernel threads (>= 1); takes effect for later parallel regions.
void set_kernel_threads(size_t n);

//! Whether a worker of the pool is polling for the next region (it joins one at once); false
//! when they all sleep, and waking one costs microseconds.
bool pool_workers_awake();

//! Whether the calling thread runs on the CPU where a worker of the pool last ran a region:
//! a thread about to wait there would wait behind that worker's poll for the next region.
bool on_pool_worker_cpu();

//! Runs fn(begin, end) over [0, n) in chunks of at least `grain` iterations, in parallel
//! when n > grain and the pool is free. Exceptions from fn are rethrown in the caller.
void parallel_for(size_t n, size_t grain, RangeFn fn);

//! Caps the kernel threads of parallel regions this thread starts, for the scope's lifetime
//! (1: every kernel runs on the calling thread alone).
class KernelThreadCap {
public:
    explicit KernelThreadCap(size_t cap);
    ~KernelThreadCap();
    KernelThreadCap(const KernelThreadCap&) = delete;
    KernelThreadCap& operator=(const KernelThreadCap&) = delete;

private:
    size_t m_prev;
};

} // namespace braid
