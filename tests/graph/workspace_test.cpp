// Operators' workspaces (memory/workspace.h): the memory plan places each in its comp node's
// arena for its step alone, never over a var alive at that step, and the kernel gets that
// memory; without a plan, or where the plan holds less than the kernel asks for, the workspace
// allocates its own and keeps it for the next run.
#include "braid.h"
#include "memory/workspace.h"
#include "tests/support/memory_plan_check.h"

#include <gtest/gtest.h>

using namespace braid;

namespace {

/*!
 * y = x + 1, computed through its workspace: every byte of it is overwritten, x + 1 goes to its
 * start and y is copied from there. A workspace placed over a var still alive at the step
 * corrupts that var; the kernel records what it was given.
 */
class ScratchAddOne final : public OperatorNode {
public:
    struct Seen {
        const uint8_t* data = nullptr;
        size_t own_bytes = 0; //!< the workspace's own allocation after the kernel asked
    };
    ScratchAddOne(VarNode* x, size_t bytes, std::shared_ptr<std::vector<Seen>> seen,
                  const OperatorConfig& cfg)
        : OperatorNode(cfg), m_bytes(bytes), m_seen(std::move(seen)) {
        add_input(x);
        add_output();
    }
    const char* type_name() const override { return "ScratchAddOne"; }
    bool allow_dedup() const override { return false; }
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override {
        if (!ctx.shape(0)) return false;
        out[0] = *ctx.shape(0);
        return true;
    }
    ValueInference value_inference() const override { return ValueInference::NONE; }
    size_t workspace_bytes() const override { return m_bytes; }
    void execute(ExecCtx& ctx) override {
        const Tensor& x = ctx.input(0);
        size_t n = x.shape().total_nr_elems();
        uint8_t* w = ctx.workspace().get(m_bytes);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(w) % Workspace::ALIGNMENT, 0u);
        std::memset(w, 0xab, m_bytes);
        auto* t = reinterpret_cast<float*>(w);
        for (size_t i = 0; i < n; ++i) t[i] = x.ptr<float>()[i] + 1;
        for (size_t i = 0; i < n; ++i) ctx.output(0).ptr<float>()[i] = t[i];
        m_seen->push_back({w, ctx.workspace().own_bytes()});
    }

private:
    size_t m_bytes;
    std::shared_ptr<std::vector<Seen>> m_seen;
};

SymbolVar scratch_add_one(SymbolVar x, size_t bytes,
                          const std::shared_ptr<std::vector<ScratchAddOne::Seen>>& seen) {
    return x.graph()
        .insert_opr(std::make_unique<ScratchAddOne>(x.node(), bytes, seen, OperatorConfig()))
        ->output(0);
}

struct Built {
    std::unique_ptr<Executable> exec;
    std::shared_ptr<std::vector<ScratchAddOne::Seen>> seen;
};

//! a = x + 1, b = a + 1, c = a + b, out = c + 1: `a` is alive during b's step, so a workspace
//! placed over it shows in the output (2x + 4).
Built build(bool plan, size_t bytes) {
    register_all_operators();
    auto g = ComputingGraph::make({});
    g->options().enable_memory_plan = plan;
    g->options().enable_fusion = false;
    Built b;
    b.seen = std::make_shared<std::vector<ScratchAddOne::Seen>>();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {256});
    auto a = scratch_add_one(x * 1.f, bytes, b.seen);
    auto c = a + scratch_add_one(a, bytes, b.seen);
    b.exec = g->compile({scratch_add_one(c, bytes, b.seen)});
    return b;
}

Tensor input() {
    Tensor x(TensorShape{256}, dtype::Float32());
    for (size_t i = 0; i < 256; ++i) x.ptr<float>()[i] = float(i) * 0.5f - 3;
    return x;
}

void expect_output(Executable& exec) {
    const Tensor& y = exec.output(0);
    for (size_t i = 0; i < 256; ++i)
        ASSERT_EQ(y.ptr<float>()[i], 2 * (float(i) * 0.5f - 3) + 4) << "element " << i;
}

} // namespace

TEST(Workspace, HandsOutThePlannedMemoryElseAllocatesAndKeepsItsOwn) {
    Tensor arena(TensorShape{4096}, dtype::Uint8());
    Workspace ws;
    EXPECT_EQ(ws.get(0), nullptr);
    ws.assign(Tensor(arena.storage(), 1024, TensorLayout({2048}, dtype::Uint8())));
    EXPECT_EQ(ws.planned_bytes(), 2048u);
    EXPECT_EQ(ws.get(2048), arena.raw_ptr() + 1024);
    EXPECT_EQ(ws.own_bytes(), 0u);
    uint8_t* own = ws.get(3000); // more than planned
    EXPECT_NE(own, arena.raw_ptr() + 1024);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(own) % Workspace::ALIGNMENT, 0u);
    EXPECT_GE(ws.own_bytes(), 3000u);
    EXPECT_EQ(ws.get(2500), own) << "the own allocation is kept for later calls";
    EXPECT_EQ(ws.get(100), arena.raw_ptr() + 1024) << "the planned memory first";
    ws.assign(Tensor());
    EXPECT_EQ(ws.own_bytes(), 0u) << "a new plan releases the own allocation";
}

TEST(Workspace, ThePlanPlacesEachForItsStepAloneAndTheKernelRunsInIt) {
    const size_t bytes = 4096 + 64; // above the vars' 1 KiB, so it cannot hide in their gaps
    auto b = build(true, bytes);
    for (int run = 0; run < 2; ++run) {
        b.exec->feed("x", input()).run();
        expect_output(*b.exec);
    }
    const auto& node = b.exec->memory_report().nodes.at(0);
    EXPECT_EQ(node.nr_workspaces, 3u);
    EXPECT_EQ(node.workspace_bytes, 3 * bytes);
    size_t placed = 0;
    for (const auto& p : node.placements)
        if (p.workspace) {
            ++placed;
            EXPECT_EQ(p.lifetime_end, p.lifetime_begin + 1) << p.name;
            EXPECT_NE(p.name.find("ScratchAddOne"), std::string::npos) << p.name;
        }
    EXPECT_EQ(placed, 3u);
    braid::testing::check_plan(*b.exec); // no workspace over a var alive at its step
    // The arena holds them: no kernel allocated its own.
    ASSERT_EQ(b.seen->size(), 6u);
    for (const auto& s : *b.seen) EXPECT_EQ(s.own_bytes, 0u);
    // Steps apart, the three reuse the same bytes: the arena is far below their sum.
    EXPECT_LT(node.arena_bytes, 2 * bytes);
}

TEST(Workspace, WithoutAPlanEachStepAllocatesItsOwnOnceAndKeepsIt) {
    auto b = build(false, 4096);
    for (int run = 0; run < 2; ++run) {
        b.exec->feed("x", input()).run();
        expect_output(*b.exec);
    }
    EXPECT_EQ(b.exec->memory_report().nodes.at(0).nr_workspaces, 0u);
    ASSERT_EQ(b.seen->size(), 6u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_GE((*b.seen)[i].own_bytes, 4096u);
        EXPECT_EQ((*b.seen)[i].data, (*b.seen)[i + 3].data) << "step " << i << " kept its own";
    }
}
