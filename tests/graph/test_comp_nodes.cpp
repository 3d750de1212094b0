// Execution across several comp nodes: ordering, and no deadlock when a kernel on one comp
// node waits for work that another comp node does later.
#include "braid.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace braid;

namespace {

//! Test operator: sets a flag when executed (passes its input through by value).
class SignalOpr final : public OperatorNode {
public:
    SignalOpr(VarNode* x, std::atomic<int>* flag, const OperatorConfig& cfg)
        : OperatorNode(cfg), m_flag(flag) {
        add_input(x);
        add_output();
    }
    const char* type_name() const override { return "TestSignal"; }
    bool allow_dedup() const override { return false; }
    ValueInference value_inference() const override { return ValueInference::NONE; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override {
        if (!ctx.shape(0)) return false;
        out[0] = *ctx.shape(0);
        return true;
    }
    void execute(ExecCtx& ctx) override {
        ctx.output(0).copy_from(ctx.input(0));
        m_flag->store(1);
        m_flag->notify_all();
    }

private:
    std::atomic<int>* m_flag;
};

//! Test operator: blocks until the flag is set (with a deadline), then copies its input.
class WaitOpr final : public OperatorNode {
public:
    WaitOpr(VarNode* x, std::atomic<int>* flag, const OperatorConfig& cfg)
        : OperatorNode(cfg), m_flag(flag) {
        add_input(x);
        add_output();
    }
    const char* type_name() const override { return "TestWait"; }
    bool allow_dedup() const override { return false; }
    ValueInference value_inference() const override { return ValueInference::NONE; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override {
        if (!ctx.shape(0)) return false;
        out[0] = *ctx.shape(0);
        return true;
    }
    void execute(ExecCtx& ctx) override {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!m_flag->load()) {
            if (std::chrono::steady_clock::now() > deadline)
                throw TimeoutError("TestWait: the signal never came");
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        ctx.output(0).copy_from(ctx.input(0));
    }

private:
    std::atomic<int>* m_flag;
};

Tensor filled(const TensorShape& shape, float v) {
    Tensor t(shape, dtype::Float32());
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t.ptr<float>()[i] = v;
    return t;
}

} // namespace

TEST(CompNodes, LocatorsAreCanonicalAndDistinct) {
    auto a = CompNode::load("cpu0"), b = CompNode::load("cpu0:1"), c = CompNode::load("cpu1");
    EXPECT_EQ(a, CompNode::load("cpu0"));
    EXPECT_NE(a, b);
    EXPECT_NE(a, c);
    EXPECT_EQ(b.locator(), "cpu0:1");
    EXPECT_TRUE(CompNode::default_cpu().is_inline());
    EXPECT_LT(a.id(), c.id());
    EXPECT_THROW(CompNode::load("cpu"), ValueError);
    EXPECT_EQ(CompNode::load("cpu01").locator(), "cpu1");
}

TEST(CompNodes, BadLocatorsNameTheLocatorAndTheAcceptedForms) {
    auto message = [](const std::string& locator) {
        try {
            CompNode::load(locator);
        } catch (const ValueError& e) {
            return std::string(e.what());
        }
        return std::string("loaded");
    };
    // Digit strings past int's range used to escape as std::out_of_range ("stoi").
    EXPECT_EQ(message("cpu99999999999"),
              "invalid comp node locator \"cpu99999999999\": device number 99999999999 is out "
              "of range (0 to 65534); expected cpu:default, cpuN, cpuN:K, cudaN or cudaN:K");
    EXPECT_EQ(message("cpu0:123456789012345678901"),
              "invalid comp node locator \"cpu0:123456789012345678901\": stream number "
              "123456789012345678901 is out of range (0 to 65534); expected cpu:default, cpuN, "
              "cpuN:K, cudaN or cudaN:K");
    EXPECT_EQ(message("gpu0"), "invalid comp node locator \"gpu0\"; expected cpu:default, cpuN, "
                               "cpuN:K, cudaN or cudaN:K");
    EXPECT_EQ(message("cpu65534"), "loaded");
}

TEST(CompNodes, EventsOrderWorkAcrossQueues) {
    auto a = CompNode::load("cpu0"), b = CompNode::load("cpu1");
    std::atomic<int> stage{0};
    a.dispatch([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        stage.store(1);
    });
    CompNodeEvent ev;
    ev.record(a);
    ev.device_wait(b);
    int seen = -1;
    b.dispatch([&] { seen = stage.load(); });
    b.sync();
    EXPECT_EQ(seen, 1);
    EXPECT_TRUE(ev.finished());
}

TEST(CompNodes, TasksDispatchedWhileTheWorkerIsBusyOrAsleepAllRunInOrder) {
    // A dispatch wakes the worker only when it sleeps: tasks sent at once, while the worker is
    // still busy with the last one or about to sleep, and long after must all run, in order,
    // none waiting for a later dispatch to wake the worker.
    auto cn = CompNode::load("cpu3");
    std::vector<int> order;
    const int delays_us[] = {0, 0, 50, 150, 400, 2000, 0, 1000, 5, 250};
    for (int round = 0; round < 3; ++round)
        for (int d : delays_us) {
            std::this_thread::sleep_for(std::chrono::microseconds(d));
            int id = int(order.size());
            std::atomic<bool> ran{false};
            cn.dispatch([&, id] {
                order.push_back(id);
                ran.store(true);
            });
            auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (!ran.load() && std::chrono::steady_clock::now() < deadline)
                std::this_thread::yield();
            ASSERT_TRUE(ran.load()) << "task " << id << " after " << d << " us did not run";
        }
    cn.sync();
    ASSERT_EQ(order.size(), 3 * std::size(delays_us));
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], int(i));
}

