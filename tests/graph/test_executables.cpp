// Several executables compiled from one graph: each holds its own fed inputs, shapes and
// memory, so they run independently, in turn or from different threads at once.
#include "base/run_control.h"
#include "base/thread_pool.h"
#include "braid.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

using namespace braid;

namespace {

//! y = relu(x * 2 + 1) summed over dim 1: {batch, 3} -> {batch}.
struct RowGraph {
    std::shared_ptr<ComputingGraph> graph;
    SymbolVar x, y;

    explicit RowGraph(const std::string& comp_node) {
        GraphOptions options;
        options.default_comp_node = comp_node;
        graph = ComputingGraph::make(options);
        x = opr::Input::make(*graph, "x", dtype::Float32(), {2, 3});
        y = opr::reduce_sum(opr::relu(x * 2.0 + 1.0), {1}, false);
    }
};

//! x[r, c] = base + r - c.
Tensor rows(size_t batch, float base) {
    Tensor t(TensorShape{batch, 3}, dtype::Float32());
    for (size_t r = 0; r < batch; ++r)
        for (size_t c = 0; c < 3; ++c) t.ptr<float>()[r * 3 + c] = base + float(r) - float(c);
    return t;
}

float expected_row(size_t r, float base) {
    float s = 0;
    for (size_t c = 0; c < 3; ++c) s += std::max(0.f, 2.f * (base + float(r) - float(c)) + 1.f);
    return s;
}

//! Empty when `out` is the graph's result for rows(batch, base); otherwise what differs.
std::string check_rows(const Tensor& out, size_t batch, float base) {
    if (out.shape() != TensorShape{batch})
        return "shape " + out.shape().to_string() + ", expected {" + std::to_string(batch) + "}";
    for (size_t r = 0; r < batch; ++r)
        if (out.ptr<float>()[r] != expected_row(r, base))
            return "row " + std::to_string(r) + ": " + std::to_string(out.ptr<float>()[r]) +
                   ", expected " + std::to_string(expected_row(r, base));
    return {};
}

} // namespace

TEST(Executables, FeedingOneDoesNotChangeWhatAnotherReads) {
    RowGraph g("cpu0");
    auto a = g.graph->compile({g.y});
    auto b = g.graph->compile({g.y});
    a->feed("x", rows(2, 1.f));
    b->feed("x", rows(2, 5.f));
    a->run();
    EXPECT_EQ(check_rows(a->output(0), 2, 1.f), "");
    b->run();
    EXPECT_EQ(check_rows(b->output(0), 2, 5.f), "");
    a->run(); // after b ran with its own input
    EXPECT_EQ(check_rows(a->output(0), 2, 1.f), "");
}

TEST(Executables, EachKeepsItsOwnInputShape) {
    RowGraph g("cpu0");
    auto a = g.graph->compile({g.y});
    auto b = g.graph->compile({g.y});
    a->feed("x", rows(7, 0.5f)).run();
    b->feed("x", rows(3, 2.f)).run(); // re-infers the graph for batch 3
    a->run();                         // still batch 7, with its own plan
    EXPECT_EQ(check_rows(a->output(0), 7, 0.5f), "");
    EXPECT_EQ(check_rows(b->output(0), 3, 2.f), "");
}

TEST(Executables, ANeverFedExecutableSaysSoEvenWhenAnotherWasFed) {
    RowGraph g("cpu0");
    auto a = g.graph->compile({g.y});
    auto b = g.graph->compile({g.y});
    b->feed("x", rows(2, 1.f)).run();
    try {
        a->execute();
        FAIL() << "execute() without feed() did not throw";
    } catch (const GraphError& e) {
        EXPECT_NE(std::string(e.what()).find("\"x\" was never fed"), std::string::npos) << e.what();
    }
}

TEST(Executables, ConcurrentRunsFromFourThreadsAreAllCorrect) {
    for (const char* cn : {"cpu0", "cpu:default"}) {
        SCOPED_TRACE(cn);
        RowGraph g(cn);
        constexpr int threads = 4, iterations = 200;
        std::vector<std::unique_ptr<Executable>> execs;
        for (int t = 0; t < threads; ++t) execs.push_back(g.graph->compile({g.y}));
        std::atomic<int> wrong{0};
        std::string first_wrong;
        std::mutex first_mutex;
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t] {
                for (int i = 0; i < iterations; ++i) {
                    // Threads feed different batch sizes, so they also re-plan concurrently.
                    size_t batch = size_t(1 + (t + i) % 3 + t);
                    float base = float(t * 1000 + i) * 0.25f;
                    auto& exec = *execs[size_t(t)];
                    exec.feed("x", rows(batch, base)).run();
                    std::string why = check_rows(exec.output(0), batch, base);
                    if (!why.empty() && wrong.fetch_add(1) == 0) {
                        std::lock_guard lk(first_mutex);
                        first_wrong = why;
                    }
                }
            });
        for (auto& th : pool) th.join();
        EXPECT_EQ(wrong.load(), 0)
            << "of " << threads * iterations << " runs; first: " << first_wrong;
    }
}

