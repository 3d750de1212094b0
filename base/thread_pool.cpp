#include "base/thread_pool.h"

#include "base/determinism.h"
#include "base/poll.h"
#include "base/run_control.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace braid {

namespace {

//! How long an idle worker keeps polling for the next region before it sleeps, and how long
//! the caller polls for the last worker before it sleeps. Waking a sleeping thread costs tens
//! to hundreds of microseconds (more inside a virtual machine), as long as a small kernel
//! itself: without the poll the caller has done every chunk by the time a worker wakes, and
//! a graph of small kernels gains nothing from a second thread. Kernels of one run follow
//! each other within microseconds, so a short poll catches them; after it the thread sleeps
//! and an idle pool uses no CPU.
constexpr auto WORKER_POLL = std::chrono::microseconds(200);
constexpr auto CALLER_POLL = std::chrono::microseconds(1000);

class ThreadPool {
public:
    explicit ThreadPool(size_t nthreads) { resize(nthreads); }
    ~ThreadPool() { stop_workers(); }

    size_t threads() const { return m_workers.size() + 1; }
    //! Workers polling for the next region now (awake: one joins without a wake-up).
    size_t polling() const { return m_polling.load(std::memory_order_relaxed); }
    //! The CPU a worker last ran a region on; -1 before any did.
    int worker_cpu() const { return m_worker_cpu.load(std::memory_order_relaxed); }

    void resize(size_t nthreads) {
        std::lock_guard region(m_region);
        stop_workers();
        m_stop = false;
        m_stop_flag.store(false);
        // A new worker has seen every region so far: it must not join the last one, whose
        // function and run control are gone.
        uint64_t seen = m_job.load();
        for (size_t i = 1; i < std::max<size_t>(nthreads, 1); ++i)
            m_workers.emplace_back([this, i, seen] { worker_loop(i, seen); });
    }

    void run(size_t n, size_t grain, const RangeFn& fn, size_t cap, const RunControl* rc) {
        size_t nthreads = std::min(threads(), cap);
        size_t max_chunks = nthreads * 4;
        size_t chunk = std::max(grain, (n + max_chunks - 1) / max_chunks);
        std::unique_lock region(m_region, std::defer_lock);
        if (nthreads > 1 && n > grain) region.try_lock();
        if (!region.owns_lock()) {
            if (!rc) return fn(0, n);
            // Serially, in chunks, so that a cancelled run stops inside a long kernel too.
            for (size_t begin = 0; begin < n; begin += chunk) {
                rc->check();
                fn(begin, std::min(n, begin + chunk));
            }
            return;
        }
        {
            std::lock_guard lk(m_mutex);
            m_caller_cpu.store(current_cpu(), std::memory_order_relaxed);
            m_fn = &fn;
            m_rc = rc;
            m_deterministic = deterministic_kernels();
            m_n = n;
            m_chunk = chunk;
            m_next.store(0);
            m_error = nullptr;
            m_participants = nthreads;
            m_open = true;
            m_active.store(0);
            m_job.store(m_job.load() + 1, std::memory_order_release);
        }
        m_cv.notify_all();
        work();
        // Every chunk is taken: close the region, so that a worker still asleep (or on its way)
        // does not join it, and wait only for the workers running chunks. Waiting for every
        // worker cost a sleeping one's whole wake-up (~20 us) after the caller had done all the
        // work alone: a small region after a quiet stretch made two threads slower than one.
        {
            std::lock_guard lk(m_mutex);
            m_open = false;
        }
        poll_for(
            CALLER_POLL, [&] { return m_active.load(std::memory_order_acquire) == 0; },
            [&] { return m_worker_cpu.load(std::memory_order_relaxed) == current_cpu(); }, false);
        std::unique_lock lk(m_mutex);
        m_done_cv.wait(lk, [&] { return m_active.load() == 0; });
        m_fn = nullptr;
        if (m_error) std::rethrow_exception(m_error);
        if (rc) rc->check(); // chunks skipped for a cancelled run leave the output incomplete
    }

private:
    void work() {
        for (;;) {
            if (m_rc && m_rc->stop_requested()) return;
            size_t begin = m_next.fetch_add(m_chunk);
            if (begin >= m_n) return;
            try {
                (*m_fn)(begin, std::min(m_n, begin + m_chunk));
            } catch (...) {
                std::lock_guard lk(m_mutex);
                if (!m_error) m_error = std::current_exception();
            }
        }
    }

