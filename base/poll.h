// Polling before sleeping: a thread that expects its wake-up within microseconds polls for it a
// moment instead of sleeping at once. Waking a sleeping thread costs tens to hundreds of
// microseconds (more inside a virtual machine), as long as a small kernel or a small model's
// whole run. Used by the thread pool's regions and the comp nodes' hand-over of runs.
#pragma once

#include "base/cpu_relax.h"

#include <chrono>
#include <thread>

namespace braid {

//! The CPU the calling thread runs on (sched_getcpu).
int current_cpu();

//! Moves the calling thread off the CPU it runs on, once: its affinity is narrowed to the other
//! allowed CPUs and at once widened back, so the scheduler places it elsewhere and may move
//! it again later as it likes. False when no other CPU is allowed.
bool move_off_current_cpu();

//! Polls `done` until it holds or `budget` has passed; true when it holds. Every 64 polls it
//! checks `shares_core()`, whether the thread it waits for runs on this very CPU: spinning
//! there would only delay that thread. Then, with `move_away`, it moves itself to another CPU
//! once (a worker: the scheduler tends to wake a pool worker on its waker's CPU and leave it
//! there), and otherwise yields the CPU between polls. (Yielding at every poll was measured
//! slower: a worker that yields on its own CPU misses most small regions.)
template <typename Pred, typename SharesCore>
bool poll_for(std::chrono::microseconds budget, Pred done, SharesCore shares_core, bool move_away) {
    auto deadline = std::chrono::steady_clock::now() + budget;
    bool yield = false;
    for (unsigned i = 1;; ++i) {
        if (done()) return true;
        if (yield)
            std::this_thread::yield();
        else
            cpu_relax();
        if (i % 64 == 0) {
            if (std::chrono::steady_clock::now() >= deadline) return done();
            yield = shares_core();
            if (yield && move_away && move_off_current_cpu()) {
                move_away = false;
                yield = false;
            }
        }
    }
}

} // namespace braid
