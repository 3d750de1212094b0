// best_fit: greedy by decreasing size with best-fit gaps (the "greedy by size" offset
// planner of TFLite and of Pisarchyk & Lee, 2020, MegEngine's best_fit in spirit).
//
// Blocks are placed largest first. For each block, the already placed blocks whose lifetimes
// intersect its own are listed by offset; the block goes into the smallest gap between them
// that fits, or above the highest of them. Large blocks thus settle at the bottom and small
// short-lived ones fill the holes between them.
//
// Listing the conflicting placed blocks must not scan every block (100,000 blocks plan in
// well under a second): lifetimes are compressed to slots and kept in a segment tree (blocks
// covering a slot) plus per-slot lists of blocks starting there, so a query costs
// O(log n + conflicts).
#include "memory/planner.h"

#include <algorithm>

namespace braid {

namespace {

constexpr uint32_t NIL = ~uint32_t(0);

//! A set of slot indices with "next member at or after i" in O(n / 4096) worst case.
class SlotSet {
public:
    explicit SlotSet(size_t n) : m_words((n + 63) / 64), m_summary((m_words.size() + 63) / 64) {}
    void insert(size_t i) {
        m_words[i / 64] |= uint64_t(1) << (i % 64);
        m_summary[i / 4096] |= uint64_t(1) << (i / 64 % 64);
    }
    //! The smallest member >= i, or SIZE_MAX.
    size_t next(size_t i) const {
        size_t w = i / 64;
        if (w >= m_words.size()) return SIZE_MAX;
        uint64_t bits = m_words[w] & (~uint64_t(0) << (i % 64));
        if (bits) return w * 64 + size_t(__builtin_ctzll(bits));
        // Find the next non-empty word through the summary.
        size_t sw = (w + 1) / 64, sbit = (w + 1) % 64;
        while (sw < m_summary.size()) {
            uint64_t s = sbit < 64 ? m_summary[sw] & (~uint64_t(0) << sbit) : 0;
            if (s) {
                size_t word = sw * 64 + size_t(__builtin_ctzll(s));
                return word * 64 + size_t(__builtin_ctzll(m_words[word]));
            }
            ++sw;
            sbit = 0;
        }
        return SIZE_MAX;
    }

private:
    std::vector<uint64_t> m_words, m_summary;
};

//! Placed intervals over slots [0, n): lists those intersecting a query interval.
class ConflictIndex {
public:
    explicit ConflictIndex(size_t nr_slots) : m_starts_set(nr_slots) {
        m_leaves = 1;
        while (m_leaves < nr_slots) m_leaves <<= 1;
        m_cover_head.assign(2 * m_leaves, NIL);
        m_start_head.assign(nr_slots, NIL);
    }

    //! Records interval `id` over slots [b, e).
    void insert(uint32_t id, size_t b, size_t e) {
        for (size_t l = b + m_leaves, r = e + m_leaves; l < r; l >>= 1, r >>= 1) {
            if (l & 1) push(m_cover_head[l++], id);
            if (r & 1) push(m_cover_head[--r], id);
        }
        push(m_start_head[b], id);
        m_starts_set.insert(b);
    }

    //! Calls fn(id) once for every recorded interval intersecting [b, e): those covering
    //! slot b, then those starting inside (b, e).
    template <typename Fn> void for_each_conflict(size_t b, size_t e, Fn&& fn) const {
        for (size_t node = b + m_leaves; node >= 1; node >>= 1)
            for (uint32_t i = m_cover_head[node]; i != NIL; i = m_entries[i].next)
                fn(m_entries[i].id);
        for (size_t s = m_starts_set.next(b + 1); s < e; s = m_starts_set.next(s + 1))
            for (uint32_t i = m_start_head[s]; i != NIL; i = m_entries[i].next) fn(m_entries[i].id);
    }

private:
    struct Entry {
        uint32_t id, next;
    };
    void push(uint32_t& head, uint32_t id) {
        m_entries.push_back({id, head});
        head = uint32_t(m_entries.size() - 1);
    }

    size_t m_leaves;
    std::vector<uint32_t> m_cover_head; //!< segment tree nodes: intervals covering the node
    std::vector<uint32_t> m_start_head; //!< per slot: intervals beginning there
    std::vector<Entry> m_entries;
    SlotSet m_starts_set;
};

class BestFitPlanner final : public MemPlanner {
public:
    explicit BestFitPlanner(size_t alignment) : MemPlanner(alignment) {}
    const char* name() const override { return "best_fit"; }

protected:
    void place(std::vector<Chunk>& chunks) const override {
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
            return size_t(std::lower_bound(times.begin(), times.end(), t) - times.begin());
        };

        std::vector<uint32_t> order;
        order.reserve(chunks.size());
        for (uint32_t i = 0; i < chunks.size(); ++i) {
            chunks[i].offset = 0;
            if (chunks[i].size) order.push_back(i);
        }
        std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
            auto &ca = chunks[a], &cb = chunks[b];
            if (ca.size != cb.size) return ca.size > cb.size;
            if (ca.begin != cb.begin) return ca.begin < cb.begin;
            return a < b;
        });

        ConflictIndex index(times.size());
        std::vector<std::pair<size_t, size_t>> placed; // (offset, end) of conflicting chunks
        for (uint32_t i : order) {
            auto& c = chunks[i];
            size_t b = slot(c.begin), e = slot(c.end);
            placed.clear();
            index.for_each_conflict(b, e, [&](uint32_t j) {
                placed.emplace_back(chunks[j].offset, chunks[j].offset + chunks[j].size);
            });
            std::sort(placed.begin(), placed.end());
            size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
            for (auto& [off, end] : placed) {
                if (off > cursor) {
                    size_t gap = off - cursor;
                    if (gap >= c.size && gap < best_gap) {
                        best_gap = gap;
                        best = cursor;
                    }
                }
                cursor = std::max(cursor, end);
            }
            c.offset = best != SIZE_MAX ? best : cursor;
            index.insert(i, b, e);
        }
    }
};

} // namespace

std::unique_ptr<MemPlanner> planner_algos::make_best_fit(size_t alignment) {
    return std::make_unique<BestFitPlanner>(alignment);
}

} // namespace braid
