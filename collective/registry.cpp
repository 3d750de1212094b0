#include "collective/registry.h"

#include <mutex>

namespace braid::opr {
// One per family, defined at the end of collective/<family>.cpp.
void register_collective_comm_operators();
void register_remote_send_recv_operators();
void register_ring_attention_operators();
} // namespace braid::opr

namespace braid {

void register_all_operators() {
    static std::once_flag once;
    std::call_once(once, [] {
        register_operator_library();
        opr::register_collective_comm_operators();
        opr::register_remote_send_recv_operators();
        opr::register_ring_attention_operators();
    });
}

} // namespace braid
