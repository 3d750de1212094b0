// The memory budget: how many bytes a model's vars and an executable's static memory plan may
// take before anything is allocated. Absurd requests (a Fill of 2^47 elements, an input of
// 2^40) are refused with a MemoryBudgetError naming the var instead of failing in the
// allocator (or being killed for memory) part-way through.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace braid {

//! A budget in bytes and where it came from (for error messages).
struct MemoryBudget {
    size_t bytes = 0;
    //! "GraphOptions::memory_budget", "BRAID_MEMORY_BUDGET" or "physical memory".
    std::string source;

    /*!
     * The budget in effect: `configured` when non-zero (GraphOptions::memory_budget), else the
     * BRAID_MEMORY_BUDGET environment variable (a byte size, see parse_byte_size), else the
     * machine's physical memory. A malformed BRAID_MEMORY_BUDGET throws ValueError.
     */
    static MemoryBudget resolve(size_t configured);

    //! "23.4 GiB (25125855232 bytes, physical memory)": for messages.
    std::string describe() const;
    //! Throws MemoryBudgetError when `bytes`, what `what` (e.g. `var "x" {8,4} float32`)
    //! needs, exceed the budget.
    void check(size_t bytes, std::string_view what) const;
};

//! Parses "1073741824", "512M", "8G", "1.5T" (K, M, G, T: powers of 1024; a trailing "B" or
//! "iB" is allowed); throws ValueError naming `what` on anything else, zero included.
size_t parse_byte_size(std::string_view text, std::string_view what);

//! "1.5 GiB": a byte count for people.
std::string format_bytes(size_t bytes);

} // namespace braid