TEST(Executables, FeedChecksDtypeAndEmptiness) {
    RowGraph g("cpu0");
    auto a = g.graph->compile({g.y});
    EXPECT_THROW(a->feed("x", Tensor(TensorShape{2, 3}, dtype::Int32())), DTypeError);
    EXPECT_THROW(a->feed("x", Tensor()), GraphError);
    EXPECT_THROW(a->feed("nope", rows(2, 0.f)), GraphError);
}

TEST(Executables, AKernelErrorReachesWaitNamingOperatorAndCompNode) {
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", dtype::Int32(), {2});
    auto b = opr::Input::make(*g, "b", dtype::Int32(), {2});
    auto q = opr::Elemwise::make(opr::ElemMode::FLOOR_DIV, {a, b}, {"q", CompNode::load("cpu1")});
    auto exec = g->compile({q});
    Tensor ta(TensorShape{2}, dtype::Int32()), tb(TensorShape{2}, dtype::Int32());
    ta.ptr<int32_t>()[0] = ta.ptr<int32_t>()[1] = 4;
    tb.ptr<int32_t>()[0] = 2;
    tb.ptr<int32_t>()[1] = 0;
    exec->feed("a", ta).feed("b", tb);
    try {
        exec->run();
        FAIL() << "division by zero did not fail the run";
    } catch (const ValueError& e) { // a bad value, not a dtype problem
        EXPECT_EQ(std::string(e.what()),
                  "Elemwise(FLOOR_DIV) \"q\" on cpu1: integer division by zero");
    }
}

TEST(RunControl, ParallelKernelsStopBetweenChunksOnceCancelled) {
    RunControl rc;
    RunControlScope scope(&rc);
    std::atomic<size_t> done{0};
    // Serially (one thread) and in parallel: chunks after the cancel are skipped.
    for (size_t cap : {size_t(1), size_t(0)}) {
        KernelThreadCap limit(cap ? cap : SIZE_MAX);
        rc.reset();
        done = 0;
        EXPECT_THROW(parallel_for(1000, 1,
                                  [&](size_t b, size_t e) {
                                      done += e - b;
                                      if (done >= 100) rc.cancel();
                                  }),
                     CancelledError);
        EXPECT_LT(done.load(), 1000u) << "cap " << cap;
    }
    rc.reset();
    rc.set_deadline(RunControl::Clock::now() - std::chrono::milliseconds(1));
    EXPECT_THROW(parallel_for(1000, 1, [](size_t, size_t) {}), DeadlineExceededError);
}

// Workers started by a resize have seen every earlier region: joining the last one would run
// its finished function against a run control that may be gone (AddressSanitizer caught a
// worker reading a destroyed context's run control this way).
TEST(RunControl, WorkersStartedByAResizeDoNotJoinTheLastRegion) {
    size_t saved = kernel_threads();
    set_kernel_threads(2);
    std::atomic<size_t> calls{0};
    {
        auto rc = std::make_unique<RunControl>();
        RunControlScope scope(rc.get());
        parallel_for(64, 1, [&](size_t b, size_t e) { calls += e - b; });
    } // the run control is gone
    EXPECT_EQ(calls.load(), 64u);
    set_kernel_threads(3);
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // time to join, were they to
    EXPECT_EQ(calls.load(), 64u);
    parallel_for(30, 1, [&](size_t b, size_t e) { calls += e - b; });
    EXPECT_EQ(calls.load(), 94u);
    set_kernel_threads(saved);
}

TEST(RunControl, ACancelledRunFailsNamingTheOperatorAndTheNextRunWorks) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    auto y = opr::relu(x) + 1.0;
    auto exec = g->compile({y});
    Tensor xt(TensorShape{4}, dtype::Float32());
    for (int i = 0; i < 4; ++i) xt.ptr<float>()[i] = float(i);
    exec->feed("x", xt);
    RunControl rc;
    exec->set_run_control(&rc);
    rc.cancel();
    try {
        exec->run();
        FAIL() << "expected CancelledError";
    } catch (const CancelledError& e) {
        EXPECT_NE(std::string(e.what()).find("\"x\""), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("cancelled"), std::string::npos) << e.what();
    }
    rc.reset();
    exec->run();
    EXPECT_EQ(exec->output(0).ptr<float>()[3], 4.f);
}

TEST(RunControl, ACollectiveWaitingForAbsentPeersEndsAtTheRunsDeadline) {
    // Rank 0 of 2; rank 1 never comes. Without the run's deadline the wait would last the
    // comm timeout (300 s by default).
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4});
    opr::Group group{"deadline", 2, 0, std::make_shared<comm::InProcessGroupClient>(),
                     "local",    0, {}};
    auto y = opr::all_reduce_sum(x, group);
    auto exec = g->compile({y});
    Tensor xt(TensorShape{4}, dtype::Float32());
    exec->feed("x", xt);
    RunControl rc;
    rc.set_deadline(RunControl::Clock::now() + std::chrono::milliseconds(200));
    exec->set_run_control(&rc);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(exec->run(), DeadlineExceededError);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}
