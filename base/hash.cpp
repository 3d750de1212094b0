#include "base/hash.h"

#include <xxhash.h>

namespace braid {

Hasher::Hasher(uint64_t seed) : m_state(XXH64_createState()) {
    XXH64_reset(static_cast<XXH64_state_t*>(m_state), seed);
}

Hasher::~Hasher() {
    XXH64_freeState(static_cast<XXH64_state_t*>(m_state));
}

Hasher& Hasher::add_bytes(const void* data, size_t size) {
    XXH64_update(static_cast<XXH64_state_t*>(m_state), data, size);
    return *this;
}

uint64_t Hasher::digest() const {
    return XXH64_digest(static_cast<XXH64_state_t*>(m_state));
}

uint64_t xxhash64(const void* data, size_t size, uint64_t seed) {
    return XXH64(data, size, seed);
}

} // namespace braid
