// braid-serve's Prometheus metrics: per model, requests by HTTP status, failures, latency and
// queue-time histograms, batch sizes and requests in flight; per server, open connections.
// Every update is a relaxed atomic operation; render() may run while they happen. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace braid::serve {

//! A Prometheus histogram with fixed upper bounds. Thread-safe.
class Histogram {
public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double value);
    //! Appends the _bucket, _sum and _count lines of `name` with `labels` ("model=\"mlp\"").
    void render(std::string& out, const std::string& name, const std::string& labels) const;

private:
    std::vector<double> m_bounds;
    std::unique_ptr<std::atomic<uint64_t>[]> m_counts; //!< one per bound, then +Inf
    std::atomic<double> m_sum{0};
    std::atomic<uint64_t> m_count{0};
};

//! One model's metrics. Thread-safe.
struct ModelMetrics {
    ModelMetrics();
    void count_status(int status);

    std::array<std::atomic<uint64_t>, 600> by_status{}; //!< requests by HTTP status
    std::atomic<uint64_t> failures{0};                  //!< requests answered with a non-200
    std::atomic<int64_t> in_flight{0};
    Histogram latency;    //!< seconds from the request's arrival to its response
    Histogram queue_time; //!< seconds waiting for an instance or a batch
    Histogram batch_size; //!< rows per run
};

//! Every model's metrics and the server's gauges. Thread-safe.
class Metrics {
public:
    //! The metrics of `model`, created on first use; the reference stays valid.
    ModelMetrics& model(const std::string& name);
    //! Open connections, read when rendering.
    void set_connection_gauges(std::function<int64_t()> open, std::function<int64_t()> waiting);
    //! The text exposition format (version 0.0.4).
    std::string render() const;

    std::atomic<int64_t> in_flight{0};          //!< inference requests in flight, all models
    std::atomic<uint64_t> rejected_overload{0}; //!< requests refused by the concurrency limit

private:
    mutable std::mutex m_mutex;
    std::map<std::string, std::unique_ptr<ModelMetrics>> m_models;
    std::function<int64_t()> m_open_connections, m_waiting_connections;
};

} // namespace braid::serve
