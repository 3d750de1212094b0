#include "comm/group_client.h"

#include "base/error.h"

#include <condition_variable>
#include <mutex>

namespace braid::comm {

std::string timeout_message(std::string_view call, const std::string& key, Duration span,
                            const std::string& what) {
    return fmt::format("{}(key \"{}\") timed out after {}: {}", call, key, format_duration(span),
                       what);
}

namespace {

//! Where a manager callback leaves its outcome for the blocked caller.
template <typename T> struct Waiter {
    std::mutex mutex;
    std::condition_variable cv;
    std::optional<Outcome<T>> outcome;

    void fulfil(Outcome<T> value) {
        {
            std::lock_guard<std::mutex> lock(mutex);
            outcome = std::move(value);
        }
        cv.notify_all();
    }
};

/*!
 * Starts a manager wait through `start` (given the completion callback, returns the
 * WaitId) and blocks until it completes or `deadline` passes; then withdraws it and throws
 * TimeoutError. A wait that completed while being withdrawn still returns its result.
 */
template <typename T, typename Start>
T wait_for(GroupManager& manager, std::string_view call, const std::string& key, Deadline deadline,
           Start&& start) {
    auto waiter = std::make_shared<Waiter<T>>();
    GroupManager::WaitId id =
        start([waiter](Outcome<T> outcome) { waiter->fulfil(std::move(outcome)); });
    std::unique_lock<std::mutex> lock(waiter->mutex);
    if (!waiter->cv.wait_until(lock, deadline.at(), [&] { return waiter->outcome.has_value(); })) {
        lock.unlock();
        if (auto missing = manager.withdraw(id))
            throw TimeoutError(timeout_message(call, key, deadline.span(), *missing));
        // The wait completed as the deadline passed; its callback is running right now.
        lock.lock();
        waiter->cv.wait(lock, [&] { return waiter->outcome.has_value(); });
    }
    if (auto* error = std::get_if<CallError>(&*waiter->outcome)) throw_call_error(*error);
    return std::get<T>(std::move(*waiter->outcome));
}

} // namespace

InProcessGroupClient::InProcessGroupClient(std::shared_ptr<GroupManager> manager)
    : m_manager(manager ? std::move(manager) : std::make_shared<GroupManager>()) {}

RegisterInfo InProcessGroupClient::opr_register(const std::string& key, uint32_t nr_devices,
                                                bool is_root, int32_t rank, uint64_t comp_node_id,
                                                Timeout timeout) {
    return wait_for<RegisterInfo>(*m_manager, "opr_register", key, Deadline::from(timeout),
                                  [&](auto done) {
                                      return m_manager->opr_register(key, nr_devices, is_root, rank,
                                                                     comp_node_id, std::move(done));
                                  });
}

void InProcessGroupClient::set_output_shape(const std::string& key, const TensorShape& shape,
                                            Timeout) {
    m_manager->set_output_shape(key, shape);
}

TensorShape InProcessGroupClient::get_output_shape(const std::string& key, Timeout timeout) {
    return wait_for<TensorShape>(
        *m_manager, "get_output_shape", key, Deadline::from(timeout),
        [&](auto done) { return m_manager->get_output_shape(key, std::move(done)); });
}

std::string InProcessGroupClient::bcast_bytes(const std::string& key, uint32_t size, uint32_t rank,
                                              uint32_t root, std::string_view bytes,
                                              Timeout timeout) {
    return wait_for<std::string>(
        *m_manager, "bcast_bytes", key, Deadline::from(timeout), [&](auto done) {
            return m_manager->bcast_bytes(key, size, rank, root, std::string(bytes),
                                          std::move(done));
        });
}

void InProcessGroupClient::group_barrier(const std::string& key, uint32_t size, uint32_t rank,
                                         Timeout timeout) {
    wait_for<std::monostate>(
        *m_manager, "group_barrier", key, Deadline::from(timeout),
        [&](auto done) { return m_manager->group_barrier(key, size, rank, std::move(done)); });
}

void InProcessGroupClient::set(const std::string& key, std::string_view value, Timeout) {
    m_manager->kv_set(key, std::string(value));
}

std::string InProcessGroupClient::get(const std::string& key, Timeout timeout) {
    return wait_for<std::string>(*m_manager, "get", key, Deadline::from(timeout), [&](auto done) {
        return m_manager->kv_get(key, std::move(done));
    });
}

int64_t InProcessGroupClient::add(const std::string& key, int64_t delta, Timeout) {
    return m_manager->kv_add(key, delta);
}

} // namespace braid::comm
