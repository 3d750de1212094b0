#include "serve/model_runner.h"

#include "serve/json.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

namespace braid::serve {

namespace {

double seconds(Clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

std::string ms_text(Clock::duration d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f ms", seconds(d) * 1e3);
    return buf;
}

} // namespace

ModelConfig read_model_config(const std::string& path) {
    ModelConfig config;
    std::ifstream in(path, std::ios::binary);
    if (!in) return config;
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    Json doc;
    try {
        doc = parse_json(text);
    } catch (const JsonError& e) {
        throw std::runtime_error(path + ": " + e.what());
    }
    if (!doc.is_object()) throw std::runtime_error(path + ": expected a JSON object");
    auto integer = [&](const std::string& key, const Json& v, int64_t lo, int64_t hi) {
        int64_t out = 0;
        bool ok = v.is_number() && v.number.find_first_of(".eE") == std::string_view::npos;
        if (ok) {
            try {
                out = std::stoll(std::string(v.number));
            } catch (const std::exception&) {
                ok = false;
            }
        }
        if (!ok || out < lo || out > hi)
            throw std::runtime_error(path + ": \"" + key + "\" must be a whole number in [" +
                                     std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                                     (v.is_number() ? std::string(v.number) : v.type_name()));
        return out;
    };
    for (auto& [key, v] : doc.members) {
        if (key == "max_batch_size")
            config.max_batch_size = integer(key, v, 0, 1 << 20);
        else if (key == "max_queue_delay_us")
            config.max_queue_delay_us = integer(key, v, 0, 60'000'000);
        else if (key == "instances")
            config.instances = integer(key, v, 1, 256);
        else if (key == "memory_budget") {
            if (!v.is_string())
                throw std::runtime_error(path + ": \"memory_budget\" must be a string (\"8G\")");
            config.memory_budget = v.string;
        } else if (key == "deterministic") {
            if (!v.is_bool())
                throw std::runtime_error(path + ": \"deterministic\" must be true or false, got " +
                                         v.type_name());
            config.deterministic = v.boolean;
        } else {
            throw std::runtime_error(path + ": unknown key \"" + key +
                                     "\" (known: max_batch_size, max_queue_delay_us, instances, "
                                     "memory_budget, deterministic)");
        }
    }
    return config;
}

//! A request in the batch queue. Its state is guarded by the runner's m_mutex; its outputs and
//! error are written by the thread running its batch before `done` is set.
struct ModelRunner::Pending {
    std::vector<HostTensor> inputs;
    std::string request_id;
    Clock::time_point arrival, deadline;
    int64_t rows = 0;

