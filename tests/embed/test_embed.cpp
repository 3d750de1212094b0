// The embedding C++ API (embed/include/braid/embed.h): loading, binding, concurrent runs on one
// model, errors, cancellation, deadlines and lifetimes.
#include "braid.h"
#include "braid/braid_c.h"
#include "braid/embed.h"
#include "helpers.h"
#include "onnx_import/onnx_import.h"
#include "tests/support/random_floats.h"
#include "tools/example_models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

using namespace braid;
using braid::testing::random_floats;
namespace em = braid::embed;
using ::testing::HasSubstr;

namespace {

std::vector<uint8_t> model_bytes(const std::function<SymbolVarArray(ComputingGraph&)>& build,
                                 const DumpOptions& opt = {}) {
    auto g = ComputingGraph::make();
    std::vector<uint8_t> bytes;
    dump(build(*g), bytes, opt);
    return bytes;
}

std::vector<uint8_t> mlp_bytes() {
    DumpOptions opt;
    opt.input_shapes["x"] = {-1, 32};
    return model_bytes([](ComputingGraph& g) { return examples::build_mlp(g, 4, 32, 16, 3); }, opt);
}

//! A model whose run takes a while: 40 matmuls of 256 x 256, each scaled back.
std::vector<uint8_t> slow_bytes() {
    return model_bytes([](ComputingGraph& g) {
        auto x = opr::Input::make(g, "x", dtype::Float32(), {256, 256});
        auto w = opr::SharedParam::make(
            g, std::make_shared<Tensor>(test::random_input({256, 256}, 9)), "w");
        SymbolVar y = x;
        for (int i = 0; i < 40; ++i) y = opr::matmul(y, w) * 0.05;
        return SymbolVarArray{y.rename("y")};
    });
}

em::Code code_of(const std::function<void()>& fn, std::string* message = nullptr) {
    try {
        fn();
    } catch (const em::Error& e) {
        if (message) *message = e.what();
        return e.code();
    }
    return em::Code::OK;
}

std::vector<float> run_mlp(em::Context& ctx, const std::vector<float>& x, int64_t batch) {
    ctx.set_input("x", x.data(), em::DType::FLOAT32, {batch, 32});
    ctx.run();
    auto out = ctx.output("logits");
    EXPECT_EQ(out.shape, (std::vector<int64_t>{batch, 3}));
    auto* p = static_cast<const float*>(out.data);
    return std::vector<float>(p, p + out.bytes / sizeof(float));
}

} // namespace

TEST(Embed, RunsTheModelLikeTheGraphApi) {
    auto bytes = mlp_bytes();
    auto x = random_floats(4 * 32, 1);
    // The reference: the same file through load() and an Executable.
    auto loaded = load(bytes);
    Tensor xt(TensorShape{4, 32}, dtype::Float32());
    std::memcpy(xt.raw_ptr(), x.data(), x.size() * 4);
    auto exec = loaded.compile();
    exec->feed("x", xt).run();
    auto* ref = exec->output(0).ptr<float>();

    for (bool copy : {true, false}) {
        auto model = em::Model::load_buffer(bytes.data(), bytes.size(), copy);
        ASSERT_EQ(model->inputs().size(), 1u);
        EXPECT_EQ(model->inputs()[0].name, "x");
        EXPECT_EQ(model->inputs()[0].shape, (std::vector<int64_t>{-1, 32}));
        EXPECT_EQ(model->outputs()[0].name, "logits");
        auto ctx = model->create_context();
        auto y = run_mlp(*ctx, x, 4);
        ASSERT_EQ(y.size(), 12u);
        EXPECT_EQ(std::memcmp(y.data(), ref, 12 * 4), 0) << "copy=" << copy;
    }
}

TEST(Embed, ContextsShareTheWeightsAndHaveTheirOwnArena) {
    auto bytes = mlp_bytes();
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true);
    size_t weights = model->weight_bytes();
    EXPECT_EQ(weights, (32 * 16 + 16 + 16 * 3 + 3) * 4u);
    auto a = model->create_context();
    auto b = model->create_context();
    EXPECT_EQ(model->weight_bytes(), weights); // no copy per context
    auto x = random_floats(4 * 32, 2);
    EXPECT_EQ(run_mlp(*a, x, 4), run_mlp(*b, x, 4));
    EXPECT_GT(a->arena_bytes(), 0u);
    a->trim();
    EXPECT_EQ(a->arena_bytes(), 0u);
    EXPECT_EQ(run_mlp(*a, x, 4), run_mlp(*b, x, 4)); // rebuilt after trim
}

