// Static memory planner: places blocks with known lifetimes into one arena so that blocks
// alive at the same time never share bytes, and the arena stays close to the lower bound.
//
// The planner knows nothing about graphs. It sees blocks: a half-open lifetime
// [lifetime_begin, lifetime_end) in abstract steps, a size in bytes and a caller's key.
// Two blocks conflict when their lifetimes intersect; conflicting blocks get disjoint byte
// ranges. Rules:
//
//  - Alignment: every offset is a multiple of alignment() and every size is rounded up to
//    it (64 bytes on CPU, 256 on CUDA), so the arena base's alignment carries to each block.
//  - Reuse: a block's bytes are reused only by blocks whose lifetime does not intersect its
//    own. Nothing outside the blocks added here is planned.
//  - In place (add_overwrite): `dst` may take over `src`'s bytes when `dst` begins at the
//    step where `src` ends (dst.begin == src.end - 1: the writer of dst is src's last
//    reader) and is no larger. The pair then shares one offset and counts once; chains
//    (a -> b -> c) share one placement. The planner only checks that the lifetimes chain.
//  - Lower bound: the largest total (aligned) size of placements alive at one step; no
//    arena can be smaller. arena_size() >= lower_bound() always.
//
// What the graph side (graph/memory_plan.h) puts in, and so what is never reused:
//  - never planned, never overwritten: parameters, constants and fed inputs (operators bind
//    them), outputs the user fetches and every var viewing them (their own allocation stays
//    valid after execute()), dynamic-shape vars (allocated at execution);
//  - a var lives from the step writing it to the last step reading it or a view of it; a
//    read on another comp node keeps it alive until that read is known to be done;
//  - in place only when the operator allows it (inplace_input()), it is the last reader of
//    the input's block, the block is on this comp node and read by no other, input, block
//    and output have the same byte size and dtype, and the input is the block itself or a
//    layout-keeping view of it.
//
// Algorithms live in their own files behind this interface (planner_best_fit.cpp,
// planner_ordered.cpp) and are chosen by name through make(). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace braid {

//! Assigns arena offsets to blocks with lifetimes. Use: add()/add_overwrite(), solve(),
//! then offset(), arena_size(), lower_bound(). Not thread-safe.
class MemPlanner {
public:
    //! The caller's name for a block (e.g. a var index); unique per planner.
    using Key = uint64_t;

    virtual ~MemPlanner() = default;
    MemPlanner(const MemPlanner&) = delete;
    MemPlanner& operator=(const MemPlanner&) = delete;

    //! The planner algorithm `name` with offsets aligned to `alignment` (a power of two);
    //! empty name: default_algorithm(). Throws ValueError for an unknown name.
    static std::unique_ptr<MemPlanner> make(const std::string& name, size_t alignment);
    //! Names make() accepts, the default first.
    static const std::vector<std::string>& algorithms();
    //! The algorithm that plans best on the benchmark set ("best_fit").
    static const std::string& default_algorithm();

    //! The algorithm's name, as make() takes it.
    virtual const char* name() const = 0;
    size_t alignment() const { return m_alignment; }

    //! Adds a block alive over steps [lifetime_begin, lifetime_end) (end > begin) of `size`
    //! bytes under `key`. Keys must be unique; call before solve().
    void add(size_t lifetime_begin, size_t lifetime_end, size_t size, Key key);
    //! Lets block `dst` reuse the bytes of block `src` (both added already): requires
    //! dst's lifetime to begin at src's last step, dst no larger than src, and neither
    //! already part of another overwrite in that role. Violations are internal errors.
    void add_overwrite(Key dst, Key src);
    //! Computes every offset, the arena size and the lower bound. Call once.
    void solve();

    //! Byte offset of block `key` in the arena (after solve()).
    size_t offset(Key key) const;
    //! Bytes the arena needs (after solve()).
    size_t arena_size() const { return m_arena_size; }
    //! Largest total size of placements alive at one step (after solve()).
    size_t lower_bound() const { return m_lower_bound; }
    //! Sum of the aligned sizes of every block: the arena without any reuse.
    size_t no_reuse_size() const { return m_no_reuse_size; }
    //! Number of blocks added.
    size_t nr_blocks() const { return m_blocks.size(); }
    //! Number of blocks placed over another through add_overwrite().
    size_t nr_overwrites() const { return m_nr_overwrites; }

    //! Checks the solution: offsets aligned, every placement inside the arena, and no two
    //! placements alive at one step sharing a byte. O(n log n). Throws InternalError naming
    //! the offending keys; meant for tests, benchmarks and debugging.
    void validate() const;

    //! What an algorithm places: a block plus the blocks that overwrite it in a chain.
    struct Chunk {
        size_t begin = 0, end = 0; //!< lifetime [begin, end)
        size_t size = 0;           //!< aligned bytes
        size_t offset = 0;         //!< set by place()
    };

protected:
    explicit MemPlanner(size_t alignment);

    //! Sets every chunk's offset (a multiple of alignment(); sizes are already aligned) so
    //! that chunks with intersecting lifetimes get disjoint byte ranges. Zero-size chunks
    //! may go anywhere.
    virtual void place(std::vector<Chunk>& chunks) const = 0;

private:
    struct Block {
        size_t begin, end, size;
        Key key;
        uint32_t src = NONE;   //!< block this one overwrites
        uint32_t dst = NONE;   //!< block overwriting this one
        uint32_t chunk = NONE; //!< placement index after solve()
    };
    static constexpr uint32_t NONE = ~uint32_t(0);
    uint32_t block_index(Key key) const;

    size_t m_alignment;
    std::vector<Block> m_blocks;
    std::unordered_map<Key, uint32_t> m_index; //!< key -> block, unless keys are dense
    bool m_dense_keys = true;                  //!< every key so far equals its block index
    std::vector<Chunk> m_chunks;
    size_t m_arena_size = 0, m_lower_bound = 0, m_no_reuse_size = 0;
    size_t m_nr_overwrites = 0;
    bool m_solved = false;
};

namespace planner_algos {
//! Greedy by decreasing size; each block goes to the smallest gap that fits between the
//! placed blocks its lifetime conflicts with; then gravity compaction and peak repair, all
//! under a work limit (planner_best_fit.cpp).
std::unique_ptr<MemPlanner> make_best_fit(size_t alignment);
//! First fit in order of lifetime begin, like a run-time allocator that knows when each
//! block dies (planner_ordered.cpp).
std::unique_ptr<MemPlanner> make_ordered(size_t alignment);
//! The ordered algorithm on the chunks `which` only, at offsets from `base` up; the other
//! chunks are ignored. O(n log n + n * free ranges). Returns the highest end offset.
size_t place_in_time_order(std::vector<MemPlanner::Chunk>& chunks,
                           const std::vector<uint32_t>& which, size_t base);
} // namespace planner_algos

} // namespace braid
