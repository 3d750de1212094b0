// Comp nodes: a device plus an ordered work queue.
//
// Locators: "cpu0", "cpu1", ... each own a worker thread with a FIFO queue; "cpu0:1" is a
// second queue (a second thread) on the same device; "cpu:default" runs work inline in the
// thread that dispatches it. CUDA comp nodes ("cuda0", "cuda0:1": device 0, streams 0 and 1)
// have a worker thread too, which enqueues kernels on the comp node's CUDA stream
// (graph/cuda_comp_node.h); loading one in a build without CUDA, or on a machine without a
// device, throws ValueError.
// CompNode is a small handle; comp nodes live for the whole process. Thread-safe.
#pragma once

#include "memory/allocator.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace braid {

class CompNodeImpl;
class CudaContext;
class Tensor;
class DeviceMarker;

//! A handle to a process-wide comp node. Default-constructed handles are invalid.
class CompNode {
public:
    CompNode() = default;

    //! The comp node named by `locator`; created on first use. Throws ValueError for a
    //! malformed locator.
    static CompNode load(const std::string& locator);
    //! "cpu:default": runs work in the dispatching thread.
    static CompNode default_cpu() { return load("cpu:default"); }

    bool valid() const { return m_impl != nullptr; }
    //! The canonical locator, e.g. "cpu0", "cpu0:1", "cpu:default".
    const std::string& locator() const;
    Device device() const;
    //! True for "cpu:default", whose work runs synchronously in the caller.
    bool is_inline() const;
    //! A small integer unique to this comp node in the process, stable for its lifetime;
    //! ordered by (device kind, device index, stream).
    uint64_t id() const;
    //! The allocator for this comp node's device memory (on a CUDA comp node: device memory
    //! whose blocks are reused in this comp node's stream order).
    std::shared_ptr<Allocator> allocator() const;
    //! Host memory this comp node copies to and from fastest: pinned memory on a CUDA comp
    //! node, the plain host allocator otherwise.
    std::shared_ptr<Allocator> host_allocator() const;

    //! Queues `task` behind everything already dispatched to this comp node. Exceptions
    //! escaping `task` are logged and swallowed: callers report errors their own way.
    void dispatch(std::function<void()> task) const;
    //! Blocks until every task dispatched before this call has finished, including the
    //! device work those tasks enqueued.
    void sync() const;
    //! Blocks until the device work enqueued on this comp node so far has finished (a CUDA
    //! stream synchronisation; nothing on CPU comp nodes). Does not wait for queued host
    //! tasks, so the comp node's own worker may call it.
    void device_sync() const;

    /*!
     * Copies `src` into `dst` (same shape and dtype; any strides; host or device memory),
     * ordered on this comp node: enqueued on a CUDA comp node's stream, done before return on
     * a CPU comp node. Callable from any thread (kernels call it from the worker); the
     * tensors' producers must have finished or be ordered before it on this comp node.
     */
    void copy(Tensor& dst, const Tensor& src) const;

    //! Records into `marker` the device work enqueued on this comp node so far (a CUDA
    //! event). Nothing on a CPU comp node, whose work is done when its task returns.
    void record_marker(DeviceMarker& marker) const;
    //! Orders what this comp node does next after `marker`: a CUDA comp node's stream waits
    //! for it on the device (the caller does not block); on a CPU comp node the calling thread
    //! blocks until the device reached it. Nothing for an empty marker.
    void wait_marker(const DeviceMarker& marker) const;

    //! The CUDA state of a CUDA comp node (graph/cuda_comp_node.h); nullptr otherwise.
    CudaContext* cuda_context() const;
    //! Number of CUDA devices braid can use: 0 in a build without CUDA support, or when the
    //! driver reports none or fails.
    static int cuda_device_count();

    bool operator==(const CompNode& rhs) const { return m_impl == rhs.m_impl; }
    bool operator!=(const CompNode& rhs) const { return m_impl != rhs.m_impl; }
    bool operator<(const CompNode& rhs) const { return id() < rhs.id(); }

private:
    explicit CompNode(CompNodeImpl* impl) : m_impl(impl) {}
    CompNodeImpl* m_impl = nullptr;
};

//! A point in a comp node's device queue (a CUDA event), set by CompNode::record_marker():
//! lets another comp node wait for device work without blocking the producer's thread.
//! Empty until recorded on a CUDA comp node. Move-only; not thread-safe.
class DeviceMarker {
public:
    DeviceMarker() = default;
    ~DeviceMarker();
    DeviceMarker(DeviceMarker&& rhs) noexcept : m_event(rhs.m_event) { rhs.m_event = nullptr; }
    DeviceMarker& operator=(DeviceMarker&& rhs) noexcept;
    DeviceMarker(const DeviceMarker&) = delete;
    DeviceMarker& operator=(const DeviceMarker&) = delete;
    bool empty() const { return m_event == nullptr; }

private:
    friend class CompNode;
    void* m_event = nullptr; //!< cudaEvent_t
};

//! A one-shot signal recorded on a comp node's queue: it fires when the queue reaches it (on a
//! CUDA comp node: once the device work enqueued before it finished too).
//! Used to order work across comp nodes and with the host. Thread-safe.
class CompNodeEvent {
public:
    //! Arms the event and queues its firing on `cn` behind the work dispatched so far.
    void record(CompNode cn);
    //! Blocks the calling thread until the recorded event fired.
    void host_wait() const;
    //! Makes `cn` wait (in its queue) until the event fired; the caller does not block.
    void device_wait(CompNode cn) const;
    bool finished() const { return m_fired->load(std::memory_order_acquire) != 0; }

private:
    std::shared_ptr<std::atomic<uint32_t>> m_fired = std::make_shared<std::atomic<uint32_t>>(1);
};

} // namespace braid
