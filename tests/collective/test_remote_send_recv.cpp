// RemoteSend / RemoteRecv on the local backend: values of every dtype and a few shapes, in one
// graph with two comp nodes and as two graphs on threads (the receiver's shape then comes from
// the group manager); gradients in both directions; and the errors: a peer that never comes,
// a dtype or shape the two sides disagree on.
#include "checker.h"

#include "collective/remote_send_recv.h"
#include "comm/group_client.h"
#include "graph/grad.h"
#include "tests/support/error_text.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

using namespace braid;
using braid::testing::error_of;
using namespace braid::test;

namespace {

std::shared_ptr<comm::GroupClient> fresh_client() {
    return std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
}

CompNode cpu(int i) {
    return CompNode::load(fmt::format("cpu{}", i));
}
OperatorConfig on_cpu(int i) {
    return OperatorConfig::on(cpu(i));
}

//! The message of the braid::Error `body` throws ("" when it throws none).
//! Sets BRAID_COMM_TIMEOUT for the scope of a test.
struct ShortTimeout {
    explicit ShortTimeout(const char* seconds) { setenv("BRAID_COMM_TIMEOUT", seconds, 1); }
    ~ShortTimeout() { unsetenv("BRAID_COMM_TIMEOUT"); }
};

} // namespace

class RemoteSendRecv : public ::testing::Test {
protected:
    void SetUp() override { register_all_operators(); }
};

TEST_F(RemoteSendRecv, EveryDtypeAndShapeInOneGraph) {
    std::mt19937 rng(3);
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int32(),
                     dtype::Int64(), dtype::Int8(), dtype::Uint8()})
        for (TensorShape shape : {TensorShape{7}, TensorShape{2, 3, 4}, TensorShape{0, 5}}) {
            SCOPED_TRACE(fmt::format("{} {}", dt.name(), shape.to_string()));
            auto client = fresh_client();
            auto g = ComputingGraph::make();
            auto x = opr::Input::make(*g, "x", dt, shape, cpu(0));
            auto sent = opr::remote_send(x, "t", 1, client);
            auto y = opr::remote_recv(*g, "t", 0, dt, client, "local", on_cpu(1));
            auto exec = g->compile(std::vector<OutputSpec>{sent, y});
            EXPECT_EQ(y.shape(), shape); // static: from the sender in this graph
            Tensor value = random_tensor(shape, dt, rng);
            exec->feed("x", value);
            for (int run = 0; run < 2; ++run) { // the pair's communicator is reused
                exec->run();
                expect_tensor_near(exec->output(1), value, 0, 0, "received");
                EXPECT_EQ(exec->output(0).shape(), TensorShape{1});
                EXPECT_EQ(exec->output(0).ptr<float>()[0], 0.f);
            }
        }
}

TEST_F(RemoteSendRecv, TwoGraphsOnThreadsLearnTheShapeFromTheGroupManager) {
    auto client = fresh_client();
    std::mt19937 rng(5);
    Tensor value = random_tensor({3, 5}, dtype::Float32(), rng);
    Tensor received;
    TensorShape static_shape;
    std::string errors[2];
    // The receiver is built first: its compile waits for the sender's published shape. Each
    // side has its own comp node (one worker thread each), as ranks do.
    std::thread receiver([&] {
        errors[1] = error_of([&] {
            auto g = ComputingGraph::make();
            auto y = opr::remote_recv(*g, "pair", 0, dtype::Float32(), client, "local", on_cpu(1));
            auto exec = g->compile({y});
            static_shape = y.shape();
            exec->run();
            received = exec->output(0).copy();
        });
    });
    std::thread sender([&] {
        errors[0] = error_of([&] {
            auto g = ComputingGraph::make();
            auto x = opr::Input::make(*g, "x", dtype::Float32(), {3, 5}, cpu(0));
            auto exec = g->compile({opr::remote_send(x, "pair", 1, client)});
            exec->feed("x", value);
            exec->run();
        });
    });
    receiver.join();
    sender.join();
    ASSERT_EQ(errors[0], "");
    ASSERT_EQ(errors[1], "");
    EXPECT_EQ(static_shape, TensorShape({3, 5}));
    expect_tensor_near(received, value, 0, 0, "received");
}