    //! Worker `index` (1-based: the caller is 0) joins jobs after the `seen`-th whose thread
    //! cap covers it.
    void worker_loop(size_t index, uint64_t seen) {
        for (;;) {
            bool join, deterministic;
            m_polling.fetch_add(1, std::memory_order_relaxed);
            poll_for(
                WORKER_POLL,
                [&] {
                    return m_job.load(std::memory_order_acquire) != seen ||
                           m_stop_flag.load(std::memory_order_relaxed);
                },
                [&] { return current_cpu() == m_caller_cpu.load(std::memory_order_relaxed); },
                true);
            m_polling.fetch_sub(1, std::memory_order_relaxed);
            {
                std::unique_lock lk(m_mutex);
                m_cv.wait(lk, [&] { return m_stop || m_job.load() != seen; });
                if (m_stop) return;
                seen = m_job.load();
                // A closed region has no chunks left, and its caller may have returned.
                join = m_open && index < m_participants;
                deterministic = m_deterministic;
                if (join) m_active.fetch_add(1, std::memory_order_relaxed);
            }
            if (!join) continue;
            m_worker_cpu.store(current_cpu(), std::memory_order_relaxed);
            {
                DeterministicScope mode(deterministic); // the caller's kernel mode
                work();
            }
            if (m_active.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                std::lock_guard lk(m_mutex); // the caller checks m_active under it: no lost wake
                m_done_cv.notify_all();
            }
        }
    }

    void stop_workers() {
        {
            std::lock_guard lk(m_mutex);
            m_stop = true;
            m_stop_flag.store(true);
        }
        m_cv.notify_all();
        for (auto& t : m_workers) t.join();
        m_workers.clear();
    }

    std::mutex m_region; //!< held by the caller of the active parallel region
    std::mutex m_mutex;
    std::condition_variable m_cv, m_done_cv;
    std::vector<std::thread> m_workers;
    const RangeFn* m_fn = nullptr;
    const RunControl* m_rc = nullptr;
    bool m_deterministic = false; //!< the region caller's deterministic_kernels()
    size_t m_n = 0, m_chunk = 1, m_participants = 1;
    //! Whether workers may still join the current region (written under m_mutex).
    bool m_open = false;
    std::atomic<size_t> m_active{0}; //!< workers that joined the current region, not done
    std::atomic<uint64_t> m_job{0};  //!< region number, written under m_mutex, polled without
    std::atomic<bool> m_stop_flag{false};
    std::atomic<size_t> m_polling{0}; //!< workers in their poll for the next region
    //! CPUs last seen running the caller of a region and a worker that joined one: hints for
    //! the polls, which must not spin on the CPU of the thread they wait for.
    std::atomic<int> m_caller_cpu{-1},
        m_worker_cpu{-1}; //!< m_stop, for workers polling without the mutex
    std::atomic<size_t> m_next{0};
    std::exception_ptr m_error;
    bool m_stop = false;
};

size_t default_threads() {
    if (const char* env = std::getenv("BRAID_NUM_THREADS")) {
        long v = std::atol(env);
        if (v > 0) return size_t(v);
    }
    return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& pool() {
    static ThreadPool p(default_threads());
    return p;
}

thread_local size_t t_thread_cap = SIZE_MAX;

} // namespace

size_t kernel_threads() {
    return std::min(pool().threads(), t_thread_cap);
}

void set_kernel_threads(size_t n) {
    pool().resize(n);
}

bool pool_workers_awake() {
    return pool().polling() > 0;
}

bool on_pool_worker_cpu() {
    return pool().threads() > 1 && pool().worker_cpu() == current_cpu();
}

void parallel_for(size_t n, size_t grain, RangeFn fn) {
    if (n == 0) return;
    pool().run(n, std::max<size_t>(grain, 1), fn, t_thread_cap, current_run_control());
}

KernelThreadCap::KernelThreadCap(size_t cap) : m_prev(t_thread_cap) {
    t_thread_cap = std::max<size_t>(cap, 1);
}

KernelThreadCap::~KernelThreadCap() {
    t_thread_cap = m_prev;
}

} // namespace braid
