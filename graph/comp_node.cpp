#include "graph/comp_node.h"

#include "base/error.h"
#include "base/log.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

namespace braid {

//! One comp node: a locator, a device, and (unless inline) a worker thread with a queue.
class CompNodeImpl {
public:
    CompNodeImpl(std::string locator, Device device, int stream, bool is_inline)
        : m_locator(std::move(locator)), m_device(device), m_stream(stream), m_inline(is_inline) {
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
        {
            std::lock_guard lk(m_mutex);
            m_queue.push_back(std::move(task));
        }
        m_cv.notify_one();
    }

    static void run_task(std::function<void()>& task) {
        try {
            task();
        } catch (const std::exception& e) {
            logger()->error("uncaught exception in comp node task: {}", e.what());
        }
    }

    void worker_loop() {
        for (;;) {
            std::function<void()> task;
            {
                std::unique_lock lk(m_mutex);
                m_cv.wait(lk, [&] { return m_stop || !m_queue.empty(); });
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

private:
    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::deque<std::function<void()>> m_queue;
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
    std::string canon;
    Device dev;
    int stream = 0;
    bool is_inline = false;
    std::smatch m;
    if (locator == "cpu:default") {
        canon = locator;
        is_inline = true;
        stream = -1;
    } else if (std::regex_match(locator, m, pattern)) {
        dev.kind = m[1] == "cpu" ? Device::Kind::CPU : Device::Kind::CUDA;
        dev.index = std::stoi(m[2]);
        if (dev.kind == Device::Kind::CPU) dev.index = 0; // all CPU comp nodes share host memory
        stream = m[3].matched ? std::stoi(m[3]) : 0;
        canon =
            std::string(m[1]) + std::string(m[2]) + (stream ? ":" + std::to_string(stream) : "");
        if (dev.kind == Device::Kind::CUDA)
            BRAID_THROW(ValueError, "comp node \"{}\": this build of braid has no CUDA support",
                        locator);
    } else {
        BRAID_THROW(ValueError,
                    "invalid comp node locator \"{}\"; expected cpu:default, cpuN, cpuN:K, "
                    "cudaN or cudaN:K",
                    locator);
    }
    auto& reg = registry();
    std::lock_guard lk(reg.mutex);
    auto& slot = reg.nodes[canon];
    if (!slot) {
        int cpu_index = is_inline ? -1 : std::stoi(std::string(m[2]));
        slot = std::make_unique<CompNodeImpl>(canon, dev, stream, is_inline);
        // Ordered by kind, then index, then stream; cpu:default sorts first.
        uint64_t kind = dev.kind == Device::Kind::CPU ? 0 : 1;
        slot->m_id = (kind << 48) | (uint64_t(cpu_index + 1) << 16) | uint64_t(stream + 1);
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
    return CpuAllocator::instance();
}

void CompNode::dispatch(std::function<void()> task) const {
    BRAID_ASSERT(m_impl, "dispatch on an invalid comp node");
    m_impl->dispatch(std::move(task));
}

void CompNode::sync() const {
    CompNodeEvent ev;
    ev.record(*this);
    ev.host_wait();
}

void CompNodeEvent::record(CompNode cn) {
    auto fired = std::make_shared<std::atomic<uint32_t>>(0);
    m_fired = fired;
    cn.dispatch([fired] {
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