TEST_F(RemoteSendRecv, GradientsFlowBackToTheSender) {
    // Rank 0: h = x * a, sent. Rank 1: r = recv, loss = sum(r * w). Then
    // d loss / d x = a * w (through the gradient recv on rank 0), d loss / d w = x * a.
    auto client = fresh_client();
    std::mt19937 rng(7);
    Tensor xv = random_tensor({4, 3}, dtype::Float32(), rng);
    Tensor av = random_tensor({4, 3}, dtype::Float32(), rng);
    Tensor wv = random_tensor({4, 3}, dtype::Float32(), rng);
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 3}, cpu(0));
    auto a = opr::Input::make(*g, "a", dtype::Float32(), {4, 3}, cpu(0));
    auto w = opr::Input::make(*g, "w", dtype::Float32(), {4, 3}, cpu(1));
    auto sent = opr::remote_send(x * a, "h", 1, client);
    auto r = opr::remote_recv(*g, "h", 0, dtype::Float32(), client, "local", on_cpu(1));
    auto loss = opr::reduce_sum(r * w, {0, 1}, false);
    auto gw = grad(loss, w);                      // rank 1: also sends d loss / d r back
    auto gx = grad(sent, x);                      // rank 0: receives it
    auto exec = g->compile({sent, gx, gw, loss}); // the send runs too
    exec->feed("x", xv);
    exec->feed("a", av);
    exec->feed("w", wv);
    exec->run();
    const float *xp = xv.ptr<float>(), *ap = av.ptr<float>(), *wp = wv.ptr<float>();
    const float* gxp = exec->output(1).ptr<float>();
    const float* gwp = exec->output(2).ptr<float>();
    double expected_loss = 0;
    for (size_t i = 0; i < 12; ++i) {
        EXPECT_NEAR(gxp[i], ap[i] * wp[i], 1e-6) << i;
        EXPECT_NEAR(gwp[i], xp[i] * ap[i], 1e-6) << i;
        expected_loss += double(xp[i]) * ap[i] * wp[i];
    }
    EXPECT_NEAR(exec->output(3).ptr<float>()[0], expected_loss, 1e-5);
}

TEST_F(RemoteSendRecv, APeerThatNeverComesIsADeadlineErrorNamingIt) {
    ShortTimeout timeout("0.3");
    auto client = fresh_client();
    {
        auto g = ComputingGraph::make();
        auto x = opr::Input::make(*g, "x", dtype::Float32(), {2});
        auto exec = g->compile({opr::remote_send(x, "lonely-send", 3, client)});
        exec->feed("x", Tensor(TensorShape{2}, dtype::Float32()));
        std::string e = error_of([&] { exec->run(); });
        EXPECT_NE(e.find("RemoteSend \"lonely-send\" to rank 3"), std::string::npos) << e;
        EXPECT_NE(e.find("never arrived"), std::string::npos) << e;
    }
    {
        // Without a sender the receiver cannot even learn its shape.
        auto g = ComputingGraph::make();
        auto y = opr::remote_recv(*g, "lonely-recv", 2, dtype::Float32(), client);
        std::string e = error_of([&] { g->compile({y}); });
        EXPECT_NE(e.find("RemoteRecv \"lonely-recv\" from rank 2"), std::string::npos) << e;
        EXPECT_NE(e.find("never published its shape"), std::string::npos) << e;
    }
    {
        // With its shape stated, it waits at run time, and its deadline ends that wait.
        auto g = ComputingGraph::make();
        opr::RemoteParam p;
        p.key = "lonely-recv-2";
        p.peer = 4;
        p.shape = TensorShape{2};
        p.group_client = client;
        auto exec = g->compile({opr::RemoteRecv::make(*g, p)});
        std::string e = error_of([&] { exec->run(); });
        EXPECT_NE(e.find("RemoteRecv \"lonely-recv-2\" from rank 4"), std::string::npos) << e;
    }
}

TEST_F(RemoteSendRecv, SidesThatDisagreeFailWithBothDescriptions) {
    ShortTimeout timeout("5");
    auto client = fresh_client();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 2}, cpu(0));
    auto sent = opr::remote_send(x, "mismatch", 1, client);
    opr::RemoteParam p;
    p.key = "mismatch";
    p.peer = 0;
    p.dtype = dtype::Int32();
    p.group_client = client;
    auto y = opr::RemoteRecv::make(*g, p, on_cpu(1));
    auto exec = g->compile(std::vector<OutputSpec>{sent, y});
    exec->feed("x", Tensor(TensorShape{2, 2}, dtype::Float32()));
    std::string e = error_of([&] { exec->run(); });
    EXPECT_NE(e.find("the sender sends float32 {2,2}, the receiver expects int32 {2,2}"),
              std::string::npos)
        << e;

    // A send declared with one dtype refuses an input of another when it is built.
    auto g2 = ComputingGraph::make();
    auto x2 = opr::Input::make(*g2, "x", dtype::Int32(), {2, 2});
    opr::RemoteParam q;
    q.key = "bad-dtype";
    q.group_client = client;
    std::string e2 = error_of([&] { opr::RemoteSend::make(x2, q); });
    EXPECT_NE(e2.find("input \"x\" is int32, but the send was declared float32"), std::string::npos)
        << e2;
}
