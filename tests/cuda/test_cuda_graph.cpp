// CUDA comp nodes in whole graphs: loading, cross-device copies, host-readable outputs,
// missing kernels, memory, and a model run with cuda0 as the default comp node.
#include "cuda_checker.h"

#if BRAID_WITH_CUDA
#include "memory/cuda_allocator.h"
#endif

using namespace braid;
using namespace braid::test;

namespace {

//! A test operator type that has only a CPU kernel.
class CpuOnlyOpr final : public OperatorNode {
public:
    CpuOnlyOpr(VarNode* x, const OperatorConfig& cfg) : OperatorNode(cfg) {
        add_input(x);
        add_output();
    }
    const char* type_name() const override { return "TestCpuOnly"; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override {
        if (!ctx.shape(0)) return false;
        out[0] = *ctx.shape(0);
        return true;
    }
    ValueInference value_inference() const override { return ValueInference::NONE; }
    void execute(ExecCtx& ctx) override { ctx.output(0).copy_from(ctx.input(0)); }
};

std::shared_ptr<ComputingGraph> graph_on(const std::string& cn) {
    register_all_operators();
    GraphOptions options;
    options.default_comp_node = cn;
    return ComputingGraph::make(options);
}

} // namespace

TEST(CudaGraph, CpuToCudaToCpuGivesTheCpuResult) {
    BRAID_REQUIRE_CUDA();
    auto g = graph_on("cpu0");
    auto cpu = CompNode::load("cpu0"), gpu = CompNode::load("cuda0");
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 3});
    auto a = opr::relu(x) + 1.0;                                                       // cpu0
    auto b = opr::Elemwise::make(opr::ElemMode::MUL, {a, a}, OperatorConfig::on(gpu)); // cuda0
    auto c = opr::reduce_sum(b, {1}); // cuda0 (follows b)
    auto d = opr::Elemwise::make(opr::ElemMode::ADD,
                                 {c, opr::ImmutableTensor::make_scalar(*g, 0.5, dtype::Float32())},
                                 OperatorConfig::on(cpu)); // back on cpu0
    EXPECT_EQ(b.comp_node(), gpu);
    EXPECT_EQ(c.comp_node(), gpu);
    EXPECT_EQ(d.comp_node(), cpu);
    auto exec = g->compile({d, b});
    size_t copies = 0;
    for (auto& [cn, oprs] : exec->sequences())
        for (auto* o : oprs) copies += std::string(o->type_name()) == "Copy";
    EXPECT_EQ(copies, 2u) << "one Copy onto cuda0, one back to cpu0";
    std::mt19937 rng(5);
    Tensor xv = random_tensor({4, 3}, dtype::Float32(), rng);
    exec->feed("x", xv).run();
    for (size_t r = 0; r < 4; ++r) {
        double sum = 0;
        for (size_t k = 0; k < 3; ++k) {
            double v = std::max(0.0, xv.at(r * 3 + k)) + 1.0;
            sum += v * v;
            EXPECT_NEAR(exec->output(1).at(r * 3 + k), v * v, 1e-5);
        }
        EXPECT_NEAR(exec->output(0).at(r), sum + 0.5, 1e-4);
    }
    EXPECT_EQ(exec->output(1).device(), Device::cpu()) << "fetched outputs are host tensors";
}

TEST(CudaGraph, TwoStreamsAndTheHostAreOrderedByEvents) {
    BRAID_REQUIRE_CUDA();
    // Alternate a long chain between cuda0, cuda0:1 and cpu0 on a large tensor: a missing
    // wait shows up as a wrong sum.
    auto g = graph_on("cpu0");
    CompNode nodes[] = {CompNode::load("cuda0"), CompNode::load("cuda0:1"), CompNode::load("cpu0")};
    size_t n = size_t(1) << 20;
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {n});
    SymbolVar y = x;
    const int steps = 12;
    for (int i = 0; i < steps; ++i) {
        CompNode cn = nodes[i % 3];
        auto one =
            opr::ImmutableTensor::make_scalar(*g, 1.0, dtype::Float32(), OperatorConfig::on(cn));
        y = opr::Elemwise::make(opr::ElemMode::ADD, {y, one}, OperatorConfig::on(cn));
    }
    auto exec = g->compile({opr::reduce_sum(y), y});
    Tensor xv(TensorShape{n}, dtype::Float32());
    for (size_t i = 0; i < n; ++i) xv.ptr<float>()[i] = float(i % 7);
    double expected = 0;
    for (size_t i = 0; i < n; ++i) expected += double(i % 7) + steps;
    for (int run = 0; run < 3; ++run) {
        exec->feed("x", xv).run();
        EXPECT_NEAR(exec->output(0).at(0), expected, expected * 1e-6) << "run " << run;
        EXPECT_EQ(exec->output(1).at(n - 1), double((n - 1) % 7) + steps);
    }
}

