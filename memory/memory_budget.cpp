#include "memory/memory_budget.h"

#include "base/error.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace braid {

MemoryBudget MemoryBudget::resolve(size_t configured) {
    if (configured) return {configured, "GraphOptions::memory_budget"};
    if (const char* env = std::getenv("BRAID_MEMORY_BUDGET"); env && *env)
        return {parse_byte_size(env, "BRAID_MEMORY_BUDGET"), "BRAID_MEMORY_BUDGET"};
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page_size <= 0) return {~size_t(0), "no limit (physical memory unknown)"};
    return {size_t(pages) * size_t(page_size), "physical memory"};
}

std::string MemoryBudget::describe() const {
    return fmt::format("{} ({} bytes, {})", format_bytes(bytes), bytes, source);
}

void MemoryBudget::check(size_t need, std::string_view what) const {
    if (need > bytes)
        BRAID_THROW(MemoryBudgetError,
                    "{} needs {} bytes ({}), over the memory budget of {}; set "
                    "BRAID_MEMORY_BUDGET (braid-run --memory-budget) or "
                    "GraphOptions::memory_budget to allow more",
                    what, need, format_bytes(need), describe());
}

size_t parse_byte_size(std::string_view text, std::string_view what) {
    auto bad = [&]() -> size_t {
        BRAID_THROW(ValueError,
                    "{}: \"{}\" is not a byte size (expected a positive number with an optional "
                    "K, M, G or T suffix, e.g. 8G)",
                    what, text);
    };
    std::string s(text);
    size_t digits = 0;
    while (digits < s.size() && (std::isdigit(uint8_t(s[digits])) || s[digits] == '.')) ++digits;
    if (digits == 0) return bad();
    std::string unit = s.substr(digits);
    for (auto& c : unit) c = char(std::toupper(uint8_t(c)));
    if (unit.size() > 1 && (unit.ends_with("IB") || unit.ends_with("B")))
        unit.resize(unit.size() - (unit.ends_with("IB") ? 2 : 1));
    double scale = 1;
    if (unit == "K")
        scale = 0x1p10;
    else if (unit == "M")
        scale = 0x1p20;
    else if (unit == "G")
        scale = 0x1p30;
    else if (unit == "T")
        scale = 0x1p40;
    else if (!unit.empty() && unit != "B")
        return bad();
    char* end = nullptr;
    double value = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + digits || !std::isfinite(value) || value * scale < 1 ||
        value * scale >= 0x1p63)
        return bad();
    return size_t(value * scale);
}

std::string format_bytes(size_t b) {
    if (b >= (size_t(1) << 40)) return fmt::format("{:.2f} TiB", double(b) / 0x1p40);
    if (b >= (size_t(1) << 30)) return fmt::format("{:.2f} GiB", double(b) / 0x1p30);
    if (b >= (size_t(1) << 20)) return fmt::format("{:.2f} MiB", double(b) / 0x1p20);
    if (b >= (size_t(1) << 10)) return fmt::format("{:.1f} KiB", double(b) / 0x1p10);
    return fmt::format("{} B", b);
}

} // namespace braid
