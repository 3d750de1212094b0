// The per-device kernel registry and the Copy operator, on CPU comp nodes only (runs in every
// build, with or without CUDA).
#include "braid.h"
#include "graph/kernel_registry.h"

#include <gtest/gtest.h>

using namespace braid;

namespace {

int g_executed = 0;

//! A test operator type: CPU kernel only, unless a test registers more.
class RegistryTestOpr final : public OperatorNode {
public:
    RegistryTestOpr(VarNode* x, const char* type, const OperatorConfig& cfg)
        : OperatorNode(cfg), m_type(type) {
        add_input(x);
        add_output();
    }
    const char* type_name() const override { return m_type; }
    bool allow_dedup() const override { return false; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override {
        if (!ctx.shape(0)) return false;
        out[0] = *ctx.shape(0);
        return true;
    }
    ValueInference value_inference() const override { return ValueInference::NONE; }
    void execute(ExecCtx& ctx) override {
        ++g_executed;
        ctx.output(0).copy_from(ctx.input(0));
    }

private:
    const char* m_type;
};

void fake_cuda_kernel(OperatorNode&, ExecCtx&) {}
void doubling_cpu_kernel(OperatorNode&, ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    for (size_t i = 0; i < x.shape().total_nr_elems(); ++i)
        ctx.output(0).ptr<float>()[i] = 2 * x.ptr<float>()[i];
}

OperatorNode* make_test_opr(ComputingGraph& g, SymbolVar x, const char* type) {
    return g.insert_opr(std::make_unique<RegistryTestOpr>(x.node(), type, OperatorConfig("t")));
}

} // namespace

TEST(KernelRegistry, CpuResolvesToExecute) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2});
    auto* o = make_test_opr(*g, x, "TestRegistryCpu");
    KernelFn fn = resolve_kernel(*o, Device::Kind::CPU, "cpu0");
    ASSERT_NE(fn, nullptr);
    auto exec = g->compile({o->output(0)});
    g_executed = 0;
    exec->feed("x", Tensor(TensorShape{2}, dtype::Float32())).run();
    EXPECT_EQ(g_executed, 1) << "the CPU kernel is the operator's execute()";
}

TEST(KernelRegistry, MissingDeviceKernelIsAClearGraphError) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2});
    auto* o = make_test_opr(*g, x, "TestRegistryNoCuda");
    EXPECT_FALSE(has_kernel("TestRegistryNoCuda", Device::Kind::CUDA));
    // Make sure the registry has some CUDA kernel so the message is the per-operator one.
    register_kernel("TestRegistryWithCuda", Device::Kind::CUDA, &fake_cuda_kernel);
    try {
        resolve_kernel(*o, Device::Kind::CUDA, "cuda0");
        FAIL() << "expected GraphError";
    } catch (const GraphError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("TestRegistryNoCuda \"t\""), std::string::npos) << msg;
        EXPECT_NE(msg.find("no CUDA kernel"), std::string::npos) << msg;
        EXPECT_NE(msg.find("comp node cuda0"), std::string::npos) << msg;
    }
    auto* with = make_test_opr(*g, x, "TestRegistryWithCuda");
    EXPECT_EQ(resolve_kernel(*with, Device::Kind::CUDA, "cuda0"), &fake_cuda_kernel);
}

TEST(KernelRegistry, RegisteredCpuKernelOverridesExecute) {
    register_kernel("TestRegistryCpuOverride", Device::Kind::CPU, &doubling_cpu_kernel);
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2});
    auto* o = make_test_opr(*g, x, "TestRegistryCpuOverride");
    EXPECT_EQ(resolve_kernel(*o, Device::Kind::CPU, "cpu0"), &doubling_cpu_kernel);
    auto exec = g->compile({o->output(0)});
    Tensor xv(TensorShape{2}, dtype::Float32());
    xv.ptr<float>()[0] = 1.5f;
    xv.ptr<float>()[1] = -4.f;
    g_executed = 0;
    exec->feed("x", xv).run();
    EXPECT_EQ(g_executed, 0);
    EXPECT_EQ(exec->output(0).at(0), 3.0);
    EXPECT_EQ(exec->output(0).at(1), -8.0);
}

#if BRAID_WITH_CUDA
TEST(KernelRegistry, FirstOperatorsHaveCudaKernels) {
    register_all_operators();
    for (const char* type :
         {"Input", "ImmutableTensor", "SharedParam", "Elemwise", "Reshape", "GetVarShape",
          "Broadcast", "TypeCvt", "MatMul", "Reduce", "ParamUpdate", "Copy"})
        EXPECT_TRUE(has_kernel(type, Device::Kind::CUDA)) << type << " has no CUDA kernel";
}
#endif

TEST(DeviceMarker, IsEmptyAndFreeOnCpuCompNodes) {
    CompNode cpu = CompNode::load("cpu0");
    DeviceMarker marker;
    cpu.record_marker(marker);
    EXPECT_TRUE(marker.empty()) << "CPU work is done when its task returns";
    cpu.wait_marker(marker); // returns at once
    DeviceMarker moved(std::move(marker));
    EXPECT_TRUE(moved.empty());
}

TEST(CopyOpr, CopiesBetweenCpuCompNodesAndBackpropagates) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto cpu1 = CompNode::load("cpu1");
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto y = opr::Copy::make(x, cpu1);
    EXPECT_EQ(y.comp_node(), cpu1);
    EXPECT_EQ(opr::Copy::make(y, cpu1), y) << "a copy to the var's own comp node is the var";
    auto loss = opr::reduce_sum(y * y);
    auto dx = grad(loss, x);
    EXPECT_EQ(dx.comp_node(), x.comp_node());
    auto exec = g->compile({y, dx});
    Tensor xv(TensorShape{3}, dtype::Float32());
    for (int i = 0; i < 3; ++i) xv.ptr<float>()[i] = float(i + 1);
    exec->feed("x", xv).run();
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(exec->output(0).at(i), double(i + 1));
        EXPECT_EQ(exec->output(1).at(i), 2.0 * double(i + 1));
    }
}

TEST(CopyOpr, CpuCompNodesShareHostMemoryAndNeedNoCopy) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {3});
    auto y =
        opr::Elemwise::make(opr::ElemMode::NEG, {x}, OperatorConfig::on(CompNode::load("cpu1")));
    EXPECT_EQ(y.node()->owner()->input(0), x.node()) << "no Copy between cpu0 and cpu1";
}