TEST(Embed, VariableBatchAndOutputShapesBeforeRunning) {
    auto bytes = mlp_bytes();
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true);
    auto ctx = model->create_context();
    auto x = random_floats(7 * 32, 3);
    ctx->set_input("x", x.data(), em::DType::FLOAT32, {7, 32});
    EXPECT_EQ(ctx->output_shape("logits"), (std::vector<int64_t>{7, 3}));
    auto y7 = run_mlp(*ctx, x, 7);
    // Row 0 of a batch of 7 equals the same row run alone, to rounding: the GEMM libraries pick
    // their kernel and blocking by M and by CPU, so the bits may differ outside deterministic mode.
    auto y1 = run_mlp(*ctx, std::vector<float>(x.begin(), x.begin() + 32), 1);
    ASSERT_EQ(y1.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
        EXPECT_NEAR(y1[i], y7[i], 1e-5f * std::max(1.f, std::fabs(y7[i]))) << "logit " << i;
}

TEST(Embed, OutputsCanBeCopiedIntoCallerMemory) {
    auto bytes = mlp_bytes();
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true);
    auto ctx = model->create_context();
    auto x = random_floats(4 * 32, 4);
    std::vector<float> out(12, -1.f);
    ctx->bind_output("logits", out.data(), out.size() * 4);
    auto y = run_mlp(*ctx, x, 4);
    EXPECT_EQ(out, y);
    std::vector<float> small(2);
    ctx->bind_output("logits", small.data(), small.size() * 4);
    std::string msg;
    EXPECT_EQ(code_of([&] { ctx->run(); }, &msg), em::Code::INVALID_ARGUMENT);
    EXPECT_THAT(msg, HasSubstr("output \"logits\": the bound buffer has 8 bytes"));
    EXPECT_THAT(msg, HasSubstr("(48 bytes)"));
}

TEST(Embed, ConcurrentRunsOnOneModelMatchSerialRuns) {
    auto bytes = mlp_bytes();
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true);
    constexpr int kThreads = 4, kRuns = 50;
    std::vector<std::vector<float>> inputs, expected;
    {
        auto ctx = model->create_context();
        for (int t = 0; t < kThreads; ++t) {
            inputs.push_back(random_floats(size_t(t + 1) * 32, 10 + t));
            expected.push_back(run_mlp(*ctx, inputs[t], t + 1));
        }
    }
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            auto ctx = model->acquire_context();
            for (int r = 0; r < kRuns; ++r)
                if (run_mlp(*ctx, inputs[t], t + 1) != expected[t]) ++mismatches;
        });
    for (auto& th : threads) th.join();
    EXPECT_EQ(mismatches.load(), 0);
}

