// best_fit: greedy by decreasing size with best-fit gaps (the "greedy by size" offset
// planner of TFLite and of Pisarchyk & Lee, 2020), then compaction.
//
//  1. Blocks are placed largest first. For each block, the placed blocks whose lifetimes
//     intersect its own are listed by offset; the block goes into the smallest gap between
//     them that fits, or above the highest of them. Large blocks settle at the bottom and
//     small short-lived ones fill the holes between them.
//  2. Gravity: in order of offset, each block drops to the lowest offset where it fits
//     among all the others. Holes left by the greedy pass (a small long-lived block that
//     found no gap over its whole lifetime sits on top) close this way.
//  3. Peak repair: the blocks whose lifetimes meet the highest block's neighbourhood are
//     re-placed in a few perturbed orders, the rest staying put; a result is kept only when
//     all of them end below the old peak. Repeats until the lower bound, a peak that does
//     not come down, or the work limit.
//
// Listing conflicting blocks must not scan every block (100,000 blocks plan in well under
// a second): lifetimes are compressed to slots and indexed by a segment tree (blocks
// covering a slot) plus per-slot lists of blocks starting there, so a query costs
// O(log n + conflicts). Graphs where thousands of blocks are alive at once make every
// query long; past a work limit the smallest blocks left are planned by the time sweep
// of the ordered algorithm in a region above, so planning stays near-linear.
#include "memory/planner.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace braid {

namespace {

//! Intervals over slots [0, n), built once: lists those intersecting a query interval.
//! Stored as flat arrays (one segment tree of covering lists, one list of starts per slot)
//! so that queries walk contiguous memory.
class ConflictIndex {
public:
    //! Indexes interval i over slots [begin[i], end[i]) for every i in `ids`.
    ConflictIndex(size_t nr_slots, const std::vector<uint32_t>& begin,
                  const std::vector<uint32_t>& end, const std::vector<uint32_t>& ids) {
        m_leaves = 1;
        while (m_leaves < nr_slots) m_leaves <<= 1;
        // Two passes over the canonical nodes: count, then fill.
        m_cover_begin.assign(2 * m_leaves + 1, 0);
        m_start_begin.assign(nr_slots + 1, 0);
        for (uint32_t id : ids) {
            for_each_cover_node(begin[id], end[id], [&](size_t node) { ++m_cover_begin[node]; });
            ++m_start_begin[begin[id]];
        }
        prefix_sum(m_cover_begin);
        prefix_sum(m_start_begin);
        m_cover.resize(m_cover_begin.back());
        m_start.resize(m_start_begin.back());
        std::vector<uint32_t> cover_fill(m_cover_begin.begin(), m_cover_begin.end() - 1);
        std::vector<uint32_t> start_fill(m_start_begin.begin(), m_start_begin.end() - 1);
        for (uint32_t id : ids) {
            for_each_cover_node(begin[id], end[id],
                                [&](size_t node) { m_cover[cover_fill[node]++] = id; });
            m_start[start_fill[begin[id]]++] = id;
        }
    }

    //! Calls fn(id) once for every indexed interval intersecting [b, e): those covering
    //! slot b, then those starting inside (b, e).
    template <typename Fn> void for_each_conflict(uint32_t b, uint32_t e, Fn&& fn) const {
        for (size_t node = b + m_leaves; node >= 1; node >>= 1)
            for (uint32_t k = m_cover_begin[node]; k < m_cover_begin[node + 1]; ++k) fn(m_cover[k]);
        for (uint32_t k = m_start_begin[b + 1]; k < m_start_begin[e]; ++k) fn(m_start[k]);
    }

private:
    template <typename Fn> void for_each_cover_node(size_t b, size_t e, Fn&& fn) const {
        for (size_t l = b + m_leaves, r = e + m_leaves; l < r; l >>= 1, r >>= 1) {
            if (l & 1) fn(l++);
            if (r & 1) fn(--r);
        }
    }
    static void prefix_sum(std::vector<uint32_t>& v) {
        uint32_t sum = 0;
        for (auto& x : v) {
            uint32_t c = x;
            x = sum;
            sum += c;
        }
    }

