#include "graph/comp_node.h"

#include "base/error.h"
#include "base/log.h"
#include "memory/tensor.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <thread>

#if BRAID_WITH_CUDA
#include "base/cuda_check.h"
#include "graph/cuda_comp_node.h"
#include "memory/cuda_copy.h"
#endif

namespace braid {

//! One comp node: a locator, a device, and (unless inline) a worker thread with a queue.
class CompNodeImpl {
public:
    CompNodeImpl(std::string locator, Device device, int stream, bool is_inline,
                 std::shared_ptr<CudaContext> cuda = nullptr)
        : m_locator(std::move(locator)), m_device(device), m_stream(stream), m_inline(is_inline),
          m_cuda(std::move(cuda)) {
        if (!m_inline) m_thread = std::thread([this] { worker_loop(); });
    }

    ~CompNodeImpl() {
        if (!m_inline) {
            {
                std::lock_guard lk(m_mutex);
                m_stop = true;
            }
            m_cv.notify_all();
            m_thread.join();
        }
    }

    void dispatch(std::function<void()> task) {
        if (m_inline) {
            run_task(task);
            return;
        }
        bool sleeping;
        {
            std::lock_guard lk(m_mutex);
            m_queue.push_back(std::move(task));
            sleeping = m_sleeping;
        }
        if (sleeping) m_cv.notify_one(); // a busy worker finds the task when it looks next
    }

    static void run_task(std::function<void()>& task) {
        try {
            task();
        } catch (const std::exception& e) {
            logger()->error("uncaught exception in comp node task: {}", e.what());
        }
    }

    void worker_loop() {
#if BRAID_WITH_CUDA
        if (m_cuda) {
            try {
                m_cuda->activate(); // kernels enqueued by this thread target this device
            } catch (const std::exception& e) {
                logger()->error("comp node {}: {}", m_locator, e.what());
            }
        }
#endif
        for (;;) {
            std::function<void()> task;
            {
                std::unique_lock lk(m_mutex);
                m_sleeping = true;
                m_cv.wait(lk, [&] { return m_stop || !m_queue.empty(); });
                m_sleeping = false;
                if (m_queue.empty()) return; // stopping and drained
                task = std::move(m_queue.front());
                m_queue.pop_front();
            }
            run_task(task);
        }
    }

