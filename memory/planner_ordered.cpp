// ordered: first fit in order of lifetime begin.
//
// Replays the lifetimes like a run-time allocator that frees each block exactly when it
// dies: blocks are taken in order of their first step (larger first on ties); blocks that
// died before are returned to an offset-ordered free list (neighbours merge); the new block
// takes the lowest free range that fits, or grows the arena's top (reusing a free range that
// touches the top). Simple and O(n log n + n * free ranges); it fragments more than best_fit
// because it cannot know the sizes still to come.
#include "memory/planner.h"

#include <algorithm>
#include <map>
#include <queue>

namespace braid {

namespace {

class OrderedPlanner final : public MemPlanner {
public:
    explicit OrderedPlanner(size_t alignment) : MemPlanner(alignment) {}
    const char* name() const override { return "ordered"; }

protected:
    void place(std::vector<Chunk>& chunks) const override {
        std::vector<uint32_t> all(chunks.size());
        for (uint32_t i = 0; i < chunks.size(); ++i) all[i] = i;
        planner_algos::place_in_time_order(chunks, all, 0);
    }
};

} // namespace

std::unique_ptr<MemPlanner> planner_algos::make_ordered(size_t alignment) {
    return std::make_unique<OrderedPlanner>(alignment);
}

size_t planner_algos::place_in_time_order(std::vector<MemPlanner::Chunk>& chunks,
                                          const std::vector<uint32_t>& which, size_t base) {
    using Chunk = MemPlanner::Chunk;
    std::vector<uint32_t> order;
    order.reserve(which.size());
    for (uint32_t i : which) {
        chunks[i].offset = 0;
        if (chunks[i].size) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        auto &ca = chunks[a], &cb = chunks[b];
        if (ca.begin != cb.begin) return ca.begin < cb.begin;
        if (ca.size != cb.size) return ca.size > cb.size;
        return a < b;
    });

    std::map<size_t, size_t> free_ranges; // offset -> size
    size_t top = base;
    auto release = [&](const Chunk& c) {
        size_t off = c.offset, size = c.size;
        auto next = free_ranges.lower_bound(off);
        if (next != free_ranges.end() && off + size == next->first) {
            size += next->second;
            next = free_ranges.erase(next);
        }
        if (next != free_ranges.begin()) {
            auto prev = std::prev(next);
            if (prev->first + prev->second == off) {
                prev->second += size;
                return;
            }
        }
        free_ranges.emplace(off, size);
    };

    using Ending = std::pair<size_t, uint32_t>; // (end, chunk)
    std::priority_queue<Ending, std::vector<Ending>, std::greater<>> live;
    size_t highest = base;
    for (uint32_t i : order) {
        auto& c = chunks[i];
        while (!live.empty() && live.top().first <= c.begin) {
            release(chunks[live.top().second]);
            live.pop();
        }
        auto fit = std::find_if(free_ranges.begin(), free_ranges.end(),
                                [&](auto& r) { return r.second >= c.size; });
        if (fit != free_ranges.end()) {
            c.offset = fit->first;
            size_t rest = fit->second - c.size;
            free_ranges.erase(fit);
            if (rest) free_ranges.emplace(c.offset + c.size, rest);
        } else if (!free_ranges.empty() &&
                   std::prev(free_ranges.end())->first + std::prev(free_ranges.end())->second ==
                       top) {
            // The highest free range touches the top: start there and grow the top.
            auto last = std::prev(free_ranges.end());
            c.offset = last->first;
            free_ranges.erase(last);
            top = c.offset + c.size;
        } else {
            c.offset = top;
            top += c.size;
        }
        highest = std::max(highest, c.offset + c.size);
        live.emplace(c.end, i);
    }
    return highest;
}

} // namespace braid