    size_t m_leaves;
    std::vector<uint32_t> m_cover_begin, m_cover; //!< per tree node: intervals covering it
    std::vector<uint32_t> m_start_begin, m_start; //!< per slot: intervals beginning there
};

//! Deterministic pseudo-random bits from (a, b): order perturbations that repeat run to run.
uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

class BestFitPlanner final : public MemPlanner {
public:
    explicit BestFitPlanner(size_t alignment) : MemPlanner(alignment) {}
    const char* name() const override { return "best_fit"; }

protected:
    void place(std::vector<Chunk>& chunks) const override;

private:
    // One work limit for all three steps, in conflicting blocks visited (some 10 ns each),
    // so that very wide graphs (thousands of blocks alive at once) still plan in
    // near-linear time: greedy first, then gravity and repair with what is left.
    static constexpr uint64_t WORK_PER_BLOCK = 512;
    static constexpr uint64_t WORK_MIN = uint64_t(1) << 24;
    static constexpr int REPAIR_ATTEMPTS = 8;
};

using Range = std::pair<size_t, size_t>; // [offset, end) of a placed block

//! Offset for a block of `size` among the ranges of the blocks it conflicts with: the
//! smallest gap that fits, else above the highest. Sorts `ranges`.
size_t best_gap(std::vector<Range>& ranges, size_t size) {
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& x, const Range& y) { return x.first < y.first; });
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (auto& [off, end] : ranges) {
        if (off > cursor) {
            size_t gap = off - cursor;
            if (gap >= size && gap < best_gap) {
                best_gap = gap;
                best = cursor;
            }
        }
        cursor = std::max(cursor, end);
    }
    return best != SIZE_MAX ? best : cursor;
}

//! The lowest offset for a block of `size` among `ranges` (those below it only). Sorts.
size_t lowest_fit(std::vector<Range>& ranges, size_t size) {
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& x, const Range& y) { return x.first < y.first; });
    size_t cursor = 0;
    for (auto& [off, end] : ranges) {
        if (off >= cursor + size) break;
        cursor = std::max(cursor, end);
    }
    return cursor;
}

