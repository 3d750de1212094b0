// Workspace: the scratch memory a kernel uses while its operator executes, and only then.
//
// An operator says how many bytes its kernel will ask for (OperatorNode::workspace_bytes());
// the memory plan places them in its comp node's arena for the operator's step alone, in
// memory the vars dead at that step leave free, so scratch buffers share the arena instead of
// each kernel (and each thread) keeping buffers of its own. The kernel asks for what it needs
// with get(); where nothing was planned, or less than it asks for (an operator whose shapes
// are known only at execution, a changed thread count, a kernel run outside an executable),
// the workspace allocates the bytes itself and keeps them for its later calls.
//
// Host memory only: a kernel on another device keeps its own buffers. Not thread-safe: one
// kernel call asks, then shares the bytes among its threads.
#pragma once

#include "memory/tensor.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid {

class Workspace {
public:
    //! Alignment of every pointer get() returns.
    static constexpr size_t ALIGNMENT = 64;

    Workspace() = default;
    //! Makes `planned` (a byte tensor in an arena; empty: none) the memory get() hands out
    //! while it is large enough. A previous own allocation is released.
    void assign(Tensor planned);
    //! `bytes` of host memory aligned to ALIGNMENT: the planned memory where it holds them,
    //! else an allocation of this workspace, kept (and grown) for later calls. Its contents are
    //! undefined. nullptr for 0 bytes.
    uint8_t* get(size_t bytes);
    //! Bytes of the planned memory (0: none).
    size_t planned_bytes() const { return m_planned.empty() ? 0 : m_planned.nr_bytes(); }
    //! Bytes this workspace allocated itself (0 while the planned memory sufficed).
    size_t own_bytes() const { return m_own.size(); }

    //! `bytes` rounded up to ALIGNMENT: what a kernel adds up when it splits a workspace.
    static constexpr size_t aligned(size_t bytes) {
        return (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    }

private:
    Tensor m_planned;
    Storage m_own;
};

/*!
 * Slices of a workspace for the chunks of one parallel_for: each chunk claims a free slice for
 * as long as it runs. parallel_for runs at most kernel_threads() chunks at once, so a kernel
 * that sizes its workspace with that many slices (or with as many as it has tasks, if fewer)
 * always finds one free. Thread-safe.
 */
class WorkspaceSlices {
public:
    explicit WorkspaceSlices(size_t count) : m_busy(count) {}

    //! One chunk's slice, released when the claim ends (the chunk returned or threw).
    class Claim {
    public:
        explicit Claim(WorkspaceSlices& slices);
        ~Claim() { m_slices.m_busy[m_index].store(false, std::memory_order_release); }
        Claim(const Claim&) = delete;
        Claim& operator=(const Claim&) = delete;
        //! The slice's index, below the count.
        size_t index() const { return m_index; }

    private:
        WorkspaceSlices& m_slices;
        size_t m_index;
    };

private:
    std::vector<std::atomic<bool>> m_busy;
};

} // namespace braid