TEST(CudaGraph, OperatorWithoutCudaKernelFailsAtCompileNamingIt) {
    BRAID_REQUIRE_CUDA();
    auto g = graph_on("cuda0");
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    SymbolVar y =
        g->insert_opr(std::make_unique<CpuOnlyOpr>(x.node(), OperatorConfig("odd")))->output(0);
    try {
        g->compile({y});
        FAIL() << "expected GraphError";
    } catch (const GraphError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("TestCpuOnly \"odd\""), std::string::npos) << msg;
        EXPECT_NE(msg.find("cuda0"), std::string::npos) << msg;
    }
}

TEST(CudaGraph, DefaultCompNodeCuda0RunsAModelLikeTheCpu) {
    BRAID_REQUIRE_CUDA();
    std::mt19937 rng(11);
    Tensor w1 = random_tensor({32, 16}, dtype::Float32(), rng, -0.5, 0.5);
    Tensor w2 = random_tensor({16, 4}, dtype::Float32(), rng, -0.5, 0.5);
    Tensor xv = random_tensor({8, 32}, dtype::Float32(), rng);
    std::vector<Tensor> results;
    for (std::string cn : {"cpu0", "cuda0"}) {
        auto g = graph_on(cn);
        auto x = opr::Input::make(*g, "x", dtype::Float32(), {8, 32});
        auto p1 = opr::SharedParam::make(*g, std::make_shared<Tensor>(w1.copy()));
        auto p2 = opr::SharedParam::make(*g, std::make_shared<Tensor>(w2.copy()));
        auto h = opr::tanh(opr::matmul(x, p1) * 0.5 + 0.1);
        auto y = opr::sigmoid(opr::matmul(h, p2)).astype(dtype::Float16()).astype(dtype::Float32());
        auto exec = g->compile({y});
        for (auto& [node, oprs] : exec->sequences()) EXPECT_EQ(node.locator(), cn);
        exec->feed("x", xv).run();
        exec->run(); // a second run reuses everything
        results.push_back(exec->output(0).copy());
    }
    expect_tensor_near(results[1], results[0], 1e-3, 1e-3, "model output cuda0 vs cpu0");
}

TEST(CudaGraph, FeedingNewShapesReinfersAndReallocates) {
    BRAID_REQUIRE_CUDA();
    auto g = graph_on("cuda0");
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3});
    auto y = opr::reduce_sum((x * 2.0).reshape(x.symshape()), {0});
    auto exec = g->compile({y});
    for (size_t rows : {2, 5, 1}) {
        std::mt19937 rng{unsigned(rows)};
        Tensor xv = random_tensor({rows, 3}, dtype::Float32(), rng);
        exec->feed("x", xv).run();
        ASSERT_EQ(exec->output(0).shape(), TensorShape({3}));
        for (size_t k = 0; k < 3; ++k) {
            double s = 0;
            for (size_t r = 0; r < rows; ++r) s += 2 * xv.at(r * 3 + k);
            EXPECT_NEAR(exec->output(0).at(k), s, 1e-5);
        }
    }
}