TEST(CompNodes, DependenciesBothWaysBetweenTwoCompNodes) {
    auto g = ComputingGraph::make();
    auto cn0 = CompNode::load("cpu0"), cn1 = CompNode::load("cpu1");
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {64}, cn0);
    auto a = opr::Elemwise::make(opr::ElemMode::MUL, {x, x}, OperatorConfig::on(cn0)); // x^2
    auto b = opr::Elemwise::make(opr::ElemMode::ADD, {a, x}, OperatorConfig::on(cn1)); // x^2+x
    auto c = opr::Elemwise::make(opr::ElemMode::MUL, {b, a}, OperatorConfig::on(cn0)); // cn1->cn0
    auto d = opr::Elemwise::make(opr::ElemMode::SUB, {c, b}, OperatorConfig::on(cn1)); // cn0->cn1
    EXPECT_EQ(b.comp_node(), cn1);
    auto exec = g->compile({d, c});
    for (float v : {0.5f, 2.f, -3.f}) {
        exec->feed("x", filled({64}, v)).run();
        float a_ = v * v, b_ = a_ + v, c_ = b_ * a_, d_ = c_ - b_;
        EXPECT_FLOAT_EQ(float(exec->output(0).at(63)), d_);
        EXPECT_FLOAT_EQ(float(exec->output(1).at(0)), c_);
    }
    EXPECT_EQ(exec->sequences().size(), 2u);
}

TEST(CompNodes, BlockingOperatorOnCpu1WaitsForCpu0WithoutDeadlock) {
    auto g = ComputingGraph::make();
    auto cn0 = CompNode::load("cpu0"), cn1 = CompNode::load("cpu1");
    std::atomic<int> flag{0};
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4}, cn1);
    // Inserted first, on cpu1: blocks until the signal operator on cpu0 runs.
    auto waited = g->insert_opr(std::make_unique<WaitOpr>(x.node(), &flag, OperatorConfig::on(cn1)))
                      ->output(0);
    auto x0 = opr::Input::make(*g, "x0", dtype::Float32(), {4}, cn0);
    auto signalled =
        g->insert_opr(std::make_unique<SignalOpr>(x0.node(), &flag, OperatorConfig::on(cn0)))
            ->output(0);
    auto exec = g->compile({SymbolVar(waited), SymbolVar(signalled)});
    exec->feed("x", filled({4}, 3.f)).feed("x0", filled({4}, 4.f));
    for (int i = 0; i < 5; ++i) {
        flag.store(0);
        exec->run();
        EXPECT_FLOAT_EQ(float(exec->output(0).at(0)), 3.f);
        EXPECT_FLOAT_EQ(float(exec->output(1).at(0)), 4.f);
    }
}

TEST(CompNodes, InlineCompNodeRunsInTheCallingThread) {
    GraphOptions opt;
    opt.default_comp_node = "cpu:default";
    auto g = ComputingGraph::make(opt);
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto exec = g->compile({x * 3.0});
    exec->feed("x", filled({3}, 2.f));
    exec->execute();
    exec->wait();
    EXPECT_FLOAT_EQ(float(exec->output(0).at(2)), 6.f);
}

// In every build, with CUDA or without (the GPU suite, tests/cuda, is built only with CUDA).
TEST(CompNodes, LoadingCudaWithoutDeviceOrSupportIsAClearError) {
    if (CompNode::cuda_device_count() > 0) {
        auto cn = CompNode::load("cuda0");
        EXPECT_EQ(cn.locator(), "cuda0");
        EXPECT_EQ(cn.device().kind, Device::Kind::CUDA);
        EXPECT_NE(cn.cuda_context(), nullptr);
        EXPECT_NE(CompNode::load("cuda0:1"), cn);
        GTEST_SKIP() << "a CUDA device is present; the no-device error cannot be observed";
    }
    try {
        CompNode::load("cuda0");
        FAIL() << "loading cuda0 without a device must throw";
    } catch (const Error& e) {
        std::string msg = e.what();
#if BRAID_WITH_CUDA
        EXPECT_NE(msg.find("comp node cuda0: no CUDA device found (cudaGetDeviceCount: "),
                  std::string::npos)
            << msg;
#else
        EXPECT_NE(msg.find("no CUDA support"), std::string::npos) << msg;
#endif
    }
    // The failed load leaves no half-made comp node behind: it fails the same way again.
    EXPECT_THROW(CompNode::load("cuda0"), Error);
}
