#include "base/poll.h"

#include <sched.h>

namespace braid {

int current_cpu() {
    return sched_getcpu();
}

bool move_off_current_cpu() {
    cpu_set_t all, others;
    if (sched_getaffinity(0, sizeof all, &all) != 0) return false;
    others = all;
    CPU_CLR(sched_getcpu(), &others);
    if (CPU_COUNT(&others) == 0 || sched_setaffinity(0, sizeof others, &others) != 0) return false;
    sched_setaffinity(0, sizeof all, &all);
    return true;
}

} // namespace braid