TEST(CudaGraph, CallbacksAndFeedsOnTheDevice) {
    BRAID_REQUIRE_CUDA();
    auto g = graph_on("cuda0");
    CompNode gpu = CompNode::load("cuda0");
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto y = x * 3.0;
    std::vector<float> seen;
    auto exec = g->compile({OutputSpec(y, [&](const Tensor& t) {
        EXPECT_EQ(t.device(), Device::cpu()) << "callbacks see host tensors";
        for (size_t i = 0; i < 3; ++i) seen.push_back(float(t.at(i)));
    })});
    // A tensor already on the device is fed without a copy.
    Tensor dev(TensorShape{3}, dtype::Float32(), gpu.allocator());
    gpu.copy(dev, make_tensor({3}, {1, 2, 3}));
    gpu.sync();
    exec->feed("x", dev).run();
    EXPECT_EQ(seen, (std::vector<float>{3, 6, 9}));
    // A pinned host tensor is uploaded directly.
    Tensor pinned(TensorShape{3}, dtype::Float32(), gpu.host_allocator());
    for (int i = 0; i < 3; ++i) pinned.ptr<float>()[i] = float(i);
    seen.clear();
    exec->feed("x", pinned).run();
    EXPECT_EQ(seen, (std::vector<float>{0, 3, 6}));
    EXPECT_THROW(dev.at(0), ValueError) << "device memory is not host-readable";
}

TEST(CudaGraph, ParameterOnAnotherDeviceThanItsUpdateIsAGraphError) {
    BRAID_REQUIRE_CUDA();
    auto g = graph_on("cpu0");
    auto w = opr::SharedParam::make(*g, std::make_shared<Tensor>(make_tensor({2}, {1, 2})));
    auto gr = opr::ImmutableTensor::make(*g, make_tensor({2}, {1, 1}));
    EXPECT_THROW(opr::ParamUpdate::make(w, gr, {}, {}, OperatorConfig::on(CompNode::load("cuda0"))),
                 GraphError);
}

TEST(CudaGraph, GradientsFlowBackAcrossDevices) {
    BRAID_REQUIRE_CUDA();
    auto g = graph_on("cpu0");
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto on_gpu = opr::Copy::make(x, CompNode::load("cuda0"));
    auto loss = opr::reduce_sum(on_gpu * on_gpu);
    auto dx = grad(loss, x);
    EXPECT_EQ(dx.comp_node(), CompNode::load("cpu0"));
    auto exec = g->compile({dx});
    exec->feed("x", make_tensor({3}, {1, -2, 3})).run();
    for (size_t i = 0; i < 3; ++i)
        EXPECT_NEAR(exec->output(0).at(i), 2 * (i == 1 ? -2. : i + 1.), 1e-6);
}

#if BRAID_WITH_CUDA
TEST(CudaMemory, DeviceAllocatorCachesBlocksPerBucket) {
    BRAID_REQUIRE_CUDA();
    CudaDeviceAllocator alloc(0);
    void* a = alloc.alloc(1000);
    EXPECT_EQ(alloc.stats().nr_raw_allocs, 1u);
    alloc.free(a);
    void* b = alloc.alloc(900); // same 1024-byte bucket: served from the cache
    EXPECT_EQ(b, a);
    EXPECT_EQ(alloc.stats().nr_raw_allocs, 1u);
    void* big = alloc.alloc(size_t(64) << 20); // an arena-sized block is one allocation
    EXPECT_EQ(alloc.stats().nr_raw_allocs, 2u);
    alloc.free(big);
    alloc.free(b);
    EXPECT_EQ(alloc.stats().in_use_bytes, 0u);
    alloc.release_cached();
    EXPECT_EQ(alloc.stats().cached_bytes, 0u);
}
#endif

TEST(CudaMemory, CopiesBetweenHostAndDeviceKeepValues) {
    BRAID_REQUIRE_CUDA();
    CompNode gpu = CompNode::load("cuda0");
    Tensor host = make_tensor({2, 3}, {1, 2, 3, 4, 5, 6});
    Tensor dev(TensorShape{2, 3}, dtype::Float32(), gpu.allocator());
    gpu.copy(dev, host);
    // A strided (transposed) device view copied back to a contiguous host tensor.
    TensorLayout t({3, 2}, dtype::Float32());
    t.stride[0] = 1;
    t.stride[1] = 3;
    Tensor back(TensorShape{3, 2}, dtype::Float32());
    gpu.copy(back, dev.view(t));
    gpu.sync();
    EXPECT_EQ(back.at(0), 1);
    EXPECT_EQ(back.at(1), 4);
    EXPECT_EQ(back.at(5), 6);
}
