// One served model: its configuration (config.json), its instances (contexts) and, when the
// configuration asks for it, dynamic batching: requests queue, are merged along dimension 0 up
// to max_batch_size rows or until max_queue_delay has passed since the oldest one arrived, run
// as one, and the outputs split back per request. A request that reaches its deadline before
// its run starts gets an error and does no work.
//
// Thread-safe: infer() is called from any number of HTTP threads, and runs each request (or
// batch) on one of them. No infer() may be in progress at destruction.
#pragma once

#include "serve/metrics.h"
#include "serve/protocol.h"

#include <braid/embed.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace braid::serve {

using Clock = std::chrono::steady_clock;

//! DIR/NAME/config.json.
struct ModelConfig {
    int64_t max_batch_size = 0;     //!< rows per merged run; 0 or 1: no dynamic batching
    int64_t max_queue_delay_us = 0; //!< how long the oldest queued request waits for others
    int64_t instances = 1;          //!< contexts running at the same time
    std::string memory_budget;      //!< ModelOptions::memory_budget ("": the default)
    //! RunOptions::deterministic for every run: a request's results do not depend on the
    //! requests batched with it (docs/determinism.md).
    bool deterministic = false;
};

//! Reads a config.json (absent: defaults). Throws std::runtime_error naming the file and key.
ModelConfig read_model_config(const std::string& path);

//! What infer() produced: the response body and its JSON part's length (-1: all JSON).
struct InferResult {
    std::string body;
    int64_t json_length = -1;
};

//! A loaded model serving requests. Thread-safe (see the file comment).
class ModelRunner {
public:
    //! Throws std::runtime_error when the configuration does not fit the model (batching a
    //! model whose inputs and outputs do not all have a free dimension 0).
    ModelRunner(std::string name, std::string platform, std::shared_ptr<embed::Model> model,
                ModelConfig config, ModelMetrics& metrics);
    ~ModelRunner();
    ModelRunner(const ModelRunner&) = delete;
    ModelRunner& operator=(const ModelRunner&) = delete;

    const ModelSignature& signature() const { return m_signature; }
    const std::string& platform() const { return m_platform; }
    const ModelConfig& config() const { return m_config; }
    bool batching() const { return m_config.max_batch_size > 1; }

    /*!
     * Runs `request` (inputs already checked against the signature) and encodes the response.
     * `arrival` is when the request arrived, `deadline` when it must be answered. Throws
     * RequestError: 504 when the deadline passes (before the run: no work was done), 400 for a
     * request the model rejects, 503 when the server stops, 500 for a failed run.
     */
    void infer(InferRequest& request, Clock::time_point arrival, Clock::time_point deadline,
               InferResult& result);

private:
    struct Pending;
    void mark_dynamic_output_dims();
    void infer_direct(InferRequest& request, Clock::time_point arrival, Clock::time_point deadline,
                      InferResult& result);
    void infer_batched(InferRequest& request, Clock::time_point arrival, Clock::time_point deadline,
                       InferResult& result);
    //! Called by the thread of the oldest queued request while an instance is free (`lock`
    //! holds m_mutex): waits for the batching window, or takes a batch and runs it on this
    //! thread. The caller checks its request's state again afterwards.
    void lead_batch(std::unique_lock<std::mutex>& lock);
    //! Removes a request that gave up from the queue (m_mutex held).
    void withdraw(Pending& pending);
    //! Runs one batch on an instance and sets each request's outputs or error.
    void run_batch(std::vector<std::shared_ptr<Pending>>& batch);
    //! "model \"mlp\", request \"7\":" (no request part when the id is empty).
    std::string where(const std::string& request_id) const;
    [[noreturn]] void rethrow(const embed::Error& e, const std::string& request_id) const;

    std::string m_name, m_platform;
    std::shared_ptr<embed::Model> m_model;
    ModelConfig m_config;
    ModelMetrics& m_metrics;
    ModelSignature m_signature;

    // Direct runs: at most `instances` at a time, each with a context from the model's pool
    // (Model::acquire_context); m_free counts the instances not running.
    std::mutex m_mutex;
    size_t m_free = 0;
    struct Waiter {
        std::condition_variable cv;
        bool granted = false; //!< an instance was handed to this waiter
    };
    std::deque<Waiter*> m_waiters; //!< requests waiting for an instance, oldest first

    // Dynamic batching: the queue, oldest first. There is no batch thread: the oldest queued
    // request's own thread runs the next batch when an instance is free (so a request alone
    // runs at once on its thread, as without batching), and the others wait on their own
    // condition variables (m_free counts the instances, as for direct runs).
    std::deque<std::shared_ptr<Pending>> m_queue;
};

} // namespace braid::serve