TEST(Embed, BadInputsNameWhatIsWrong) {
    auto bytes = mlp_bytes();
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true);
    auto ctx = model->create_context();
    std::vector<float> x(4 * 32);
    std::vector<int32_t> xi(4 * 32);
    std::string msg;
    EXPECT_EQ(code_of(
                  [&] {
                      ctx->set_input("z", x.data(), em::DType::FLOAT32, {4, 32});
                  },
                  &msg),
              em::Code::INVALID_ARGUMENT);
    EXPECT_THAT(msg, HasSubstr("no input named \"z\" (inputs: x)"));
    EXPECT_EQ(code_of(
                  [&] {
                      ctx->set_input("x", xi.data(), em::DType::INT32, {4, 32});
                  },
                  &msg),
              em::Code::INVALID_ARGUMENT);
    EXPECT_THAT(msg, HasSubstr("input \"x\": dtype int32 given; the model expects float32"));
    EXPECT_EQ(code_of(
                  [&] {
                      ctx->set_input("x", x.data(), em::DType::FLOAT32, {4, 31});
                  },
                  &msg),
              em::Code::INVALID_ARGUMENT);
    EXPECT_THAT(msg, HasSubstr("shape {4,31} given; the model expects {-1,32}"));
    EXPECT_EQ(code_of(
                  [&] {
                      ctx->set_input("x", nullptr, em::DType::FLOAT32, {4, 32});
                  },
                  &msg),
              em::Code::INVALID_ARGUMENT);
    EXPECT_THAT(msg, HasSubstr("input \"x\": data is null"));
    EXPECT_EQ(code_of([&] { ctx->run(); }, &msg), em::Code::FAILED_PRECONDITION);
    EXPECT_THAT(msg, HasSubstr("input \"x\" is not bound"));
    EXPECT_EQ(code_of([&] { ctx->output("logits"); }, &msg), em::Code::FAILED_PRECONDITION);
    EXPECT_EQ(code_of([&] { ctx->output("nope"); }, &msg), em::Code::INVALID_ARGUMENT);
    EXPECT_THAT(msg, HasSubstr("no output named \"nope\" (outputs: logits)"));
    // The context and the model still work.
    EXPECT_EQ(run_mlp(*ctx, random_floats(4 * 32, 5), 4).size(), 12u);

    EXPECT_EQ(code_of([&] { em::Model::load("/nonexistent/m.braid"); }, &msg), em::Code::NOT_FOUND);
    EXPECT_THAT(msg, HasSubstr("/nonexistent/m.braid"));
    auto bad = bytes;
    bad[bad.size() / 2] ^= 0xff;
    EXPECT_EQ(code_of([&] { em::Model::load_buffer(bad.data(), bad.size(), true); }, &msg),
              em::Code::INVALID_MODEL);
    EXPECT_THAT(msg, HasSubstr("<buffer>"));
}

TEST(Embed, CancelAndDeadlineStopARunWithTheirOwnCodes) {
    auto bytes = slow_bytes();
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true);
    auto ctx = model->create_context();
    auto x = random_floats(256 * 256, 6);
    ctx->set_input("x", x.data(), em::DType::FLOAT32, {256, 256});
    ctx->run(); // the first run also generates the GEMM library's kernels: time a later one
    auto t0 = std::chrono::steady_clock::now();
    ctx->run();
    auto full = std::chrono::steady_clock::now() - t0;

    em::CancelToken token;
    em::RunOptions opt;
    opt.cancel = &token;
    token.cancel();
    std::string msg;
    EXPECT_EQ(code_of([&] { ctx->run(opt); }, &msg), em::Code::CANCELLED);
    EXPECT_THAT(msg, HasSubstr("cancelled"));
    EXPECT_THAT(msg, HasSubstr("on cpu:default")); // names the operator it stopped at
    token.reset();

    // A quarter of a run, but at most 2 ms: `full` may have been measured while other tests
    // loaded the machine, and a deadline or cancel later than the run's end tests nothing.
    auto part =
        std::min<std::chrono::steady_clock::duration>(full / 4, std::chrono::milliseconds(2));
    em::RunOptions late;
    late.deadline = std::chrono::steady_clock::now() + part;
    EXPECT_EQ(code_of([&] { ctx->run(late); }, &msg), em::Code::DEADLINE_EXCEEDED);
    EXPECT_THAT(msg, HasSubstr("deadline"));

    // Cancelled from another thread while running. A run may still end before the cancel
    // when the machine was loaded while `full` was measured: then it completed normally, and
    // the cancel is tried again, sent earlier each time.
    bool cancelled = false;
    for (int attempt = 0; attempt < 5 && !cancelled; ++attempt) {
        auto fut = ctx->run_async(opt);
        std::this_thread::sleep_for(part / (1 << attempt));
        token.cancel();
        em::Code code = code_of([&] { fut.get(); });
        EXPECT_TRUE(code == em::Code::CANCELLED || code == em::Code::OK) << int(code);
        cancelled = code == em::Code::CANCELLED;
        token.reset();
    }
    EXPECT_TRUE(cancelled) << "5 runs all ended before their cancel";
    ctx->run(opt); // the context still works
    EXPECT_EQ(ctx->output("y").shape, (std::vector<int64_t>{256, 256}));
}