void BestFitPlanner::place(std::vector<Chunk>& chunks) const {
    // Compress lifetimes to slots: slot i is [times[i], times[i + 1]).
    std::vector<size_t> times;
    times.reserve(chunks.size() * 2);
    for (auto& c : chunks) {
        times.push_back(c.begin);
        times.push_back(c.end);
    }
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    auto slot = [&](size_t t) {
        return uint32_t(std::lower_bound(times.begin(), times.end(), t) - times.begin());
    };
    size_t n = chunks.size();
    std::vector<uint32_t> sb(n), se(n), order;
    order.reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
        chunks[i].offset = 0;
        sb[i] = slot(chunks[i].begin);
        se[i] = slot(chunks[i].end);
        if (chunks[i].size) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        auto &ca = chunks[a], &cb = chunks[b];
        if (ca.size != cb.size) return ca.size > cb.size;
        if (ca.begin != cb.begin) return ca.begin < cb.begin;
        return a < b;
    });
    ConflictIndex index(times.size(), sb, se, order);
    std::vector<uint8_t> placed(n, 0);
    std::vector<Range> ranges;
    // The ranges of the placed blocks conflicting with block i (those starting below
    // `below` only); returns the number of blocks visited, the unit of work.
    auto collect = [&](uint32_t i, size_t below) {
        ranges.clear();
        uint64_t visited = 0;
        index.for_each_conflict(sb[i], se[i], [&](uint32_t j) {
            ++visited;
            if (placed[j] && j != i && chunks[j].offset < below)
                ranges.emplace_back(chunks[j].offset, chunks[j].offset + chunks[j].size);
        });
        return visited;
    };
    auto arena_top = [&] {
        size_t top = 0;
        for (uint32_t i : order) top = std::max(top, chunks[i].offset + chunks[i].size);
        return top;
    };

    // 1. Greedy by decreasing size.
    const uint64_t budget = std::max(WORK_PER_BLOCK * n, WORK_MIN);
    uint64_t work = 0;
    size_t k = 0, arena = 0;
    for (; k < order.size() && work <= budget; ++k) {
        uint32_t i = order[k];
        work += collect(i, SIZE_MAX);
        chunks[i].offset = best_gap(ranges, chunks[i].size);
        arena = std::max(arena, chunks[i].offset + chunks[i].size);
        placed[i] = 1;
    }
    if (k < order.size()) {
        // Too wide to finish greedily: the smallest blocks left share a region above,
        // planned by the time sweep. Their bytes are a small part of the total.
        std::vector<uint32_t> rest(order.begin() + long(k), order.end());
        planner_algos::place_in_time_order(chunks, rest, arena);
        return;
    }

    // 2. Gravity, bottom up.
    std::vector<uint32_t> by_offset(order);
    std::sort(by_offset.begin(), by_offset.end(), [&](uint32_t a, uint32_t b) {
        return chunks[a].offset != chunks[b].offset ? chunks[a].offset < chunks[b].offset : a < b;
    });
    for (uint32_t i : by_offset) {
        if (work >= budget) break;
        work += collect(i, chunks[i].offset);
        chunks[i].offset = std::min(chunks[i].offset, lowest_fit(ranges, chunks[i].size));
    }
    arena = arena_top();

    // 3. Peak repair.
    std::vector<size_t> load(times.size() + 1, 0);
    for (uint32_t i : order) {
        load[sb[i]] += chunks[i].size;
        load[se[i]] -= chunks[i].size;
    }
    size_t lower_bound = 0, running = 0;
    for (size_t t = 0; t < times.size(); ++t) {
        running += load[t];
        lower_bound = std::max(lower_bound, running);
    }
    std::vector<uint32_t> window;
    std::vector<size_t> saved;
    std::vector<std::pair<uint64_t, uint32_t>> keyed;
    while (arena > lower_bound && work < budget) {
        // The peak block with the shortest lifetime, and every block meeting a block that
        // meets it: the blocks pinning the peak in place can move too.
        uint32_t peak = UINT32_MAX;
        for (uint32_t i : order)
            if (chunks[i].offset + chunks[i].size == arena &&
                (peak == UINT32_MAX || se[i] - sb[i] < se[peak] - sb[peak]))
                peak = i;
        uint32_t lo = sb[peak], hi = se[peak];
        index.for_each_conflict(sb[peak], se[peak], [&](uint32_t j) {
            lo = std::min(lo, sb[j]);
            hi = std::max(hi, se[j]);
        });
        window.clear();
        index.for_each_conflict(lo, hi, [&](uint32_t j) { window.push_back(j); });
        saved.clear();
        for (uint32_t j : window) saved.push_back(chunks[j].offset);
        bool lowered = false;
        for (int attempt = 0; attempt < REPAIR_ATTEMPTS && !lowered && work < budget; ++attempt) {
            // Attempt 0: plain decreasing size; later ones jitter sizes by up to 50%.
            keyed.clear();
            for (uint32_t j : window) {
                double jitter = attempt ? double(mix(j, uint64_t(attempt)) >> 11) / 0x1p53 : 0;
                keyed.emplace_back(uint64_t(double(chunks[j].size) * (1 + 0.5 * jitter)), j);
                placed[j] = 0;
            }
            std::sort(keyed.begin(), keyed.end(), [](auto& x, auto& y) {
                return x.first != y.first ? x.first > y.first : x.second < y.second;
            });
            size_t top = 0;
            for (auto& [key, j] : keyed) {
                work += collect(j, SIZE_MAX);
                chunks[j].offset = best_gap(ranges, chunks[j].size);
                top = std::max(top, chunks[j].offset + chunks[j].size);
                placed[j] = 1;
            }
            lowered = top < arena;
            if (!lowered)
                for (size_t w = 0; w < window.size(); ++w) chunks[window[w]].offset = saved[w];
        }
        if (!lowered) break;
        arena = arena_top();
    }
}

} // namespace

std::unique_ptr<MemPlanner> planner_algos::make_best_fit(size_t alignment) {
    return std::make_unique<BestFitPlanner>(alignment);
}

} // namespace braid
