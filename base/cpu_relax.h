// cpu_relax(): the pause a spinning thread makes between two polls, so that it yields the
// core's pipeline to its sibling hyper-thread and saves power.
#pragma once

#include <thread>

namespace braid {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#else
    std::this_thread::yield();
#endif
}

} // namespace braid
