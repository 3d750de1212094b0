// Incremental xxHash64 hashing, used for operator deduplication and content checksums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace braid {

//! Streams bytes into an XXH64 state. Not thread-safe; cheap to create.
class Hasher {
public:
    explicit Hasher(uint64_t seed = 0);
    ~Hasher();
    Hasher(const Hasher&) = delete;
    Hasher& operator=(const Hasher&) = delete;

    Hasher& add_bytes(const void* data, size_t size);
    Hasher& add(std::string_view s) {
        add_pod(s.size());
        return add_bytes(s.data(), s.size());
    }
    template <typename T>
    requires std::is_trivially_copyable_v<T> Hasher& add_pod(const T& v) {
        return add_bytes(&v, sizeof(T));
    }
    uint64_t digest() const;

private:
    void* m_state;
};

//! XXH64 of a buffer in one call.
uint64_t xxhash64(const void* data, size_t size, uint64_t seed = 0);

} // namespace braid
