// A small service on braid's C++ embedding API: one model, four worker threads serving requests
// on random float32 inputs with contexts from the model's pool, each request run asynchronously
// under a deadline. One request is cancelled by another thread; one misses its deadline.
//
//     embed_cpp MODEL [REQUESTS_PER_THREAD]
//
// Exits 0 when every request ended as expected.
#include <braid/embed.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace embed = braid::embed;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int NR_THREADS = 4;

//! What one worker saw.
struct Tally {
    int ok = 0, failed = 0;
    embed::Code first = embed::Code::OK; //!< how the worker's first request ended
    double checksum = 0;                 //!< sum of output 0 over the worker's requests
};

const char* dtype_name(embed::DType dtype) {
    static const char* const names[] = {"float32", "float16", "bfloat16", "int32",  "int64",
                                        "int8",    "uint8",   "bool",     "float64"};
    auto i = static_cast<size_t>(dtype);
    return i < std::size(names) ? names[i] : "?"; // a dtype newer than this program
}

void print_tensors(const char* kind, const std::vector<embed::TensorInfo>& tensors) {
    for (const auto& t : tensors) {
        std::printf("  %s %s: %s {", kind, t.name.c_str(), dtype_name(t.dtype));
        for (size_t d = 0; d < t.shape.size(); ++d)
            std::printf("%s%lld", d ? "," : "", static_cast<long long>(t.shape[d]));
        std::printf("}\n");
    }
}

//! One request: a pooled context, random data for input 0 (dims of -1 become `batch`), a run on
//! another thread that this one waits for, and output 0 added to the checksum. Throws
//! embed::Error when the request fails.
void serve(embed::Model& model, std::mt19937& rng, int64_t batch, const embed::RunOptions& options,
           Tally& tally) {
    std::shared_ptr<embed::Context> ctx = model.acquire_context(); // back to the pool at scope end
    const embed::TensorInfo& in = model.inputs().at(0);
    std::vector<int64_t> shape = in.shape;
    size_t count = 1;
    for (auto& d : shape) {
        if (d < 0) d = batch;
        count *= static_cast<size_t>(d);
    }
    std::vector<float> x(count);
    std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
    for (auto& v : x) v = uniform(rng);

    ctx->set_input(in.name, x.data(), embed::DType::FLOAT32, shape); // zero copy: keep x alive
    std::future<void> done = ctx->run_async(options);
    done.get(); // rethrows the run's embed::Error

    embed::TensorView y = ctx->output(model.outputs().at(0).name); // valid until the next run
    if (y.dtype != embed::DType::FLOAT32) return;
    for (size_t i = 0; i < y.bytes / sizeof(float); ++i)
        tally.checksum += static_cast<const float*>(y.data)[i];
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL [REQUESTS_PER_THREAD]\n", argv[0]);
        return 2;
    }
    const int nr_requests = std::max(1, argc > 2 ? std::atoi(argv[2]) : 8);
    std::printf("braid %s\n", embed::version());

    std::shared_ptr<embed::Model> model;
    try {
        model = embed::Model::load(argv[1]);
    } catch (const embed::Error& e) {
        std::fprintf(stderr, "load: %s: %s\n", embed::code_name(e.code()), e.what());
        return 1;
    }
    print_tensors("input", model->inputs());
    print_tensors("output", model->outputs());
    std::printf("  weights: %zu bytes, shared by every context\n", model->weight_bytes());

    // Worker 0's first request belongs to a client that went away: another thread cancels it
    // (here before the run starts, so it ends at its first operator; a cancel during a run stops
    // it at the next operator or kernel chunk). Worker 1's first request gets a deadline that
    // has already passed.
    embed::CancelToken client_gone;
    std::thread([&] { client_gone.cancel(); }).join();
    auto expected_first = [](int id) {
        return id == 0   ? embed::Code::CANCELLED
               : id == 1 ? embed::Code::DEADLINE_EXCEEDED
                         : embed::Code::OK;
    };

    std::vector<Tally> tallies(NR_THREADS);
    std::vector<std::thread> workers;
    for (int id = 0; id < NR_THREADS; ++id) {
        workers.emplace_back([&, id] {
            std::mt19937 rng(1234 + id);
            for (int r = 0; r < nr_requests; ++r) {
                embed::RunOptions options;
                options.deadline = Clock::now() + std::chrono::seconds(10);
                if (r == 0 && id == 0) options.cancel = &client_gone;
                if (r == 0 && id == 1) options.deadline = Clock::now() - std::chrono::seconds(1);
                embed::Code code = embed::Code::OK;
                try {
                    serve(*model, rng, 1 + id, options, tallies[id]);
                } catch (const embed::Error& e) {
                    code = e.code();
                    if (r != 0 || code != expected_first(id))
                        std::fprintf(stderr, "thread %d: %s: %s\n", id, embed::code_name(code),
                                     e.what());
                }
                if (r == 0) tallies[id].first = code;
                if (code == embed::Code::OK)
                    ++tallies[id].ok;
                else if (r != 0 || code != expected_first(id))
                    ++tallies[id].failed;
            }
        });
    }
    int failed = 0;
    for (int id = 0; id < NR_THREADS; ++id) {
        workers[id].join();
        const Tally& t = tallies[id];
        std::printf("thread %d: %d ok, %d failed, first request %s, checksum %.4f\n", id, t.ok,
                    t.failed, embed::code_name(t.first), t.checksum);
        failed += t.failed + (t.first != expected_first(id));
    }
    model->trim(); // frees the pool's idle contexts
    return failed ? 1 : 0;
}