    std::string m_locator;
    Device m_device;
    int m_stream;
    bool m_inline;
    uint64_t m_id = 0;
    std::shared_ptr<CudaContext> m_cuda; //!< CUDA comp nodes only

private:
    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::deque<std::function<void()>> m_queue;
    bool m_sleeping = false; //!< the worker waits on m_cv (under m_mutex)
    bool m_stop = false;
    std::thread m_thread;
};

namespace {

struct Registry {
    std::mutex mutex;
    std::map<std::string, std::unique_ptr<CompNodeImpl>> nodes;
};

Registry& registry() {
    static Registry reg;
    return reg;
}

} // namespace

CompNode CompNode::load(const std::string& locator) {
    static const std::regex pattern(R"((cpu|cuda)(\d+)(?::(\d+))?)");
    constexpr const char* accepted = "expected cpu:default, cpuN, cpuN:K, cudaN or cudaN:K";
    // Device and stream numbers fit 16 bits of the comp node id (below); larger ones (and
    // digit strings past int's range) name no comp node.
    auto number = [&](const std::string& digits, const char* what) {
        if (digits.size() > 5 || std::stoul(digits) >= 65535)
            BRAID_THROW(ValueError,
                        "invalid comp node locator \"{}\": {} {} is out of range "
                        "(0 to 65534); {}",
                        locator, what, digits, accepted);
        return int(std::stoul(digits));
    };
    std::string canon;
    Device dev;
    int stream = 0, node_index = -1;
    bool is_inline = false;
    std::smatch m;
    if (locator == "cpu:default") {
        canon = locator;
        is_inline = true;
        stream = -1;
    } else if (std::regex_match(locator, m, pattern)) {
        dev.kind = m[1] == "cpu" ? Device::Kind::CPU : Device::Kind::CUDA;
        node_index = number(m[2], "device number");
        // All CPU comp nodes share host memory.
        dev.index = dev.kind == Device::Kind::CPU ? 0 : node_index;
        stream = m[3].matched ? number(m[3], "stream number") : 0;
        canon = std::string(m[1]) + std::to_string(node_index) +
                (stream ? ":" + std::to_string(stream) : "");
#if !BRAID_WITH_CUDA
        if (dev.kind == Device::Kind::CUDA)
            BRAID_THROW(ValueError, "comp node \"{}\": this build of braid has no CUDA support",
                        locator);
#endif
    } else {
        BRAID_THROW(ValueError, "invalid comp node locator \"{}\"; {}", locator, accepted);
    }
    auto& reg = registry();
    std::lock_guard lk(reg.mutex);
    auto& slot = reg.nodes[canon];
    if (!slot) {
        std::shared_ptr<CudaContext> cuda;
#if BRAID_WITH_CUDA
        if (dev.kind == Device::Kind::CUDA) {
            try {
                check_cuda_device(dev.index, canon);
                cuda = std::make_shared<CudaContext>(dev.index, canon);
            } catch (...) {
                reg.nodes.erase(canon);
                throw;
            }
        }
#endif
        slot = std::make_unique<CompNodeImpl>(canon, dev, stream, is_inline, std::move(cuda));
        // Ordered by kind, then index, then stream; cpu:default sorts first.
        uint64_t kind = dev.kind == Device::Kind::CPU ? 0 : 1;
        slot->m_id = (kind << 48) | (uint64_t(node_index + 1) << 16) | uint64_t(stream + 1);
    }
    return CompNode(slot.get());
}

const std::string& CompNode::locator() const {
    return m_impl->m_locator;
}
Device CompNode::device() const {
    return m_impl->m_device;
}
bool CompNode::is_inline() const {
    return m_impl->m_inline;
}
uint64_t CompNode::id() const {
    return m_impl ? m_impl->m_id : 0;
}
std::shared_ptr<Allocator> CompNode::allocator() const {
#if BRAID_WITH_CUDA
    if (m_impl && m_impl->m_cuda) return m_impl->m_cuda->allocator();
#endif
    return CpuAllocator::instance();
}

std::shared_ptr<Allocator> CompNode::host_allocator() const {
#if BRAID_WITH_CUDA
    if (m_impl && m_impl->m_cuda) return CudaHostAllocator::instance();
#endif
    return CpuAllocator::instance();
}

CudaContext* CompNode::cuda_context() const {
    return m_impl ? m_impl->m_cuda.get() : nullptr;
}

int CompNode::cuda_device_count() {
#if BRAID_WITH_CUDA
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return count;
#else
    return 0;
#endif
}

void CompNode::device_sync() const {
#if BRAID_WITH_CUDA
    if (m_impl && m_impl->m_cuda) m_impl->m_cuda->synchronize();
#endif
}

void CompNode::copy(Tensor& dst, const Tensor& src) const {
    BRAID_ASSERT(m_impl, "copy on an invalid comp node");
    if (dst.device().kind == Device::Kind::CPU && src.device().kind == Device::Kind::CPU) {
        dst.copy_from(src);
        return;
    }
#if BRAID_WITH_CUDA
    auto* cuda = m_impl->m_cuda.get();
    // The strided copy kernel is launched on the calling thread's device: make it the stream's.
    std::optional<CudaDeviceGuard> guard;
    if (cuda) guard.emplace(cuda->device());
    cuda_copy_tensor(dst, src, cuda ? cuda->stream() : nullptr,
                     cuda ? std::static_pointer_cast<Allocator>(cuda->allocator()) : nullptr);
#else
    BRAID_THROW(ValueError, "comp node {}: cannot copy {} memory without CUDA support", locator(),
                src.device().kind == Device::Kind::CPU ? dst.device().to_string()
                                                       : src.device().to_string());
#endif
}

void CompNode::dispatch(std::function<void()> task) const {
    BRAID_ASSERT(m_impl, "dispatch on an invalid comp node");
    m_impl->dispatch(std::move(task));
}

void CompNode::record_marker(DeviceMarker& marker) const {
#if BRAID_WITH_CUDA
    if (m_impl && m_impl->m_cuda) {
        auto* cuda = m_impl->m_cuda.get();
        if (!marker.m_event) {
            CudaDeviceGuard guard(cuda->device());
            cudaEvent_t event = nullptr;
            BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
            marker.m_event = event;
        }
        BRAID_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(marker.m_event), cuda->stream()));
    }
#endif
}

void CompNode::wait_marker(const DeviceMarker& marker) const {
#if BRAID_WITH_CUDA
    if (marker.empty()) return;
    auto event = static_cast<cudaEvent_t>(marker.m_event);
    if (m_impl && m_impl->m_cuda)
        BRAID_CUDA_CHECK(cudaStreamWaitEvent(m_impl->m_cuda->stream(), event, 0));
    else
        BRAID_CUDA_CHECK(cudaEventSynchronize(event));
#endif
}

DeviceMarker::~DeviceMarker() {
#if BRAID_WITH_CUDA
    if (m_event) (void)cudaEventDestroy(static_cast<cudaEvent_t>(m_event));
#endif
}

DeviceMarker& DeviceMarker::operator=(DeviceMarker&& rhs) noexcept {
    if (this != &rhs) {
        DeviceMarker old(std::move(*this));
        m_event = rhs.m_event;
        rhs.m_event = nullptr;
    }
    return *this;
}

void CompNode::sync() const {
    CompNodeEvent ev;
    ev.record(*this);
    ev.host_wait();
}

void CompNodeEvent::record(CompNode cn) {
    auto fired = std::make_shared<std::atomic<uint32_t>>(0);
    m_fired = fired;
    cn.dispatch([fired, cn] {
        // On a CUDA comp node the work before the event is done once its stream drained.
        try {
            cn.device_sync();
        } catch (const std::exception& e) {
            logger()->error("comp node {}: {}", cn.locator(), e.what());
        }
        fired->store(1, std::memory_order_release);
        fired->notify_all();
    });
}

void CompNodeEvent::host_wait() const {
    auto fired = m_fired;
    fired->wait(0, std::memory_order_acquire);
}

void CompNodeEvent::device_wait(CompNode cn) const {
    auto fired = m_fired;
    cn.dispatch([fired] { fired->wait(0, std::memory_order_acquire); });
}

} // namespace braid