TEST(Embed, DestroyingAContextOrModelDuringARunIsSafe) {
    auto bytes = slow_bytes();
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true);
    auto x = random_floats(256 * 256, 7);
    std::future<void> fut;
    {
        auto ctx = model->create_context();
        ctx->set_input("x", x.data(), em::DType::FLOAT32, {256, 256});
        fut = ctx->run_async();
        model.reset(); // the context keeps the model alive
    }                  // the context's destructor waits for its run
    // The run has ended when the destructor returns; std::async makes its future ready just
    // after the run's function returns, so that may lag by a moment.
    EXPECT_EQ(fut.wait_for(std::chrono::milliseconds(200)), std::future_status::ready)
        << "the context was destroyed before its asynchronous run ended";
    fut.get();

    std::promise<em::Code> done;
    {
        auto m2 = em::Model::load_buffer(bytes.data(), bytes.size(), true);
        auto ctx = m2->acquire_context();
        ctx->set_input("x", x.data(), em::DType::FLOAT32, {256, 256});
        ctx->run_async({}, [&](em::Code code, const std::string&) { done.set_value(code); });
    }
    EXPECT_EQ(done.get_future().get(), em::Code::OK);
}

TEST(Embed, PooledContextsAreReused) {
    auto bytes = mlp_bytes();
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true);
    em::Context* first;
    {
        auto ctx = model->acquire_context();
        first = ctx.get();
    }
    {
        auto ctx = model->acquire_context();
        EXPECT_EQ(ctx.get(), first);
    }
    model->trim();
    std::weak_ptr<em::Model> weak = model;
    {
        auto ctx = model->acquire_context();
        model.reset();
        EXPECT_FALSE(weak.expired()); // the context keeps its model
    }
    EXPECT_TRUE(weak.expired()); // a pooled context does not
}

TEST(Embed, LoadsOnnxModels) {
    const std::string path =
        "/usr/share/libonnx-testdata/data/pytorch-converted/test_Conv2d/model.onnx";
    auto model = em::Model::load(path);
    ASSERT_EQ(model->inputs().size(), 1u);
    EXPECT_EQ(model->inputs()[0].shape, (std::vector<int64_t>{2, 3, 7, 5}));
    EXPECT_GT(model->weight_bytes(), 0u);
    auto ctx = model->create_context();
    auto x = random_floats(2 * 3 * 7 * 5, 8);
    ctx->set_input(model->inputs()[0].name, x.data(), em::DType::FLOAT32, {2, 3, 7, 5});
    ctx->run();
    EXPECT_EQ(ctx->output(model->outputs()[0].name).shape, (std::vector<int64_t>{2, 4, 5, 4}));
    // The same file through the importer and an Executable gives the same values.
    auto loaded = onnx_import::import_file(path);
    Tensor xt(TensorShape{2, 3, 7, 5}, dtype::Float32());
    std::memcpy(xt.raw_ptr(), x.data(), x.size() * 4);
    auto exec = loaded.compile();
    exec->feed(loaded.inputs[0].var, xt).run();
    auto out = ctx->output(model->outputs()[0].name);
    EXPECT_EQ(std::memcmp(out.data, exec->output(0).raw_ptr(), out.bytes), 0);
}