    std::condition_variable cv; //!< wakes its thread: done, or it may lead a batch
    bool done = false;          //!< outputs or error set
    bool started = false;       //!< taken into a batch
    int error_status = 0;
    std::string error;
    std::vector<HostTensor> outputs; //!< every model output, this request's rows
};
ModelRunner::ModelRunner(std::string name, std::string platform,
                         std::shared_ptr<embed::Model> model, ModelConfig config,
                         ModelMetrics& metrics)
    : m_name(std::move(name)), m_platform(std::move(platform)), m_model(std::move(model)),
      m_config(config), m_metrics(metrics) {
    m_signature.name = m_name;
    m_signature.inputs = m_model->inputs();
    m_signature.outputs = m_model->outputs();
    mark_dynamic_output_dims();
    if (batching()) {
        auto check = [&](const std::vector<embed::TensorInfo>& infos, const char* what) {
            for (auto& t : infos)
                if (t.shape.empty() || t.shape[0] != -1)
                    throw std::runtime_error("model \"" + m_name + "\": max_batch_size " +
                                             std::to_string(m_config.max_batch_size) +
                                             " needs dimension 0 of every " +
                                             "input and output free (-1); " + what + " \"" +
                                             t.name + "\" has shape " + shape_text(t.shape));
        };
        check(m_signature.inputs, "input");
    }
    // The instances' contexts are compiled now, into the model's pool, so that the first
    // requests do not pay for it; every run takes one from the pool (Model::acquire_context).
    {
        std::vector<std::shared_ptr<embed::Context>> warm;
        for (int64_t i = 0; i < m_config.instances; ++i) warm.push_back(m_model->acquire_context());
    }
    m_free = size_t(m_config.instances);
}

void ModelRunner::mark_dynamic_output_dims() {
    // A model records its outputs' shapes for its inputs' default sizes (the example mlp:
    // logits {64,10} for x {-1,784}). Infer them for two sizes of the free input dims: the
    // output dims that follow are free too (-1).
    bool any_free = false;
    for (auto& in : m_signature.inputs)
        for (int64_t d : in.shape) any_free = any_free || d < 0;
    if (!any_free) return;
    try {
        auto ctx = m_model->create_context();
        std::vector<std::vector<int64_t>> shapes[2];
        for (int64_t size : {1, 2}) {
            for (auto& in : m_signature.inputs) {
                std::vector<int64_t> shape = in.shape;
                for (auto& d : shape)
                    if (d < 0) d = size;
                ctx->input_buffer(in.name, shape);
            }
            for (auto& out : m_signature.outputs)
                shapes[size - 1].push_back(ctx->output_shape(out.name));
        }
        for (size_t k = 0; k < m_signature.outputs.size(); ++k) {
            if (shapes[0][k].size() != shapes[1][k].size()) continue;
            auto& shape = m_signature.outputs[k].shape;
            shape = shapes[0][k];
            for (size_t i = 0; i < shape.size(); ++i)
                if (shapes[0][k][i] != shapes[1][k][i]) shape[i] = -1;
        }
    } catch (const embed::Error&) {
        // Shapes that static inference cannot give keep what the model recorded.
        m_signature.outputs = m_model->outputs();
    }
}

ModelRunner::~ModelRunner() = default;

std::string ModelRunner::where(const std::string& request_id) const {
    return "model \"" + m_name + "\"" +
           (request_id.empty() ? "" : ", request \"" + request_id + "\"") + ":";
}

void ModelRunner::rethrow(const embed::Error& e, const std::string& request_id) const {
    std::string where = this->where(request_id) + " ";
    int status = 500;
    switch (e.code()) {
    case embed::Code::INVALID_ARGUMENT:
        status = 400;
        break;
    case embed::Code::DEADLINE_EXCEEDED:
        status = 504;
        break;
    case embed::Code::CANCELLED:
        status = 503;
        break;
    default:
        break;
    }
    throw RequestError(status, where + embed::code_name(e.code()) + ": " + e.what());
}

void ModelRunner::infer(InferRequest& request, Clock::time_point arrival,
                        Clock::time_point deadline, InferResult& result) {
    if (batching())
        infer_batched(request, arrival, deadline, result);
    else
        infer_direct(request, arrival, deadline, result);
}

void ModelRunner::infer_direct(InferRequest& request, Clock::time_point arrival,
                               Clock::time_point deadline, InferResult& result) {
    // Instances go to waiting requests in arrival order: a released context is handed to the
    // oldest waiter (a condition variable alone lets late arrivals overtake, and the p99 grows).
    {
        std::unique_lock lock(m_mutex);
        if (m_free > 0 && m_waiters.empty()) {
            --m_free;
        } else {
            Waiter self;
            m_waiters.push_back(&self);
            if (!self.cv.wait_until(lock, deadline, [&] { return self.granted; })) {
                m_waiters.erase(std::find(m_waiters.begin(), m_waiters.end(), &self));
                throw RequestError(504, where(request.id) + " deadline passed after waiting " +
                                            ms_text(Clock::now() - arrival) + " for one of its " +
                                            std::to_string(m_config.instances) +
                                            " instances; it was not run");
            }
        }
    }
    struct Release {
        ModelRunner* self;
        ~Release() {
            std::lock_guard lock(self->m_mutex);
            if (!self->m_waiters.empty()) {
                Waiter* next = self->m_waiters.front();
                self->m_waiters.pop_front();
                next->granted = true;
                next->cv.notify_one();
            } else {
                ++self->m_free;
            }
        }
    } release{this};
    auto start = Clock::now();
    m_metrics.queue_time.observe(seconds(start - arrival));
    if (start >= deadline)
        throw RequestError(504, where(request.id) + " deadline passed " + ms_text(start - arrival) +
                                    " after arrival, before its run; it was not run");
    try {
        auto context = m_model->acquire_context();
        embed::Context& ctx = *context;
        for (auto& t : request.inputs) ctx.set_input(t.name, t.data(), t.dtype, t.shape);
        embed::RunOptions options;
        options.deadline = deadline;
        options.deterministic = m_config.deterministic;
        ctx.run(options);
        m_metrics.batch_size.observe(request.inputs.empty() || request.inputs[0].shape.empty()
                                         ? 1.0
                                         : double(request.inputs[0].shape[0]));
        std::vector<embed::TensorView> views(m_signature.outputs.size());
        result.json_length =
            encode_infer_response(result.body, m_signature, request, [&](size_t k) {
                auto& v = views[k];
                if (!v.data) v = ctx.output(m_signature.outputs[k].name);
                return OutputData{v.shape, v.data, v.bytes};
            });
    } catch (const embed::Error& e) {
        rethrow(e, request.id);
    }
}

void ModelRunner::infer_batched(InferRequest& request, Clock::time_point arrival,
                                Clock::time_point deadline, InferResult& result) {
    auto pending = std::make_shared<Pending>();
    pending->inputs = std::move(request.inputs);
    pending->request_id = request.id;
    pending->arrival = arrival;
    pending->deadline = deadline;
    pending->rows = pending->inputs.empty() ? 1 : pending->inputs[0].shape[0];
    for (auto& t : pending->inputs)
        if (t.shape[0] != pending->rows)
            throw RequestError(
                400, where(request.id) + " batched inputs need the same dimension 0; input \"" +
                         t.name + "\" has " + std::to_string(t.shape[0]) + ", input \"" +
                         pending->inputs[0].name + "\" has " + std::to_string(pending->rows));
    if (pending->rows > m_config.max_batch_size || pending->rows < 1)
        throw RequestError(400, where(request.id) + " dimension 0 is " +
                                    std::to_string(pending->rows) +
                                    ", the model takes 1 to max_batch_size " +
                                    std::to_string(m_config.max_batch_size) + " rows");
    std::unique_lock lock(m_mutex);
    m_queue.push_back(pending);
    // A request arriving while the oldest one waits for its batch to fill may complete it.
    if (m_queue.size() > 1) m_queue.front()->cv.notify_one();
    while (!pending->done) {
        if (m_free > 0 && m_queue.front() == pending) {
            lead_batch(lock);
            continue;
        }
        if (pending->cv.wait_until(lock, deadline) == std::cv_status::timeout && !pending->done) {
            bool started = pending->started;
            if (!started) withdraw(*pending);
            throw RequestError(504, where(request.id) + " deadline passed after " +
                                        ms_text(Clock::now() - arrival) +
                                        (started ? " while its batch was running"
                                                 : " in the batch queue; it was not run"));
        }
    }
    lock.unlock();
    if (pending->error_status) throw RequestError(pending->error_status, pending->error);
    result.json_length = encode_infer_response(result.body, m_signature, request, [&](size_t k) {
        auto& t = pending->outputs[k];
        return OutputData{t.shape, t.data(), t.bytes};
    });
}

void ModelRunner::withdraw(Pending& pending) {
    auto it =
        std::find_if(m_queue.begin(), m_queue.end(), [&](auto& p) { return p.get() == &pending; });
    if (it == m_queue.end()) return;
    bool was_first = it == m_queue.begin();
    m_queue.erase(it);
    if (was_first && !m_queue.empty()) m_queue.front()->cv.notify_one();
}

void ModelRunner::lead_batch(std::unique_lock<std::mutex>& lock) {
    Pending& first = *m_queue.front();
    auto now = Clock::now();
    // Requests past their deadline do no work (their threads answer 504).
    for (auto it = m_queue.begin(); it != m_queue.end();) {
        if ((*it)->deadline <= now) {
            Pending& p = **it;
            p.error_status = 504;
            p.error = where(p.request_id) + " deadline passed after " + ms_text(now - p.arrival) +
                      " in the batch queue; it was not run";
            p.done = true;
            p.cv.notify_one();
            it = m_queue.erase(it);
        } else {
            ++it;
        }
    }
    if (m_queue.empty() || m_queue.front().get() != &first) {
        if (!m_queue.empty()) m_queue.front()->cv.notify_one();
        return;
    }
    auto same_shape = [&](const Pending& p) {
        for (size_t k = 0; k < first.inputs.size(); ++k)
            if (!std::equal(first.inputs[k].shape.begin() + 1, first.inputs[k].shape.end(),
                            p.inputs[k].shape.begin() + 1, p.inputs[k].shape.end()))
                return false;
        return true;
    };
    // Wait for the window, unless the queue holds a full batch already.
    auto window_end = first.arrival + std::chrono::microseconds(m_config.max_queue_delay_us);
    if (now < window_end) {
        int64_t rows = 0;
        for (auto& p : m_queue)
            if (same_shape(*p)) rows += p->rows;
        if (rows < m_config.max_batch_size) {
            first.cv.wait_until(lock, std::min(window_end, first.deadline));
            return; // the caller looks again
        }
    }
    // The oldest request and the matching ones after it, up to max_batch_size rows.
    std::vector<std::shared_ptr<Pending>> batch;
    int64_t rows = 0;
    for (auto it = m_queue.begin(); it != m_queue.end();) {
        Pending& p = **it;
        if (same_shape(p) && rows + p.rows <= m_config.max_batch_size) {
            rows += p.rows;
            p.started = true;
            batch.push_back(*it);
            it = m_queue.erase(it);
        } else {
            ++it;
        }
    }
    --m_free;
    // Another instance may lead the next batch at once.
    if (m_free > 0 && !m_queue.empty()) m_queue.front()->cv.notify_one();
    lock.unlock();
    run_batch(batch);
    lock.lock();
    ++m_free;
    for (auto& p : batch) {
        p->done = true;
        p->cv.notify_one();
    }
    if (!m_queue.empty()) m_queue.front()->cv.notify_one();
}

void ModelRunner::run_batch(std::vector<std::shared_ptr<Pending>>& batch) {
    auto start = Clock::now();
    int64_t total = 0;
    auto deadline = Clock::time_point::min();
    for (auto& p : batch) {
        total += p->rows;
        deadline = std::max(deadline, p->deadline);
        m_metrics.queue_time.observe(seconds(start - p->arrival));
    }
    m_metrics.batch_size.observe(double(total));
    const Pending& first = *batch.front();
    auto fail = [&](Pending& p, int status, std::string message) {
        p.error_status = status;
        p.error = std::move(message);
    };
    try {
        auto context = m_model->acquire_context();
        embed::Context& ctx = *context;
        for (size_t k = 0; k < first.inputs.size(); ++k) {
            std::vector<int64_t> shape = first.inputs[k].shape;
            shape[0] = total;
            auto* dst = static_cast<char*>(ctx.input_buffer(first.inputs[k].name, shape));
            for (auto& p : batch) {
                std::memcpy(dst, p->inputs[k].data(), p->inputs[k].bytes);
                dst += p->inputs[k].bytes;
            }
        }
        embed::RunOptions options;
        options.deadline = deadline;
        options.deterministic = m_config.deterministic;
        ctx.run(options);
        for (auto& p : batch) p->outputs.resize(m_signature.outputs.size());
        for (size_t k = 0; k < m_signature.outputs.size(); ++k) {
            const auto& info = m_signature.outputs[k];
            embed::TensorView v = ctx.output(info.name);
            if (v.shape.empty() || v.shape[0] != total)
                throw RequestError(500, "model \"" + m_name + "\": output \"" + info.name +
                                            "\" has shape " + shape_text(v.shape) +
                                            " for a batch of " + std::to_string(total) +
                                            " rows; dimension 0 is not a batch dimension, "
                                            "remove max_batch_size from its config.json");
            size_t row_bytes = v.bytes / size_t(total);
            const char* src = static_cast<const char*>(v.data);
            for (auto& p : batch) {
                HostTensor& out = p->outputs[k];
                out.name = info.name;
                out.dtype = v.dtype;
                out.shape = v.shape;
                out.shape[0] = p->rows;
                out.allocate(row_bytes * size_t(p->rows));
                std::memcpy(out.data(), src, out.bytes);
                src += out.bytes;
            }
        }
    } catch (const RequestError& e) {
        for (auto& p : batch) fail(*p, e.status(), e.what());
    } catch (const embed::Error& e) {
        for (auto& p : batch) {
            try {
                rethrow(e, p->request_id);
            } catch (const RequestError& re) {
                fail(*p, re.status(), re.what());
            }
        }
    } catch (const std::exception& e) {
        for (auto& p : batch) fail(*p, 500, "model \"" + m_name + "\": " + e.what());
    }
}

} // namespace braid::serve
