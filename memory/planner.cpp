#include "memory/planner.h"

#include "base/error.h"

#include <algorithm>
#include <map>

namespace braid {

MemPlanner::MemPlanner(size_t alignment) : m_alignment(alignment) {
    BRAID_ASSERT(alignment && (alignment & (alignment - 1)) == 0,
                 "planner alignment {} is not a power of two", alignment);
}

const std::vector<std::string>& MemPlanner::algorithms() {
    static const std::vector<std::string> names{"best_fit", "ordered"};
    return names;
}

const std::string& MemPlanner::default_algorithm() {
    return algorithms().front();
}

std::unique_ptr<MemPlanner> MemPlanner::make(const std::string& name, size_t alignment) {
    const std::string& algo = name.empty() ? default_algorithm() : name;
    if (algo == "best_fit") return planner_algos::make_best_fit(alignment);
    if (algo == "ordered") return planner_algos::make_ordered(alignment);
    std::string known;
    for (auto& n : algorithms()) known += (known.empty() ? "" : ", ") + n;
    BRAID_THROW(ValueError, "unknown memory planner \"{}\"; known planners: {}", name, known);
}

void MemPlanner::add(size_t lifetime_begin, size_t lifetime_end, size_t size, Key key) {
    BRAID_ASSERT(!m_solved, "MemPlanner::add() after solve()");
    BRAID_ASSERT(lifetime_begin < lifetime_end, "block {}: empty lifetime [{}, {})", key,
                 lifetime_begin, lifetime_end);
    BRAID_ASSERT(m_blocks.size() < NONE, "too many blocks");
    // Keys 0, 1, 2, ... in order (the common case) need no map.
    if (m_dense_keys && key != m_blocks.size()) {
        BRAID_ASSERT(key > m_blocks.size(), "block key {} added twice", key);
        m_dense_keys = false;
        for (uint32_t i = 0; i < m_blocks.size(); ++i) m_index.emplace(i, i);
    }
    if (!m_dense_keys) {
        auto [it, inserted] = m_index.emplace(key, uint32_t(m_blocks.size()));
        BRAID_ASSERT(inserted, "block key {} added twice", key);
    }
    size_t aligned = (size + m_alignment - 1) / m_alignment * m_alignment;
    m_blocks.push_back({lifetime_begin, lifetime_end, aligned, key});
}

uint32_t MemPlanner::block_index(Key key) const {
    if (m_dense_keys) {
        BRAID_ASSERT(key < m_blocks.size(), "unknown block key {}", key);
        return uint32_t(key);
    }
    auto it = m_index.find(key);
    BRAID_ASSERT(it != m_index.end(), "unknown block key {}", key);
    return it->second;
}

void MemPlanner::add_overwrite(Key dst, Key src) {
    BRAID_ASSERT(!m_solved, "MemPlanner::add_overwrite() after solve()");
    uint32_t d = block_index(dst), s = block_index(src);
    Block &bd = m_blocks[d], &bs = m_blocks[s];
    BRAID_ASSERT(d != s, "block {} cannot overwrite itself", dst);
    BRAID_ASSERT(bd.begin + 1 == bs.end,
                 "block {} [{}, {}) cannot overwrite block {} [{}, {}): it must begin at the "
                 "other's last step",
                 dst, bd.begin, bd.end, src, bs.begin, bs.end);
    BRAID_ASSERT(bd.size <= bs.size, "block {} ({} bytes) cannot overwrite smaller block {} ({})",
                 dst, bd.size, src, bs.size);
    BRAID_ASSERT(bd.src == NONE, "block {} already overwrites another block", dst);
    BRAID_ASSERT(bs.dst == NONE, "block {} is already overwritten by another block", src);
    // dst.begin == src.end - 1 >= src.begin, so a cycle needs one-step lifetimes; walk the
    // chain behind src to rule it out.
    for (uint32_t b = s; b != NONE; b = m_blocks[b].src)
        BRAID_ASSERT(b != d, "overwriting block {} with {} would form a cycle", src, dst);
    bd.src = s;
    bs.dst = d;
    ++m_nr_overwrites;
}

void MemPlanner::solve() {
    BRAID_ASSERT(!m_solved, "MemPlanner::solve() called twice");
    m_solved = true;
    // Chains of overwrites become one chunk: the head's bytes for the union of lifetimes.
    m_chunks.clear();
    m_no_reuse_size = 0;
    for (auto& b : m_blocks) {
        m_no_reuse_size += b.size;
        if (b.src != NONE) continue;
        Chunk c{b.begin, b.end, b.size, 0};
        uint32_t idx = uint32_t(m_chunks.size());
        for (Block* p = &b;; p = &m_blocks[p->dst]) {
            p->chunk = idx;
            c.begin = std::min(c.begin, p->begin);
            c.end = std::max(c.end, p->end);
            c.size = std::max(c.size, p->size);
            if (p->dst == NONE) break;
        }
        m_chunks.push_back(c);
    }

    place(m_chunks);

    m_arena_size = 0;
    for (auto& c : m_chunks) {
        BRAID_ASSERT(c.offset % m_alignment == 0, "{} planner: offset {} not aligned to {}", name(),
                     c.offset, m_alignment);
        if (c.size) m_arena_size = std::max(m_arena_size, c.offset + c.size);
    }

    // Lower bound: sweep lifetimes; at equal times ends come before begins ([b, e) is not
    // alive at e).
    std::vector<std::pair<size_t, ptrdiff_t>> events;
    events.reserve(m_chunks.size() * 2);
    for (auto& c : m_chunks) {
        if (!c.size) continue;
        events.emplace_back(c.begin, ptrdiff_t(c.size));
        events.emplace_back(c.end, -ptrdiff_t(c.size));
    }
    std::sort(events.begin(), events.end());
    size_t live = 0;
    m_lower_bound = 0;
    for (auto& [t, delta] : events) {
        live = size_t(ptrdiff_t(live) + delta);
        m_lower_bound = std::max(m_lower_bound, live);
    }
}

size_t MemPlanner::offset(Key key) const {
    BRAID_ASSERT(m_solved, "MemPlanner::offset() before solve()");
    return m_chunks[m_blocks[block_index(key)].chunk].offset;
}

void MemPlanner::validate() const {
    BRAID_ASSERT(m_solved, "MemPlanner::validate() before solve()");
    for (auto& b : m_blocks) {
        auto& c = m_chunks[b.chunk];
        BRAID_ASSERT(c.offset % m_alignment == 0, "block {}: offset {} not aligned to {}", b.key,
                     c.offset, m_alignment);
        BRAID_ASSERT(!b.size || c.offset + b.size <= m_arena_size,
                     "block {}: [{}, {}) outside the arena of {} bytes", b.key, c.offset,
                     c.offset + b.size, m_arena_size);
        BRAID_ASSERT(b.src == NONE || m_blocks[b.src].chunk == b.chunk,
                     "block {} does not share the offset of the block it overwrites", b.key);
    }
    // Sweep chunks by lifetime; the live ones, ordered by offset, must stay disjoint, so a
    // new chunk only needs checking against its neighbours.
    std::vector<uint32_t> order;
    for (uint32_t i = 0; i < m_chunks.size(); ++i)
        if (m_chunks[i].size) order.push_back(i);
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return m_chunks[a].begin < m_chunks[b].begin; });
    std::multimap<size_t, uint32_t> ending; // end -> chunk
    std::map<size_t, uint32_t> live;        // offset -> chunk
    auto key_of = [&](uint32_t chunk) {
        for (auto& b : m_blocks)
            if (b.chunk == chunk) return b.key;
        return Key(0);
    };
    for (uint32_t i : order) {
        auto& c = m_chunks[i];
        while (!ending.empty() && ending.begin()->first <= c.begin) {
            live.erase(m_chunks[ending.begin()->second].offset);
            ending.erase(ending.begin());
        }
        auto next = live.lower_bound(c.offset);
        bool clash = next != live.end() && next->first < c.offset + c.size;
        uint32_t other = clash ? next->second : NONE;
        if (!clash && next != live.begin()) {
            auto prev = std::prev(next);
            if (prev->first + m_chunks[prev->second].size > c.offset) {
                clash = true;
                other = prev->second;
            }
        }
        if (clash) {
            auto& o = m_chunks[other];
            BRAID_ASSERT(false,
                         "{} planner: blocks {} [{}, {}) at {}+{} and {} [{}, {}) at {}+{} are "
                         "alive together and share bytes",
                         name(), key_of(i), c.begin, c.end, c.offset, c.size, key_of(other),
                         o.begin, o.end, o.offset, o.size);
        }
        live.emplace(c.offset, i);
        ending.emplace(c.end, i);
    }
}

} // namespace braid