TEST(Embed, BindsTheShapeInputsOfOnnxModels) {
    // Reshape's target is a graph input ("shape"): without a value at load it is an input
    // read at each run (docs/onnx.md); with one it becomes a constant.
    const std::string path =
        "/usr/share/libonnx-testdata/data/node/test_reshape_reordered_all_dims/model.onnx";
    {
        auto model = em::Model::load(path);
        ASSERT_EQ(model->inputs().size(), 2u);
        EXPECT_EQ(model->inputs()[1].name, "shape");
        auto ctx = model->create_context();
        auto x = random_floats(24, 9);
        const int64_t target[] = {4, 2, 3};
        ctx->set_input("data", x.data(), em::DType::FLOAT32, {2, 3, 4});
        ctx->set_input("shape", target, em::DType::INT64, {3});
        ctx->run();
        auto y = ctx->output(model->outputs()[0].name);
        EXPECT_EQ(y.shape, (std::vector<int64_t>{4, 2, 3}));
        EXPECT_EQ(std::memcmp(y.data, x.data(), 24 * sizeof(float)), 0);
    }
    auto model = em::Model::load(path, {}, {{"shape", {4, 2, 3}}});
    ASSERT_EQ(model->inputs().size(), 1u);
    EXPECT_EQ(model->inputs()[0].name, "data");
    auto ctx = model->create_context();
    auto x = random_floats(24, 9);
    ctx->set_input("data", x.data(), em::DType::FLOAT32, {2, 3, 4});
    ctx->run();
    auto y = ctx->output(model->outputs()[0].name);
    EXPECT_EQ(y.shape, (std::vector<int64_t>{4, 2, 3}));
    EXPECT_EQ(std::memcmp(y.data, x.data(), 24 * sizeof(float)), 0);

    // The C API, and its errors: a wrong value count, a braid file.
    const char* names[] = {"shape"};
    const double values[] = {4, 2, 3}, bad[] = {4, 6};
    const double* vals[] = {values};
    const double* bad_vals[] = {bad};
    size_t counts[] = {3}, bad_counts[] = {2};
    braid_model* m = nullptr;
    ASSERT_EQ(braid_model_load_file_bound(path.c_str(), 1, names, vals, counts, &m), nullptr);
    size_t n = 0;
    braid_model_num_inputs(m, &n);
    EXPECT_EQ(n, 1u);
    braid_model_release(m);
    braid_status* st =
        braid_model_load_file_bound(path.c_str(), 1, names, bad_vals, bad_counts, &m);
    ASSERT_NE(st, nullptr);
    EXPECT_NE(std::string(braid_status_message(st)).find("holds 3"), std::string::npos)
        << braid_status_message(st);
    braid_status_free(st);
    st = braid_model_load_file_bound(path.c_str(), 1, nullptr, vals, counts, &m);
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(braid_status_code(st), BRAID_INVALID_ARGUMENT);
    braid_status_free(st);
}

// A run whose shapes the model cannot run with (too large for the kernels, or for the memory
// budget) fails alone: the model and its other contexts keep working, and new contexts compile.
TEST(Embed, ABadRunDoesNotPoisonTheModel) {
    auto bytes = mlp_bytes();
    em::ModelOptions budget;
    budget.memory_budget = "1MB";
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true, budget);
    auto x = random_floats(4 * 32, 21);
    auto good = model->create_context();
    auto expected = run_mlp(*good, x, 4);

    auto bad = model->create_context();
    // Over the memory budget: 100000 rows of 32 floats need 12.8 MB.
    std::vector<float> big(size_t(100000) * 32, 0.5f);
    bad->set_input("x", big.data(), em::DType::FLOAT32, {100000, 32});
    std::string msg;
    EXPECT_EQ(code_of([&] { bad->run(); }, &msg), em::Code::OUT_OF_MEMORY) << msg;
    // Too large for the kernels: the shape alone is refused; the data is never read.
    bad->set_input("x", x.data(), em::DType::FLOAT32, {int64_t(1) << 40, 32});
    EXPECT_NE(code_of([&] { bad->run(); }, &msg), em::Code::OK);

    for (int i = 0; i < 2; ++i) { // a new context, then a pooled one
        std::unique_ptr<em::Context> fresh;
        std::shared_ptr<em::Context> pooled;
        em::Context* ctx = nullptr;
        if (i == 0) {
            ASSERT_EQ(code_of([&] { fresh = model->create_context(); }, &msg), em::Code::OK) << msg;
            ctx = fresh.get();
        } else {
            ASSERT_EQ(code_of([&] { pooled = model->acquire_context(); }, &msg), em::Code::OK)
                << msg;
            ctx = pooled.get();
        }
        EXPECT_EQ(run_mlp(*ctx, x, 4), expected);
        ctx->set_input("x", x.data(), em::DType::FLOAT32, {4, 32});
        EXPECT_EQ(ctx->output_shape("logits"), (std::vector<int64_t>{4, 3}));
    }
    EXPECT_EQ(run_mlp(*good, x, 4), expected);
    EXPECT_EQ(run_mlp(*bad, x, 4), expected); // the failed context recovers too
}

