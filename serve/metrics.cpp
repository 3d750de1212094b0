#include "serve/metrics.h"

#include "serve/json.h"

#include <cstdio>

namespace braid::serve {

namespace {

std::vector<double> latency_bounds() {
    return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
            50e-3, 100e-3, 250e-3, 500e-3, 1.0,  2.5,    5.0,  10.0};
}

void append_number(std::string& out, double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    out += buf;
}

std::string label_value(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

} // namespace

Histogram::Histogram(std::vector<double> bounds)
    : m_bounds(std::move(bounds)), m_counts(new std::atomic<uint64_t>[m_bounds.size() + 1]) {
    for (size_t i = 0; i <= m_bounds.size(); ++i) m_counts[i].store(0);
}

void Histogram::observe(double value) {
    size_t i = 0;
    while (i < m_bounds.size() && value > m_bounds[i]) ++i;
    m_counts[i].fetch_add(1, std::memory_order_relaxed);
    m_sum.fetch_add(value, std::memory_order_relaxed);
    m_count.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= m_bounds.size(); ++i) {
        cumulative += m_counts[i].load(std::memory_order_relaxed);
        out += name + "_bucket{" + labels + ",le=\"";
        if (i < m_bounds.size())
            append_number(out, m_bounds[i]);
        else
            out += "+Inf";
        out += "\"} " + std::to_string(cumulative) + "\n";
    }
    out += name + "_sum{" + labels + "} ";
    append_number(out, m_sum.load(std::memory_order_relaxed));
    out += "\n" + name + "_count{" + labels + "} " +
           std::to_string(m_count.load(std::memory_order_relaxed)) + "\n";
}

ModelMetrics::ModelMetrics()
    : latency(latency_bounds()), queue_time(latency_bounds()),
      batch_size({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

void ModelMetrics::count_status(int status) {
    if (status < 0 || status >= int(by_status.size())) status = 0;
    by_status[size_t(status)].fetch_add(1, std::memory_order_relaxed);
    if (status != 200) failures.fetch_add(1, std::memory_order_relaxed);
}

ModelMetrics& Metrics::model(const std::string& name) {
    std::lock_guard lock(m_mutex);
    auto& m = m_models[name];
    if (!m) m = std::make_unique<ModelMetrics>();
    return *m;
}

void Metrics::set_connection_gauges(std::function<int64_t()> open,
                                    std::function<int64_t()> waiting) {
    std::lock_guard lock(m_mutex);
    m_open_connections = std::move(open);
    m_waiting_connections = std::move(waiting);
}

std::string Metrics::render() const {
    std::lock_guard lock(m_mutex);
    std::string out;
    out += "# HELP braid_serve_requests_total Inference requests by model and HTTP status.\n"
           "# TYPE braid_serve_requests_total counter\n";
    for (auto& [name, m] : m_models)
        for (size_t s = 0; s < m->by_status.size(); ++s)
            if (uint64_t n = m->by_status[s].load(std::memory_order_relaxed))
                out += "braid_serve_requests_total{model=\"" + label_value(name) + "\",status=\"" +
                       std::to_string(s) + "\"} " + std::to_string(n) + "\n";
    out += "# HELP braid_serve_request_failures_total Inference requests answered with an "
           "error.\n# TYPE braid_serve_request_failures_total counter\n";
    for (auto& [name, m] : m_models)
        out += "braid_serve_request_failures_total{model=\"" + label_value(name) + "\"} " +
               std::to_string(m->failures.load(std::memory_order_relaxed)) + "\n";
    out += "# HELP braid_serve_model_in_flight Inference requests of a model in flight.\n"
           "# TYPE braid_serve_model_in_flight gauge\n";
    for (auto& [name, m] : m_models)
        out += "braid_serve_model_in_flight{model=\"" + label_value(name) + "\"} " +
               std::to_string(m->in_flight.load(std::memory_order_relaxed)) + "\n";
    struct Hist {
        const char* name;
        const char* help;
        Histogram ModelMetrics::*member;
    };
    const Hist hists[] = {
        {"braid_serve_request_duration_seconds", "Time from a request's arrival to its response.",
         &ModelMetrics::latency},
        {"braid_serve_queue_duration_seconds",
         "Time a request waited for a model instance or a batch.", &ModelMetrics::queue_time},
        {"braid_serve_batch_size", "Rows per model run.", &ModelMetrics::batch_size},
    };
    for (auto& h : hists) {
        out +=
            std::string("# HELP ") + h.name + " " + h.help + "\n# TYPE " + h.name + " histogram\n";
        for (auto& [name, m] : m_models)
            ((*m).*h.member).render(out, h.name, "model=\"" + label_value(name) + "\"");
    }
    out += "# HELP braid_serve_in_flight Inference requests in flight, all models.\n"
           "# TYPE braid_serve_in_flight gauge\nbraid_serve_in_flight " +
           std::to_string(in_flight.load(std::memory_order_relaxed)) + "\n";
    out += "# HELP braid_serve_rejected_overload_total Requests refused by the concurrency "
           "limit (503).\n# TYPE braid_serve_rejected_overload_total counter\n"
           "braid_serve_rejected_overload_total " +
           std::to_string(rejected_overload.load(std::memory_order_relaxed)) + "\n";
    if (m_open_connections)
        out += "# HELP braid_serve_connections Open client connections being served.\n"
               "# TYPE braid_serve_connections gauge\nbraid_serve_connections " +
               std::to_string(m_open_connections()) + "\n";
    if (m_waiting_connections)
        out += "# HELP braid_serve_connections_waiting Accepted connections waiting for a "
               "slot (over --max-connections).\n# TYPE braid_serve_connections_waiting gauge\n"
               "braid_serve_connections_waiting " +
               std::to_string(m_waiting_connections()) + "\n";
    return out;
}

} // namespace braid::serve