// braid_context_destroy() returns only after a run in flight on another thread has ended: the
// caller may free the buffers bound to the context as soon as it returns.
TEST(Embed, CApiDestroyWaitsForTheRunInFlight) {
    auto bytes = slow_bytes();
    braid_model* model = nullptr;
    ASSERT_EQ(braid_model_load_buffer(bytes.data(), bytes.size(), 1, &model), nullptr);
    auto x = random_floats(256 * 256, 22);
    const int64_t shape[] = {256, 256};
    int completed = 0;
    for (int round = 0; round < 3; ++round) {
        braid_context* ctx = nullptr;
        ASSERT_EQ(braid_context_create(model, &ctx), nullptr);
        ASSERT_EQ(braid_context_set_input(ctx, "x", BRAID_FLOAT32, shape, 2, x.data()), nullptr);
        auto out = std::make_unique<std::vector<float>>(256 * 256, -7.f);
        ASSERT_EQ(braid_context_bind_output(ctx, "y", out->data(), out->size() * 4), nullptr);
        std::atomic<bool> started{false};
        braid_code run_code = BRAID_OK;
        std::thread runner([&] {
            started = true;
            braid_status* st = braid_context_run(ctx, nullptr);
            run_code = st ? braid_status_code(st) : BRAID_OK;
            braid_status_free(st);
        });
        while (!started) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(5 * round));
        ASSERT_EQ(braid_context_destroy(ctx), nullptr);
        // From here on nothing may write `out`: snapshot it, let the runner finish, compare.
        std::vector<float> at_destroy = *out;
        runner.join();
        EXPECT_EQ(at_destroy, *out) << "the run wrote its output after destroy returned";
        // A run destroy caught before it started computes nothing (FAILED_PRECONDITION, or
        // INVALID_ARGUMENT once the handle is gone); one already running ends first.
        if (run_code == BRAID_OK) {
            ++completed;
            EXPECT_NE(at_destroy[0], -7.f) << "a successful run had not written its output";
        } else {
            EXPECT_EQ(at_destroy[0], -7.f);
        }
    }
    EXPECT_GT(completed, 0) << "no run was in flight when its context was destroyed";
    braid_model_release(model);
}

// What output_shape() and a batch of 0 rows mean (docs/embedding.md): output_shape() answers
// for this context's bound inputs, and an unbound input with a run-time dim is an error; an
// empty batch is a valid batch and gives empty outputs.
TEST(Embed, OutputShapeNeedsBoundRunTimeDimsAndAnEmptyBatchRuns) {
    auto bytes = mlp_bytes();
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true);
    auto other = model->create_context();
    auto x = random_floats(9 * 32, 23);
    run_mlp(*other, x, 9); // leaves batch 9 in the shared graph
    auto ctx = model->create_context();
    std::string msg;
    EXPECT_EQ(code_of([&] { ctx->output_shape("logits"); }, &msg), em::Code::FAILED_PRECONDITION);
    EXPECT_THAT(msg, HasSubstr("input \"x\" is not bound"));
    EXPECT_THAT(msg, HasSubstr("{-1,32}"));

    ctx->set_input("x", x.data(), em::DType::FLOAT32, {0, 32});
    EXPECT_EQ(ctx->output_shape("logits"), (std::vector<int64_t>{0, 3}));
    ASSERT_EQ(code_of([&] { ctx->run(); }, &msg), em::Code::OK) << msg;
    auto out = ctx->output("logits");
    EXPECT_EQ(out.shape, (std::vector<int64_t>{0, 3}));
    EXPECT_EQ(out.bytes, 0u);
    // An empty batch needs no memory: null data is accepted for it (and only for it).
    ctx->set_input("x", nullptr, em::DType::FLOAT32, {0, 32});
    ASSERT_EQ(code_of([&] { ctx->run(); }, &msg), em::Code::OK) << msg;
    EXPECT_EQ(ctx->output("logits").shape, (std::vector<int64_t>{0, 3}));

    // A model whose inputs are all fixed answers before any input is bound.
    DumpOptions fixed;
    auto fixed_bytes =
        model_bytes([](ComputingGraph& g) { return examples::build_mlp(g, 5, 32, 16, 3); }, fixed);
    auto fixed_model = em::Model::load_buffer(fixed_bytes.data(), fixed_bytes.size(), true);
    EXPECT_EQ(fixed_model->create_context()->output_shape("logits"), (std::vector<int64_t>{5, 3}));
}
