// Every operator with a CUDA kernel, run on cuda0 and compared with the same graph on cpu0
// over several shapes (odd sizes, broadcasting, strided views) and dtypes. Skipped when no CUDA
// device is present (the registry check runs everywhere).
#include "cuda_checker.h"
#include "graph/kernel_registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

using namespace braid;
using namespace braid::test;

namespace {

const std::vector<std::pair<TensorShape, TensorShape>> kBinaryShapes = {
    {{3, 4}, {3, 4}},
    {{3, 4}, {4}},
    {{3, 1}, {1, 4}},
    {{2, 3, 4}, {3, 1}},
    {{5}, {}},
    {{}, {5}},
    {{}, {}},
    {{0, 3}, {3}},
    {{2, 1, 4}, {2, 3, 1}},
    {{1000}, {1000}},
    {{4097, 3}, {4097, 3}},
    {{33, 65}, {65}},
};

} // namespace

TEST(CudaElemwise, BinaryModesMatchCpuWithBroadcasting) {
    BRAID_REQUIRE_CUDA();
    using opr::ElemMode;
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()})
        for (ElemMode mode : {ElemMode::ADD, ElemMode::SUB, ElemMode::MUL, ElemMode::TRUE_DIV,
                              ElemMode::MAX, ElemMode::MIN})
            for (auto& [sa, sb] : kBinaryShapes) {
                auto c = make_case(std::string(opr::elem_mode_name(mode)) + " " + dt.name() + " " +
                                       sa.to_string() + " " + sb.to_string(),
                                   {sa, sb}, {dt, dt}, [mode](const SymbolVarArray& in) {
                                       return SymbolVarArray{opr::Elemwise::make(mode, in)};
                                   });
                set_tolerance(c, dt);
                check_cuda_matches_cpu(c);
            }
}

TEST(CudaElemwise, UnaryModesMatchCpu) {
    BRAID_REQUIRE_CUDA();
    using opr::ElemMode;
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()})
        for (ElemMode mode : {ElemMode::NEG, ElemMode::ABS, ElemMode::RELU, ElemMode::EXP,
                              ElemMode::LOG, ElemMode::TANH, ElemMode::SIGMOID})
            for (TensorShape s :
                 {TensorShape{7, 5}, TensorShape{}, TensorShape{0}, TensorShape{3, 1001}}) {
                auto c = make_case(std::string(opr::elem_mode_name(mode)) + " " + dt.name() + " " +
                                       s.to_string(),
                                   {s}, {dt}, [mode](const SymbolVarArray& in) {
                                       return SymbolVarArray{opr::Elemwise::make(mode, in)};
                                   });
                if (mode == ElemMode::LOG) c.low = 0.1;
                set_tolerance(c, dt);
                if (dt == dtype::Float32()) c.rtol = 1e-5; // expf/logf/tanhf: a few ulp
                check_cuda_matches_cpu(c);
            }
}

TEST(CudaElemwise, IntegerModesMatchCpu) {
    BRAID_REQUIRE_CUDA();
    using opr::ElemMode;
    for (DType dt : {dtype::Int32(), dtype::Int64()}) {
        for (ElemMode mode : {ElemMode::ADD, ElemMode::SUB, ElemMode::MUL, ElemMode::MAX,
                              ElemMode::MIN, ElemMode::FLOOR_DIV})
            for (auto& [sa, sb] : kBinaryShapes) {
                auto c = make_case(std::string(opr::elem_mode_name(mode)) + " " + dt.name() + " " +
                                       sa.to_string() + " " + sb.to_string(),
                                   {sa, sb}, {dt, dt}, [mode](const SymbolVarArray& in) {
                                       return SymbolVarArray{opr::Elemwise::make(mode, in)};
                                   });
                c.low = -50;
                c.high = 50;
                if (mode == ElemMode::FLOOR_DIV)
                    c.fill = [](std::mt19937& rng, Tensor& t, size_t idx) {
                        std::uniform_int_distribution<int> d(1, 9);
                        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) {
                            int v = d(rng) * (d(rng) % 2 ? 1 : -1);
                            store_from_double(t.dtype(), t.raw_ptr(), i,
                                              idx == 0 ? v * 7 + d(rng) : v);
                        }
                    };
                set_tolerance(c, dt);
                check_cuda_matches_cpu(c);
            }
        for (ElemMode mode : {ElemMode::NEG, ElemMode::ABS, ElemMode::RELU}) {
            auto c = make_case(std::string(opr::elem_mode_name(mode)) + " " + dt.name(), {{17, 3}},
                               {dt}, [mode](const SymbolVarArray& in) {
                                   return SymbolVarArray{opr::Elemwise::make(mode, in)};
                               });
            c.low = -50;
            c.high = 50;
            check_cuda_matches_cpu(c);
        }
    }
}

TEST(CudaElemwise, IntegerDivisionByZeroIsAnErrorAsOnCpu) {
    BRAID_REQUIRE_CUDA();
    register_all_operators();
    GraphOptions options;
    options.default_comp_node = "cuda0";
    auto g = ComputingGraph::make(options);
    auto a = opr::Input::make(*g, "a", dtype::Int32(), {3});
    auto b = opr::Input::make(*g, "b", dtype::Int32(), {3});
    auto exec = g->compile({a / b});
    Tensor ta(TensorShape{3}, dtype::Int32()), tb(TensorShape{3}, dtype::Int32());
    for (int i = 0; i < 3; ++i) {
        ta.ptr<int32_t>()[i] = 5;
        tb.ptr<int32_t>()[i] = i; // element 0 divides by zero
    }
    exec->feed("a", ta).feed("b", tb);
    EXPECT_THROW(exec->run(), ValueError); // as the CPU kernel throws
    tb.ptr<int32_t>()[0] = 2;
    exec->feed("b", tb);
    exec->run();
    EXPECT_EQ(exec->output(0).at(0), 2);
    EXPECT_EQ(exec->output(0).at(2), 2);
}

TEST(CudaReduce, ModesAxesAndDtypesMatchCpu) {
    BRAID_REQUIRE_CUDA();
    using opr::ReduceMode;
    struct Axes {
        TensorShape shape;
        std::vector<int> axes;
    };
    std::vector<Axes> cases = {
        {{4, 5}, {1}},        {{4, 5}, {0}},          {{4, 5}, {}},       {{2, 3, 4}, {0, 2}},
        {{2, 3, 4}, {1, 2}},  {{2, 3, 4}, {-1}},      {{3, 100000}, {1}}, {{100000, 3}, {0}},
        {{1000, 1000}, {}},   {{7, 0, 3}, {1}},       {{}, {}},           {{2, 3, 4, 5}, {0, 1, 3}},
        {{1, 70000, 2}, {1}}, {{5000, 7, 3}, {0, 2}}, {{6}, {0}},
    };
    for (DType dt :
         {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int32(), dtype::Int64()})
        for (ReduceMode mode :
             {ReduceMode::SUM, ReduceMode::MEAN, ReduceMode::MAX, ReduceMode::MIN})
            for (auto& ax : cases)
                for (bool keepdims : {false, true}) {
                    bool empty_axis = false;
                    for (int a : ax.axes)
                        empty_axis |= ax.shape[size_t(a < 0 ? a + int(ax.shape.ndim()) : a)] == 0;
                    if (empty_axis && (mode == ReduceMode::MAX || mode == ReduceMode::MIN))
                        continue;
                    std::string axes;
                    for (int a : ax.axes) axes += std::to_string(a) + ",";
                    auto c = make_case(std::string(opr::reduce_mode_name(mode)) + " " + dt.name() +
                                           " " + ax.shape.to_string() + " axes " + axes +
                                           (keepdims ? " keepdims" : ""),
                                       {ax.shape}, {dt}, [=](const SymbolVarArray& in) {
                                           return SymbolVarArray{
                                               opr::Reduce::make(in[0], {mode, ax.axes, keepdims})};
                                       });
                    set_tolerance(c, dt);
                    if (dt == dtype::Float32()) {
                        // float32 accumulation on the GPU vs double on the CPU.
                        c.rtol = 1e-4;
                        c.atol = 1e-3;
                    }
                    if (!dt.is_float()) {
                        c.low = -100;
                        c.high = 100;
                    }
                    check_cuda_matches_cpu(c);
                }
}

TEST(CudaTypeCvt, EveryDtypePairMatchesCpu) {
    BRAID_REQUIRE_CUDA();
    std::vector<DType> all = {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int8(),
                              dtype::Uint8(),   dtype::Int32(),   dtype::Int64(),    dtype::Bool()};
    for (DType from : all)
        for (DType to : all) {
            auto c = make_case(std::string(from.name()) + " -> " + to.name(), {{1000}}, {from},
                               [to](const SymbolVarArray& in) {
                                   return SymbolVarArray{opr::TypeCvt::make(in[0], to)};
                               });
            c.low = -300;
            c.high = 300;
            if (from == dtype::Float32())
                c.fill = [](std::mt19937& rng, Tensor& t, size_t) {
                    // Include saturating, rounding and NaN cases.
                    std::uniform_real_distribution<float> d(-1e5f, 1e5f);
                    float* p = t.ptr<float>();
                    for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) p[i] = d(rng);
                    p[0] = NAN;
                    p[1] = 1e30f;
                    p[2] = -1e30f;
                    p[3] = 0.5f;
                    p[4] = -2.5f;
                    p[5] = 65519.f;
                    p[6] = 1e-7f;
                };
            c.rtol = c.atol = 0; // conversions are exact rules
            check_cuda_matches_cpu(c);
        }
}

TEST(CudaTensorManip, BroadcastReshapeAndShapesMatchCpu) {
    BRAID_REQUIRE_CUDA();
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::Int32(), dtype::Int64()}) {
        check_cuda_matches_cpu(make_case(std::string("broadcast ") + dt.name(), {{3, 1, 4}}, {dt},
                                         [](const SymbolVarArray& in) {
                                             return SymbolVarArray{in[0].broadcast({2, 3, 5, 4})};
                                         }));
        check_cuda_matches_cpu(make_case(std::string("broadcast scalar ") + dt.name(), {{}}, {dt},
                                         [](const SymbolVarArray& in) {
                                             return SymbolVarArray{in[0].broadcast({6, 7})};
                                         }));
        check_cuda_matches_cpu(make_case(
            std::string("reshape ") + dt.name(), {{6, 4}}, {dt}, [](const SymbolVarArray& in) {
                return SymbolVarArray{in[0].reshape({2, -1, 3}), in[0].reshape({24})};
            }));
    }
    // Shape values computed on the device, used by reshape and broadcast, and fetched.
    check_cuda_matches_cpu(make_case("reshape/broadcast to another var's shape",
                                     {{6, 4}, {4, 6}, {4, 1}}, {}, [](const SymbolVarArray& in) {
                                         return SymbolVarArray{in[0].reshape(in[1].symshape()),
                                                               in[2].broadcast(in[1].symshape()),
                                                               in[1].symshape()};
                                     }));
}

TEST(CudaSources, ConstantsAndParametersMatchCpu) {
    BRAID_REQUIRE_CUDA();
    register_all_operators();
    std::mt19937 rng(3);
    Tensor w = random_tensor({5, 3}, dtype::Float32(), rng);
    Tensor k = random_tensor({3}, dtype::Float32(), rng);
    auto build = [&](const SymbolVarArray& in) {
        auto& g = in[0].graph();
        auto param = opr::SharedParam::make(g, std::make_shared<Tensor>(w.copy()), "w");
        auto konst = opr::ImmutableTensor::make(g, k);
        return SymbolVarArray{opr::matmul(in[0], param) + konst, param, in[0] * 2.0};
    };
    check_cuda_matches_cpu(make_case("sources", {{4, 5}}, {}, build));
}

TEST(CudaSources, HostParameterChangesBetweenRunsAreSeen) {
    BRAID_REQUIRE_CUDA();
    register_all_operators();
    GraphOptions options;
    options.default_comp_node = "cuda0";
    auto g = ComputingGraph::make(options);
    auto param = std::make_shared<Tensor>(make_tensor({3}, {1, 2, 3}));
    auto y = opr::SharedParam::make(*g, param) * 10.0;
    auto exec = g->compile({y});
    exec->run();
    EXPECT_EQ(exec->output(0).at(2), 30);
    param->ptr<float>()[2] = 5; // a host write between runs
    exec->run();
    EXPECT_EQ(exec->output(0).at(2), 50);
}

TEST(CudaMatMul, Float32Float16AndBFloat16MatchCpu) {
    BRAID_REQUIRE_CUDA();
    struct Dims {
        size_t m, k, n;
    };
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()})
        for (Dims d : {Dims{5, 7, 3}, Dims{1, 1, 1}, Dims{128, 256, 64}, Dims{33, 0, 9},
                       Dims{0, 4, 5}, Dims{300, 17, 129}})
            for (bool ta : {false, true})
                for (bool tb : {false, true}) {
                    TensorShape sa = ta ? TensorShape{d.k, d.m} : TensorShape{d.m, d.k};
                    TensorShape sb = tb ? TensorShape{d.n, d.k} : TensorShape{d.k, d.n};
                    auto c =
                        make_case(std::string("matmul ") + dt.name() + " " + sa.to_string() +
                                      (ta ? "^T" : "") + " x " + sb.to_string() + (tb ? "^T" : ""),
                                  {sa, sb}, {dt, dt}, [=](const SymbolVarArray& in) {
                                      return SymbolVarArray{opr::matmul(in[0], in[1], ta, tb)};
                                  });
                    c.low = -1;
                    c.high = 1;
                    // cuBLAS sums in another order; k up to 256 terms of magnitude <= 1.
                    c.rtol = dt == dtype::Float32() ? 1e-4 : dt == dtype::Float16() ? 5e-3 : 2e-2;
                    c.atol = dt == dtype::Float32() ? 1e-4 : dt == dtype::Float16() ? 5e-3 : 3e-2;
                    check_cuda_matches_cpu(c);
                }
}

TEST(CudaParamUpdate, SgdMomentumAndAdamMatchCpu) {
    BRAID_REQUIRE_CUDA();
    register_all_operators();
    using opr::OptimizerConfig;
    using Kind = OptimizerConfig::Kind;
    std::vector<OptimizerConfig> configs(3);
    configs[0].kind = Kind::SGD;
    configs[0].lr = 0.1f;
    configs[0].weight_decay = 0.01f;
    configs[1].kind = Kind::SGD;
    configs[1].lr = 0.05f;
    configs[1].momentum = 0.9f;
    configs[2].kind = Kind::ADAM;
    configs[2].lr = 0.01f;
    for (const auto& cfg : configs)
        for (bool resident : {false, true}) {
            SCOPED_TRACE(std::string(cfg.kind == Kind::ADAM ? "adam" : "sgd") +
                         (cfg.momentum != 0.f ? " momentum" : "") +
                         (resident ? ", parameter on the device" : ", parameter on the host"));
            std::mt19937 rng(7);
            Tensor w0 = random_tensor({8, 4}, dtype::Float32(), rng);
            Tensor x = random_tensor({16, 8}, dtype::Float32(), rng);
            std::vector<Tensor> final_w, losses;
            for (std::string cn : {"cpu0", "cuda0"}) {
                GraphOptions options;
                options.default_comp_node = cn;
                auto g = ComputingGraph::make(options);
                CompNode node = CompNode::load(cn);
                auto param = std::make_shared<Tensor>(
                    w0.shape(), w0.dtype(), resident ? node.allocator() : CpuAllocator::instance());
                node.copy(*param, w0);
                node.sync();
                auto w = opr::SharedParam::make(*g, param, "w");
                auto in = opr::Input::make(*g, "x", dtype::Float32(), x.shape());
                auto h = opr::matmul(in, w);
                auto loss = opr::reduce_mean(h * h);
                auto updates = opr::minimize(loss, {w}, cfg);
                std::vector<OutputSpec> outs{loss};
                for (auto& u : updates) outs.push_back(u);
                auto exec = g->compile(outs);
                exec->feed("x", x);
                for (int step = 0; step < 5; ++step) exec->run();
                losses.push_back(exec->output(0).copy());
                Tensor host(param->shape(), param->dtype());
                node.copy(host, *param);
                node.sync();
                final_w.push_back(host);
            }
            expect_tensor_near(final_w[1], final_w[0], 1e-4, 1e-5, "parameter after 5 steps");
            expect_tensor_near(losses[1], losses[0], 1e-4, 1e-5, "loss of the 5th step");
        }
}

// ---------------------------------------------------------------- kernels of the later phase
namespace {

//! A fill that gives input `idx` uniform values in [-2, 2) (bools: 0 or 1), except the inputs
//! listed in `bounds`, which get int32 indices in [0, bound).
std::function<void(std::mt19937&, Tensor&, size_t)>
index_fill(std::vector<std::pair<size_t, int>> bounds) {
    return [bounds](std::mt19937& rng, Tensor& t, size_t idx) {
        for (auto& [input, bound] : bounds)
            if (input == idx) {
                std::uniform_int_distribution<int> d(0, bound - 1);
                for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
                    t.ptr<int32_t>()[i] = d(rng);
                return;
            }
        if (t.dtype() == dtype::Bool()) {
            for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
                store_from_double(t.dtype(), t.raw_ptr(), i, double(rng() % 2));
            return;
        }
        t = random_tensor(t.shape(), t.dtype(), rng);
    };
}

OprCase elem_case(opr::ElemMode mode, DType dt, std::vector<TensorShape> shapes) {
    std::string name = std::string(opr::elem_mode_name(mode)) + " " + dt.name();
    for (auto& s : shapes) name += " " + s.to_string();
    std::vector<DType> dtypes(shapes.size(), dt);
    if (mode == opr::ElemMode::WHERE) dtypes[0] = dtype::Bool();
    auto c = make_case(name, shapes, dtypes, [mode](const SymbolVarArray& in) {
        return SymbolVarArray{opr::Elemwise::make(mode, in)};
    });
    set_tolerance(c, dt);
    return c;
}

//! Bool outputs and integer results compare exactly.
void set_exact(OprCase& c) {
    c.rtol = c.atol = 0;
}

bool bool_output(opr::ElemMode m) {
    using M = opr::ElemMode;
    return m == M::LT || m == M::LEQ || m == M::EQ || m == M::NEQ || m == M::LOGICAL_AND ||
           m == M::LOGICAL_OR || m == M::LOGICAL_XOR || m == M::LOGICAL_NOT;
}

const std::vector<std::vector<TensorShape>> kTernaryShapes = {
    {{3, 4}, {3, 4}, {3, 4}},
    {{3, 4}, {}, {}},
    {{3, 1}, {1, 4}, {4}},
    {{2, 3, 4}, {3, 1}, {1}},
    {{0, 2}, {2}, {}},
    {{4097}, {4097}, {4097}},
    {{}, {}, {}},
    {{5, 1, 7}, {1, 6, 1}, {5, 6, 7}},
};

} // namespace

TEST(CudaKernels, EveryCoveredOperatorTypeHasACudaKernel) {
    // Runs without a device: the registry is filled in every CUDA build.
#if !BRAID_WITH_CUDA
    GTEST_SKIP() << "built without CUDA support: no CUDA kernels are registered";
#endif
    register_all_operators();
    for (const char* type : {"Softmax",    "LayerNorm",     "RMSNorm",       "Concat",
                             "Split",      "Subtensor",     "SetSubtensor",  "IncrSubtensor",
                             "Dimshuffle", "AxisAddRemove", "Gather",        "IndexingOneHot",
                             "Embedding",  "ScatterAdd",    "IndexAdd",      "Fill",
                             "Arange",     "Attention",     "BatchedMatMul", "Conv2d",
                             "Elemwise",   "Reduce",        "MatMul",        "TypeCvt",
                             "Broadcast",  "Reshape",       "Copy"})
        EXPECT_TRUE(has_kernel(type, Device::Kind::CUDA)) << type << " has no CUDA kernel";
    // The operators convolutional networks train with.
    for (const char* type : {"Pooling", "PoolingBackward", "BatchNorm", "Conv2dBackwardData",
                             "Conv2dBackwardFilter", "ArgReduce"})
        EXPECT_TRUE(has_kernel(type, Device::Kind::CUDA)) << type << " has no CUDA kernel";
}

TEST(CudaElemwise, EveryFloatModeMatchesCpu) {
    BRAID_REQUIRE_CUDA();
    using M = opr::ElemMode;
    std::vector<M> unary = {M::NEG, M::ABS,   M::SIGN,    M::RELU,  M::EXP,       M::EXPM1,
                            M::LOG, M::LOG1P, M::SQRT,    M::RSQRT, M::SQUARE,    M::SIN,
                            M::COS, M::TANH,  M::SIGMOID, M::GELU,  M::GELU_TANH, M::SILU,
                            M::ERF, M::FLOOR, M::CEIL,    M::ROUND};
    std::vector<M> binary = {M::ADD, M::SUB, M::MUL, M::TRUE_DIV, M::FLOOR_DIV, M::MOD, M::POW,
                             M::MAX, M::MIN, M::LT,  M::LEQ,      M::EQ,        M::NEQ};
    std::vector<M> ternary = {M::CLIP, M::COND_LEQ_MOV, M::FMA3, M::WHERE};
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()}) {
        for (M mode : unary)
            for (TensorShape s : {TensorShape{7, 5}, TensorShape{}, TensorShape{0},
                                  TensorShape{3, 1001}, TensorShape{4099}}) {
                auto c = elem_case(mode, dt, {s});
                if (mode == M::LOG || mode == M::LOG1P || mode == M::SQRT || mode == M::RSQRT) {
                    c.low = 0.1;
                    c.high = 3;
                }
                c.low *= 2; // reach past the rounding and clamping points
                c.high *= 2;
                check_cuda_matches_cpu(c);
            }
        for (M mode : binary)
            for (auto& [sa, sb] : kBinaryShapes) {
                auto c = elem_case(mode, dt, {sa, sb});
                if (bool_output(mode)) set_exact(c);
                if (mode == M::POW || mode == M::FLOOR_DIV || mode == M::MOD)
                    c.fill = [mode](std::mt19937& rng, Tensor& t, size_t idx) {
                        // POW: positive bases; FLOOR_DIV, MOD: divisors away from 0.
                        std::uniform_real_distribution<double> mag(0.25, 3.0);
                        std::bernoulli_distribution neg(0.5);
                        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) {
                            double v = mag(rng);
                            if (!(mode == M::POW && idx == 0) && neg(rng)) v = -v;
                            if (mode != M::POW && idx == 0) v *= 7;
                            store_from_double(t.dtype(), t.raw_ptr(), i, v);
                        }
                    };
                if (mode == M::EQ || mode == M::NEQ)
                    c.fill = [](std::mt19937& rng, Tensor& t, size_t) {
                        // Few distinct values, so that equal pairs occur.
                        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
                            store_from_double(t.dtype(), t.raw_ptr(), i, double(rng() % 3));
                    };
                check_cuda_matches_cpu(c);
            }
        for (M mode : ternary)
            for (auto& shapes : kTernaryShapes) {
                auto c = elem_case(mode, dt, shapes);
                if (mode == M::WHERE) {
                    c.fill = index_fill({});
                    set_exact(c);
                }
                check_cuda_matches_cpu(c);
            }
    }
}

TEST(CudaElemwise, FloatSpecialValuesMatchCpu) {
    BRAID_REQUIRE_CUDA();
    using M = opr::ElemMode;
    // NaN, infinities, signed zeros, ties of rounding and values far out of range.
    const std::vector<float> special = {NAN,    INFINITY, -INFINITY, 0.f,    -0.f,  1.f,
                                        -1.f,   0.5f,     -2.5f,     2.5f,   1e30f, -1e30f,
                                        1e-30f, -3.5f,    100.f,     -100.f, 0.25f, 7.f};
    size_t n = special.size();
    auto fill = [&](std::mt19937&, Tensor& t, size_t idx) {
        // Input 0 walks the list, input 1 walks it in another order: every pair class meets.
        for (size_t i = 0; i < n * n; ++i)
            t.ptr<float>()[i] = idx == 0 ? special[i / n] : special[(i * 7 + 3) % n];
    };
    for (int m = 0; m <= int(M::FMA3); ++m) {
        M mode = M(m);
        if (mode == M::LOGICAL_NOT || mode == M::LOGICAL_AND || mode == M::LOGICAL_OR ||
            mode == M::LOGICAL_XOR || mode == M::WHERE)
            continue;
        size_t arity = opr::elem_mode_arity(mode);
        auto c =
            elem_case(mode, dtype::Float32(), std::vector<TensorShape>(arity, TensorShape{n * n}));
        c.fill = fill;
        c.rtol = 2e-6; // a few ulp: libm and CUDA's math library round differently
        c.atol = 1e-6;
        if (bool_output(mode)) set_exact(c);
        check_cuda_matches_cpu(c);
    }
}

TEST(CudaElemwise, EveryIntegerModeMatchesCpu) {
    BRAID_REQUIRE_CUDA();
    using M = opr::ElemMode;
    std::vector<M> unary = {M::NEG, M::ABS, M::SIGN, M::RELU, M::SQUARE};
    std::vector<M> binary = {M::ADD, M::SUB, M::MUL, M::FLOOR_DIV, M::MOD, M::POW,
                             M::MAX, M::MIN, M::LT,  M::LEQ,       M::EQ,  M::NEQ};
    std::vector<M> ternary = {M::CLIP, M::COND_LEQ_MOV, M::FMA3, M::WHERE};
    for (DType dt : {dtype::Int32(), dtype::Int64()}) {
        for (M mode : unary)
            for (TensorShape s : {TensorShape{17, 3}, TensorShape{}, TensorShape{4099}}) {
                auto c = elem_case(mode, dt, {s});
                c.low = -50;
                c.high = 50;
                check_cuda_matches_cpu(c);
            }
        for (M mode : binary)
            for (auto& [sa, sb] : kBinaryShapes) {
                auto c = elem_case(mode, dt, {sa, sb});
                c.low = -50;
                c.high = 50;
                if (mode == M::FLOOR_DIV || mode == M::MOD || mode == M::POW)
                    c.fill = [mode](std::mt19937& rng, Tensor& t, size_t idx) {
                        std::uniform_int_distribution<int> d(1, 9);
                        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) {
                            int v = d(rng);
                            if (mode == M::POW)
                                v = idx == 0 ? v - 5 : v - 1; // bases -4..4, exponents 0..8
                            else if (idx == 0)
                                v = (v - 5) * 7 + d(rng);
                            else if (d(rng) % 2)
                                v = -v; // a nonzero divisor of either sign
                            store_from_double(t.dtype(), t.raw_ptr(), i, v);
                        }
                    };
                set_exact(c);
                check_cuda_matches_cpu(c);
            }
        for (M mode : ternary)
            for (auto& shapes : kTernaryShapes) {
                auto c = elem_case(mode, dt, shapes);
                c.low = -50;
                c.high = 50;
                if (mode == M::WHERE) c.fill = index_fill({});
                set_exact(c);
                check_cuda_matches_cpu(c);
            }
    }
}

TEST(CudaElemwise, IntegerWrapAndExtremesMatchCpu) {
    BRAID_REQUIRE_CUDA();
    using M = opr::ElemMode;
    for (DType dt : {dtype::Int32(), dtype::Int64()}) {
        // Values that overflow products and sums, the lowest value, and -1 divisors.
        auto fill = [dt](std::mt19937& rng, Tensor& t, size_t idx) {
            int64_t lo = dt == dtype::Int32() ? int64_t(INT32_MIN) : INT64_MIN;
            int64_t hi = dt == dtype::Int32() ? int64_t(INT32_MAX) : INT64_MAX;
            std::uniform_int_distribution<int64_t> d(lo, hi);
            for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) {
                // Shifted per input, so that the lowest value meets the divisor -1.
                size_t k = (i + idx) % 5;
                int64_t v = k == 0 ? lo : k == 1 ? -1 : k == 2 ? hi : d(rng);
                if (idx == 1 && v == 0) v = 3;
                if (dt == dtype::Int32())
                    t.ptr<int32_t>()[i] = int32_t(v);
                else
                    t.ptr<int64_t>()[i] = v;
            }
        };
        for (M mode : {M::NEG, M::ABS, M::SQUARE}) {
            auto c = elem_case(mode, dt, {{1000}});
            c.fill = fill;
            check_cuda_matches_cpu(c);
        }
        for (M mode : {M::ADD, M::SUB, M::MUL, M::FLOOR_DIV, M::MOD, M::MAX, M::MIN}) {
            auto c = elem_case(mode, dt, {{1000}, {1000}});
            c.fill = fill;
            check_cuda_matches_cpu(c);
        }
        auto c = elem_case(M::FMA3, dt, {{1000}, {1000}, {1000}});
        c.fill = fill;
        check_cuda_matches_cpu(c);
    }
}

TEST(CudaElemwise, LogicalModesAndWhereOnEveryDtypeMatchCpu) {
    BRAID_REQUIRE_CUDA();
    using M = opr::ElemMode;
    for (M mode : {M::LOGICAL_NOT, M::LOGICAL_AND, M::LOGICAL_OR, M::LOGICAL_XOR, M::EQ, M::NEQ})
        for (auto& [sa, sb] : kBinaryShapes) {
            std::vector<TensorShape> shapes = {sa, sb};
            if (mode == M::LOGICAL_NOT) shapes.pop_back();
            auto c = elem_case(mode, dtype::Bool(), shapes);
            c.fill = index_fill({});
            set_exact(c);
            check_cuda_matches_cpu(c);
        }
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int8(),
                     dtype::Uint8(), dtype::Int32(), dtype::Int64(), dtype::Bool()})
        for (auto& shapes : kTernaryShapes) {
            auto c = elem_case(M::WHERE, dt, shapes);
            c.low = -100;
            c.high = 100;
            c.fill = [dt](std::mt19937& rng, Tensor& t, size_t idx) {
                if (idx == 0 || dt == dtype::Bool()) {
                    for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
                        store_from_double(t.dtype(), t.raw_ptr(), i, double(rng() % 2));
                } else {
                    t = random_tensor(t.shape(), t.dtype(), rng, -100, 100);
                }
            };
            set_exact(c);
            check_cuda_matches_cpu(c);
        }
}

TEST(CudaElemwise, IntegerModZeroAndNegativePowerAreErrorsAsOnCpu) {
    BRAID_REQUIRE_CUDA();
    register_all_operators();
    for (opr::ElemMode mode : {opr::ElemMode::MOD, opr::ElemMode::POW}) {
        SCOPED_TRACE(opr::elem_mode_name(mode));
        GraphOptions options;
        options.default_comp_node = "cuda0";
        auto g = ComputingGraph::make(options);
        auto a = opr::Input::make(*g, "a", dtype::Int64(), {3});
        auto b = opr::Input::make(*g, "b", dtype::Int64(), {3});
        auto exec = g->compile({opr::Elemwise::make(mode, {a, b})});
        Tensor ta(TensorShape{3}, dtype::Int64()), tb(TensorShape{3}, dtype::Int64());
        for (int i = 0; i < 3; ++i) {
            ta.ptr<int64_t>()[i] = 5;
            tb.ptr<int64_t>()[i] = mode == opr::ElemMode::MOD ? i : 1 - i; // 0 / -1 at i = 0 / 2
        }
        exec->feed("a", ta).feed("b", tb);
        try {
            exec->run();
            ADD_FAILURE() << "no error";
        } catch (const ValueError& e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find(mode == opr::ElemMode::MOD ? "division by zero"
                                                          : "negative integer exponent"),
                      std::string::npos)
                << msg;
        }
        tb.ptr<int64_t>()[0] = 2;
        tb.ptr<int64_t>()[2] = 2;
        exec->feed("b", tb);
        exec->run();
        EXPECT_EQ(exec->output(0).at(0), mode == opr::ElemMode::MOD ? 1 : 25);
    }
}

TEST(CudaReduce, ProdAndSumOfSquaresMatchCpu) {
    BRAID_REQUIRE_CUDA();
    using opr::ReduceMode;
    struct Axes {
        TensorShape shape;
        std::vector<int> axes;
    };
    std::vector<Axes> cases = {{{4, 5}, {1}},     {{4, 5}, {0}},     {{2, 3, 4}, {0, 2}},
                               {{3, 20000}, {1}}, {{20000, 3}, {0}}, {{7, 0, 3}, {1}},
                               {{}, {}},          {{2, 3, 4, 5}, {}}};
    for (DType dt :
         {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int32(), dtype::Int64()})
        for (ReduceMode mode : {ReduceMode::PROD, ReduceMode::SUM_SQR})
            for (auto& ax : cases) {
                auto c = make_case(
                    std::string(opr::reduce_mode_name(mode)) + " " + dt.name() + " " +
                        ax.shape.to_string(),
                    {ax.shape}, {dt}, [=](const SymbolVarArray& in) {
                        return SymbolVarArray{opr::Reduce::make(in[0], {mode, ax.axes, false})};
                    });
                set_tolerance(c, dt);
                if (dt.is_float()) {
                    c.rtol = std::max(c.rtol, 1e-4);
                    c.atol = std::max(c.atol, 1e-3);
                    if (mode == ReduceMode::PROD)
                        c.fill = [](std::mt19937& rng, Tensor& t, size_t) {
                            // Factors near 1 keep long products finite.
                            std::uniform_real_distribution<double> d(0.999, 1.001);
                            for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
                                store_from_double(t.dtype(), t.raw_ptr(), i,
                                                  i % 2 ? d(rng) : -d(rng));
                        };
                } else {
                    c.low = -100; // integer products and sums wrap, like the CPU's
                    c.high = 100;
                }
                check_cuda_matches_cpu(c);
            }
}

TEST(CudaNormalization, SoftmaxAndLogSoftmaxMatchCpu) {
    BRAID_REQUIRE_CUDA();
    struct Axis {
        TensorShape shape;
        int axis;
    };
    // Rows of a warp (<= 1024), of a block (> 1024), of a 512-thread block (>= 16384), and
    // softmax along a middle or the first axis (one thread per column).
    std::vector<Axis> cases = {{{7, 5}, -1},    {{3, 1500}, 1},    {{2, 70000}, -1}, {{4, 5, 6}, 1},
                               {{4, 5, 6}, 0},  {{2, 3, 4, 5}, 2}, {{0, 5}, -1},     {{1}, 0},
                               {{1030, 33}, 0}, {{9, 1024}, 1},    {{9, 1025}, 1}};
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()})
        for (bool log : {false, true})
            for (auto& a : cases) {
                auto c =
                    make_case(std::string(log ? "log_softmax " : "softmax ") + dt.name() + " " +
                                  a.shape.to_string() + " axis " + std::to_string(a.axis),
                              {a.shape}, {dt}, [=](const SymbolVarArray& in) {
                                  return SymbolVarArray{log ? opr::log_softmax(in[0], a.axis)
                                                            : opr::softmax(in[0], a.axis)};
                              });
                c.low = -8;
                c.high = 8;
                set_tolerance(c, dt);
                if (dt == dtype::Float32()) c.atol = 1e-5; // float32 sums of 70000 terms
                check_cuda_matches_cpu(c);
            }
}

TEST(CudaNormalization, LayerNormAndRmsNormMatchCpu) {
    BRAID_REQUIRE_CUDA();
    struct Norm {
        TensorShape shape;
        size_t ndim;
    };
    std::vector<Norm> cases = {{{4, 10}, 1}, {{3, 4, 5}, 2}, {{2, 2000}, 1},
                               {{5, 7}, 2},  {{0, 8}, 1},    {{2, 3, 17000}, 1}};
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()})
        for (bool layer : {true, false})
            for (int affine = 0; affine < 4; ++affine)
                for (auto& nm : cases) {
                    bool has_w = affine & 1, has_b = affine & 2;
                    std::vector<size_t> dims = nm.shape.dims();
                    TensorShape param(std::vector<size_t>(dims.end() - long(nm.ndim), dims.end()));
                    std::vector<TensorShape> shapes = {nm.shape};
                    if (has_w) shapes.push_back(param);
                    if (has_b) shapes.push_back(param);
                    auto c = make_case(
                        std::string(layer ? "layer_norm " : "rms_norm ") + dt.name() + " " +
                            nm.shape.to_string() + " ndim " + std::to_string(nm.ndim) +
                            (has_w ? " weight" : "") + (has_b ? " bias" : ""),
                        shapes, std::vector<DType>(shapes.size(), dt),
                        [=](const SymbolVarArray& in) {
                            SymbolVar w = has_w ? in[1] : SymbolVar{};
                            SymbolVar b = has_b ? in[has_w ? 2 : 1] : SymbolVar{};
                            return SymbolVarArray{layer
                                                      ? opr::layer_norm(in[0], w, b, nm.ndim, 1e-5f)
                                                      : opr::rms_norm(in[0], w, b, nm.ndim, 1e-6f)};
                        });
                    set_tolerance(c, dt);
                    if (dt == dtype::Float32()) {
                        c.rtol = 1e-5;
                        c.atol = 1e-5; // float32 row sums on the GPU, double on the CPU
                    }
                    check_cuda_matches_cpu(c);
                }
}

TEST(CudaTensorCopies, ConcatAndSplitMatchCpu) {
    BRAID_REQUIRE_CUDA();
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::Int8(), dtype::Int64()}) {
        auto concat = [&](std::string name, std::vector<TensorShape> shapes, int axis) {
            auto c = make_case(
                "concat " + name + " " + dt.name(), shapes, std::vector<DType>(shapes.size(), dt),
                [axis](const SymbolVarArray& in) { return SymbolVarArray{opr::concat(in, axis)}; });
            c.low = -100;
            c.high = 100;
            set_exact(c);
            check_cuda_matches_cpu(c);
        };
        concat("axis 1", {{2, 3}, {2, 5}}, 1);
        concat("axis 0 with an empty part", {{1, 4}, {3, 4}, {0, 4}}, 0);
        concat("three 3-D parts, last axis", {{2, 3, 1}, {2, 3, 4}, {2, 3, 2}}, -1);
        concat("middle axis", {{5, 2, 7}, {5, 1, 7}}, 1);
        concat("one part", {{6}}, 0);
        // A strided input: the transposed view is made contiguous on the device first.
        auto c =
            make_case(std::string("concat of a transposed view ") + dt.name(), {{4, 3}, {2, 4}},
                      {dt, dt}, [](const SymbolVarArray& in) {
                          return SymbolVarArray{opr::concat({opr::transpose(in[0]), in[1]}, 0)};
                      });
        set_exact(c);
        check_cuda_matches_cpu(c);
        // Split: views of the input, fetched directly and read by another kernel.
        auto s = make_case(
            std::string("split ") + dt.name(), {{6, 4}}, {dt}, [](const SymbolVarArray& in) {
                auto rows = opr::split(in[0], 0, std::vector<size_t>{1, 2, 3});
                auto cols = opr::split(in[0], 1, size_t(2));
                return SymbolVarArray{rows[0], rows[1], rows[2],
                                      cols[0], cols[1], opr::concat({cols[1], cols[0]}, 1)};
            });
        set_exact(s);
        check_cuda_matches_cpu(s);
    }
}

TEST(CudaTensorCopies, SubtensorAndSetIncrSubtensorMatchCpu) {
    BRAID_REQUIRE_CUDA();
    using opr::AxisIndex;
    std::vector<std::pair<std::string, std::vector<AxisIndex>>> items = {
        {"rows 1:4", {AxisIndex::slice(0, 1, 4)}},
        {"[1:4, ::2]",
         {AxisIndex::slice(0, 1, 4), AxisIndex::slice(1, std::nullopt, std::nullopt, 2)}},
        {"[-1, ::-1]",
         {AxisIndex::index(0, -1), AxisIndex::slice(1, std::nullopt, std::nullopt, -1)}},
        {"[::-2, 3]",
         {AxisIndex::slice(0, std::nullopt, std::nullopt, -2), AxisIndex::index(1, 3)}},
        {"empty 3:3", {AxisIndex::slice(0, 3, 3)}},
        {"[2, 5]", {AxisIndex::index(0, 2), AxisIndex::index(1, 5)}},
    };
    for (DType dt :
         {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int32(), dtype::Int64()})
        for (auto& [name, it] : items) {
            auto sub = make_case("subtensor " + name + " " + dt.name(), {{5, 6}}, {dt},
                                 [it](const SymbolVarArray& in) {
                                     SymbolVar v = opr::subtensor(in[0], it);
                                     // The view fetched as it is and read by a kernel.
                                     return SymbolVarArray{v, v * v};
                                 });
            sub.low = -50;
            sub.high = 50;
            set_tolerance(sub, dt);
            check_cuda_matches_cpu(sub);
            // The value: the slice's shape (a strided view of another input), one row
            // broadcast over the slice, or a scalar.
            for (int value_kind = 0; value_kind < 3; ++value_kind)
                for (bool incr : {false, true}) {
                    auto c = make_case(
                        std::string(incr ? "incr_subtensor " : "set_subtensor ") + name + " " +
                            dt.name() + " value " + std::to_string(value_kind),
                        {{5, 6}, {5, 6}}, {dt, dt}, [=](const SymbolVarArray& in) {
                            SymbolVar value = opr::subtensor(in[1], it);
                            if (value_kind == 1 && value.shape().ndim() == 2 &&
                                value.shape()[0] > 0)
                                value = opr::subtensor(value, {AxisIndex::index(0, 0)});
                            else if (value_kind == 2)
                                value = opr::reduce_sum(in[1]);
                            return SymbolVarArray{incr ? opr::incr_subtensor(in[0], value, it)
                                                       : opr::set_subtensor(in[0], value, it)};
                        });
                    c.low = -50;
                    c.high = 50;
                    set_tolerance(c, dt);
                    check_cuda_matches_cpu(c);
                }
        }
    // SET moves any dtype.
    for (DType dt : {dtype::Int8(), dtype::Bool(), dtype::Uint8()}) {
        auto c = make_case(std::string("set_subtensor ") + dt.name(), {{5, 6}, {3}}, {dt, dt},
                           [](const SymbolVarArray& in) {
                               return SymbolVarArray{opr::set_subtensor(
                                   in[0], in[1], {AxisIndex::slice(1, 1, 6, 2)})};
                           });
        c.fill = index_fill({});
        if (dt != dtype::Bool()) c.fill = nullptr;
        c.low = 0;
        c.high = 100;
        set_exact(c);
        check_cuda_matches_cpu(c);
    }
}

TEST(CudaTensorCopies, DimshuffleAndAxisAddRemoveMatchCpu) {
    BRAID_REQUIRE_CUDA();
    for (DType dt : {dtype::Float32(), dtype::BFloat16(), dtype::Int64(), dtype::Bool()}) {
        auto c = make_case(std::string("dimshuffle ") + dt.name(), {{2, 3, 4}}, {dt},
                           [](const SymbolVarArray& in) {
                               SymbolVar x = in[0];
                               return SymbolVarArray{
                                   opr::dimshuffle(x, {2, 0, 1}),     // a permutation: a copy
                                   opr::dimshuffle(x, {0, -1, 1, 2}), // a view
                                   opr::dimshuffle(x, {1, -1, 2, 0, -1}),
                                   opr::transpose(x),
                                   opr::expand_dims(x, {0, -1}),
                                   opr::squeeze(opr::expand_dims(x, {1}), {1}),
                                   opr::transpose(opr::transpose(x, {1, 0, 2})) * 1.0};
                           });
        if (dt == dtype::Bool()) {
            c.fill = index_fill({});
            // Bool has no arithmetic: drop the last output's multiplication.
            c.build = [](const SymbolVarArray& in) {
                SymbolVar x = in[0];
                return SymbolVarArray{opr::dimshuffle(x, {2, 0, 1}), opr::transpose(x),
                                      opr::squeeze(opr::expand_dims(x, {1}), {1})};
            };
        }
        set_exact(c);
        check_cuda_matches_cpu(c);
    }
}

TEST(CudaIndexing, GatherOneHotAndEmbeddingMatchCpu) {
    BRAID_REQUIRE_CUDA();
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::Int64(), dtype::Int8()}) {
        auto gather = [&](TensorShape xs, TensorShape is, int axis) {
            size_t a = size_t(axis < 0 ? axis + int(xs.ndim()) : axis);
            auto c = make_case(std::string("gather ") + dt.name() + " " + xs.to_string() + " " +
                                   is.to_string() + " axis " + std::to_string(axis),
                               {xs, is}, {dt, dtype::Int32()}, [axis](const SymbolVarArray& in) {
                                   return SymbolVarArray{opr::gather(in[0], in[1], axis)};
                               });
            c.fill = index_fill({{1, int(xs[a])}});
            set_exact(c);
            check_cuda_matches_cpu(c);
        };
        gather({4, 5}, {4, 3}, 1);
        gather({4, 5}, {7, 5}, 0);
        gather({3, 4, 5}, {3, 9, 5}, 1);
        gather({3, 4, 5}, {3, 4, 2}, -1);
        gather({2, 3}, {2, 0}, 1);
        for (bool keepdims : {false, true}) {
            auto one_hot = [&](TensorShape xs, TensorShape is, int axis) {
                auto c = make_case(std::string("indexing_one_hot ") + dt.name() + " " +
                                       xs.to_string() + " axis " + std::to_string(axis),
                                   {xs, is}, {dt, dtype::Int32()}, [=](const SymbolVarArray& in) {
                                       return SymbolVarArray{
                                           opr::indexing_one_hot(in[0], in[1], axis, keepdims)};
                                   });
                c.fill = index_fill({{1, int(xs[size_t(axis)])}});
                set_exact(c);
                check_cuda_matches_cpu(c);
            };
            one_hot({4, 5}, {4}, 1);
            one_hot({4, 5}, {5}, 0);
            one_hot({3, 7, 2}, {3, 2}, 1);
        }
        for (auto [ts, is] : std::vector<std::pair<TensorShape, TensorShape>>{
                 {{10, 7}, {3, 4}}, {{5, 1}, {6}}, {{3, 33}, {}}, {{4, 3}, {0}}, {{4, 0}, {2}}}) {
            auto c = make_case(std::string("embedding ") + dt.name() + " " + ts.to_string() + " " +
                                   is.to_string(),
                               {ts, is}, {dt, dtype::Int32()}, [](const SymbolVarArray& in) {
                                   return SymbolVarArray{opr::embedding(in[0], in[1])};
                               });
            c.fill = index_fill({{1, int(ts[0])}});
            set_exact(c);
            check_cuda_matches_cpu(c);
        }
    }
}

TEST(CudaIndexing, ScatterAddAndIndexAddMatchCpu) {
    BRAID_REQUIRE_CUDA();
    for (DType dt :
         {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int32(), dtype::Int64()}) {
        auto scatter = [&](TensorShape xs, TensorShape is, int axis) {
            auto c =
                make_case(std::string("scatter_add ") + dt.name() + " " + xs.to_string() + " " +
                              is.to_string() + " axis " + std::to_string(axis),
                          {xs, is, is}, {dt, dtype::Int32(), dt}, [axis](const SymbolVarArray& in) {
                              return SymbolVarArray{opr::scatter_add(in[0], in[1], in[2], axis)};
                          });
            c.fill = index_fill({{1, int(xs[size_t(axis)])}});
            set_tolerance(c, dt);
            if (!dt.is_float()) {
                c.fill = [inner = index_fill({{1, int(xs[size_t(axis)])}})](std::mt19937& rng,
                                                                            Tensor& t, size_t idx) {
                    if (idx == 1) return inner(rng, t, idx);
                    t = random_tensor(t.shape(), t.dtype(), rng, -100, 100);
                };
            }
            check_cuda_matches_cpu(c);
        };
        scatter({5, 4}, {3, 4}, 0);
        scatter({5, 4}, {5, 9}, 1); // repeated indices accumulate
        scatter({2, 6, 3}, {2, 20, 3}, 1);
        scatter({3, 3}, {0, 3}, 0);
        auto index_add = [&](TensorShape xs, size_t m, int axis) {
            TensorShape vs = xs;
            vs[size_t(axis)] = m;
            auto c = make_case(std::string("index_add ") + dt.name() + " " + xs.to_string() +
                                   " m " + std::to_string(m) + " axis " + std::to_string(axis),
                               {xs, {m}, vs}, {dt, dtype::Int32(), dt},
                               [axis](const SymbolVarArray& in) {
                                   return SymbolVarArray{opr::index_add(in[0], in[1], in[2], axis)};
                               });
            set_tolerance(c, dt);
            c.fill = [inner = index_fill({{1, int(xs[size_t(axis)])}}), dt](std::mt19937& rng,
                                                                            Tensor& t, size_t idx) {
                if (idx == 1 || dt.is_float()) return inner(rng, t, idx);
                t = random_tensor(t.shape(), t.dtype(), rng, -100, 100);
            };
            check_cuda_matches_cpu(c);
        };
        index_add({6, 3}, 8, 0); // the embedding gradient's shape: repeated rows
        index_add({4, 5}, 3, 1);
        index_add({2, 7, 3}, 10, 1);
        index_add({6, 3}, 0, 0);
    }
}

TEST(CudaIndexing, OutOfRangeIndexIsAValueErrorAsOnCpu) {
    BRAID_REQUIRE_CUDA();
    register_all_operators();
    struct Case {
        std::string name;
        std::function<SymbolVar(SymbolVar x, SymbolVar idx)> build;
        TensorShape idx_shape;
        std::string expect;
    };
    std::vector<Case> cases = {
        {"gather",
         [](SymbolVar x, SymbolVar i) { return opr::gather(x, i, 1); },
         {4, 3},
         "index 7 at position 4 is out of range for axis 1 of size 5"},
        {"indexing_one_hot",
         [](SymbolVar x, SymbolVar i) { return opr::indexing_one_hot(x, i, 0); },
         {5},
         "index 7 at position 4 is out of range for axis 0 of size 4"},
        {"embedding",
         [](SymbolVar x, SymbolVar i) { return opr::embedding(x, i); },
         {6},
         "id 7 at position 4 is out of range for a table of 4 rows"},
        {"index_add",
         [](SymbolVar x, SymbolVar i) {
             return opr::index_add(x, i, opr::Fill::make(x.graph(), {6, 5}, 1.0, x.dtype()), 0);
         },
         {6},
         "index 7 at position 4 is out of range for axis 0 of size 4"},
    };
    for (auto& tc : cases) {
        SCOPED_TRACE(tc.name);
        GraphOptions options;
        options.default_comp_node = "cuda0";
        auto g = ComputingGraph::make(options);
        auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 5});
        auto idx = opr::Input::make(*g, "idx", dtype::Int32(), tc.idx_shape);
        auto exec = g->compile({tc.build(x, idx)});
        Tensor xv(TensorShape{4, 5}, dtype::Float32()), iv(tc.idx_shape, dtype::Int32());
        for (size_t i = 0; i < 20; ++i) xv.ptr<float>()[i] = float(i);
        for (size_t i = 0; i < iv.shape().total_nr_elems(); ++i)
            iv.ptr<int32_t>()[i] = i == 4 ? 7 : i == 6 ? -1 : int32_t(i % 4);
        exec->feed("x", xv).feed("idx", iv);
        try {
            exec->run();
            ADD_FAILURE() << "no error";
        } catch (const ValueError& e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find(tc.expect), std::string::npos) << msg;
        }
        iv.ptr<int32_t>()[4] = 1; // fixed: runs again on the same executable
        if (iv.shape().total_nr_elems() > 6) iv.ptr<int32_t>()[6] = 2;
        exec->feed("idx", iv);
        exec->run();
    }
}

TEST(CudaFill, FillAndArangeMatchCpu) {
    BRAID_REQUIRE_CUDA();
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int8(),
                     dtype::Uint8(), dtype::Int32(), dtype::Int64(), dtype::Bool()}) {
        auto c = make_case(
            std::string("fill ") + dt.name(), {{3, 5}}, {dt}, [dt](const SymbolVarArray& in) {
                auto& g = in[0].graph();
                return SymbolVarArray{opr::Fill::make(g, {7, 3}, -2.75, dt),
                                      opr::Fill::make(g, {100000}, 1e10, dt), // saturates, rounds
                                      opr::Fill::make(g, {}, 3.5, dt),
                                      opr::Fill::make(g, {0, 4}, 1.0, dt),
                                      opr::full_like(in[0], 0.1), // shape from a shape var
                                      in[0]};
            });
        c.fill = index_fill({});
        set_exact(c);
        check_cuda_matches_cpu(c);
        if (dt == dtype::Bool()) continue;
        auto a = make_case(std::string("arange ") + dt.name(), {{2}}, {dt},
                           [dt](const SymbolVarArray& in) {
                               auto& g = in[0].graph();
                               return SymbolVarArray{
                                   opr::arange(g, 0, 5, 1, dt),   opr::arange(g, 5, 0, -1.5, dt),
                                   opr::arange(g, 0, 1, 0.1, dt), opr::arange(g, -3, 70000, 7, dt),
                                   opr::arange(g, 3, 1, 1, dt),   in[0]};
                           });
        set_exact(a);
        check_cuda_matches_cpu(a);
    }
}

TEST(CudaAttention, OutAndLseMatchCpu) {
    BRAID_REQUIRE_CUDA();
    struct Dims {
        size_t b, h, sq, sk, d, dv;
    };
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()})
        for (Dims s : {Dims{1, 1, 1, 1, 1, 1}, Dims{2, 3, 5, 7, 8, 8}, Dims{1, 2, 33, 33, 64, 64},
                       Dims{2, 1, 40, 17, 16, 24}, Dims{1, 1, 9, 70, 33, 5}, Dims{1, 2, 0, 4, 8, 8},
                       Dims{1, 1, 3, 0, 8, 8}, Dims{1, 1, 130, 300, 128, 96}})
            for (bool causal : {false, true})
                for (std::optional<float> scale : {std::optional<float>{}, std::optional(0.3f)}) {
                    auto c = make_case(
                        std::string("attention ") + dt.name() + " b" + std::to_string(s.b) + " h" +
                            std::to_string(s.h) + " sq" + std::to_string(s.sq) + " sk" +
                            std::to_string(s.sk) + " d" + std::to_string(s.d) + " dv" +
                            std::to_string(s.dv) + (causal ? " causal" : "") +
                            (scale ? " scale" : ""),
                        {{s.b, s.h, s.sq, s.d}, {s.b, s.h, s.sk, s.d}, {s.b, s.h, s.sk, s.dv}},
                        {dt, dt, dt}, [=](const SymbolVarArray& in) {
                            return opr::scaled_dot_product_attention(in[0], in[1], in[2], causal,
                                                                     scale);
                        });
                    set_tolerance(c, dt);
                    if (dt == dtype::Float32()) {
                        c.rtol = 1e-4; // float32 dot products summed in another order
                        c.atol = 1e-5;
                    }
                    check_cuda_matches_cpu(c);
                }
}

TEST(CudaMatMul, BatchedMatMulWithBroadcastBatchDimsMatchesCpu) {
    BRAID_REQUIRE_CUDA();
    struct Shapes {
        TensorShape a, b;
    };
    std::vector<Shapes> cases = {
        {{3, 5, 7}, {3, 7, 4}},
        {{3, 5, 7}, {7, 4}},
        {{5, 7}, {2, 3, 7, 4}},
        {{2, 1, 5, 7}, {1, 3, 7, 4}},
        {{4, 1, 3, 6, 5}, {2, 1, 5, 2}},
        {{1, 5, 7}, {6, 7, 4}},
        {{0, 5, 7}, {7, 4}},
        {{3, 5, 0}, {3, 0, 4}},
        {{2, 64, 128}, {2, 128, 33}},
        {{2, 3, 1, 1}, {3, 1, 1}},
    };
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()})
        for (auto& sh : cases)
            for (bool ta : {false, true})
                for (bool tb : {false, true}) {
                    auto swap_last = [](TensorShape s) {
                        std::swap(s[s.ndim() - 1], s[s.ndim() - 2]);
                        return s;
                    };
                    TensorShape sa = ta ? swap_last(sh.a) : sh.a;
                    TensorShape sb = tb ? swap_last(sh.b) : sh.b;
                    auto c = make_case(
                        std::string("batched_matmul ") + dt.name() + " " + sa.to_string() +
                            (ta ? "^T" : "") + " x " + sb.to_string() + (tb ? "^T" : ""),
                        {sa, sb}, {dt, dt}, [=](const SymbolVarArray& in) {
                            return SymbolVarArray{opr::batched_matmul(in[0], in[1], ta, tb)};
                        });
                    c.low = -1;
                    c.high = 1;
                    c.rtol = dt == dtype::Float32() ? 1e-4 : dt == dtype::Float16() ? 5e-3 : 2e-2;
                    c.atol = dt == dtype::Float32() ? 1e-4 : dt == dtype::Float16() ? 5e-3 : 3e-2;
                    check_cuda_matches_cpu(c);
                }
}

TEST(CudaConv, Conv2dMatchesCpu) {
    BRAID_REQUIRE_CUDA();
    struct Conv {
        TensorShape x, w;
        opr::Conv2dParam p;
    };
    auto param = [](int stride, int pad, int dilation, int groups) {
        opr::Conv2dParam p;
        p.stride_h = p.stride_w = stride;
        p.pad_h = p.pad_w = pad;
        p.dilation_h = p.dilation_w = dilation;
        p.groups = groups;
        return p;
    };
    opr::Conv2dParam uneven;
    uneven.stride_h = 2;
    uneven.stride_w = 1;
    uneven.pad_h = 0;
    uneven.pad_w = 2;
    uneven.dilation_h = 1;
    uneven.dilation_w = 2;
    std::vector<Conv> cases = {
        {{1, 1, 5, 5}, {1, 1, 3, 3}, param(1, 0, 1, 1)},
        {{2, 3, 9, 7}, {4, 3, 3, 3}, param(1, 1, 1, 1)},
        {{2, 4, 10, 11}, {6, 2, 3, 3}, param(2, 1, 1, 2)},
        {{1, 6, 8, 8}, {6, 1, 3, 3}, param(1, 1, 1, 6)}, // depthwise
        {{3, 8, 6, 5}, {5, 8, 1, 1}, param(1, 0, 1, 1)}, // 1x1: no im2col
        {{1, 2, 12, 12}, {3, 2, 3, 3}, param(1, 2, 2, 1)},
        {{2, 3, 9, 10}, {2, 3, 2, 3}, uneven},
        {{0, 3, 5, 5}, {2, 3, 3, 3}, param(1, 0, 1, 1)},
        {{1, 16, 32, 32}, {32, 16, 3, 3}, param(1, 1, 1, 1)},
    };
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::BFloat16()})
        for (auto& cv : cases) {
            auto c = make_case(std::string("conv2d ") + dt.name() + " " + cv.x.to_string() + " * " +
                                   cv.w.to_string() + " stride " + std::to_string(cv.p.stride_h) +
                                   " pad " + std::to_string(cv.p.pad_h) + " groups " +
                                   std::to_string(cv.p.groups),
                               {cv.x, cv.w}, {dt, dt}, [p = cv.p](const SymbolVarArray& in) {
                                   return SymbolVarArray{opr::Conv2d::make(in[0], in[1], p)};
                               });
            c.low = -1;
            c.high = 1;
            c.rtol = dt == dtype::Float32() ? 1e-4 : dt == dtype::Float16() ? 5e-3 : 2e-2;
            c.atol = dt == dtype::Float32() ? 1e-4 : dt == dtype::Float16() ? 5e-3 : 3e-2;
            check_cuda_matches_cpu(c);
        }
}

TEST(CudaGraph, GradientsOfAttentionNormAndEmbeddingMatchCpu) {
    // The backward graphs of the new operators (batched matmuls, masks from Arange and WHERE,
    // scatter-adds, reductions) run entirely on the device.
    BRAID_REQUIRE_CUDA();
    for (bool causal : {false, true}) {
        auto c =
            make_case(std::string("attention block gradients") + (causal ? " causal" : ""),
                      {{2, 2, 6, 8}, {2, 2, 9, 8}, {2, 2, 9, 8}, {8}, {10, 8}, {2, 2, 6}},
                      {dtype::Float32(), dtype::Float32(), dtype::Float32(), dtype::Float32(),
                       dtype::Float32(), dtype::Int32()},
                      [causal](const SymbolVarArray& in) {
                          auto att = opr::scaled_dot_product_attention(in[0], in[1], in[2], causal);
                          SymbolVar h = opr::layer_norm(att[0], in[3], SymbolVar{}, 1);
                          SymbolVar e = opr::embedding(in[4], in[5]);
                          SymbolVar y = opr::softmax(h + e, -1);
                          SymbolVar loss = opr::reduce_sum(y * y) + opr::reduce_sum(att[1] * 0.1);
                          SymbolVarArray wrt = {in[0], in[1], in[2], in[3], in[4]};
                          SymbolVarArray outs = grad(loss, wrt);
                          outs.push_back(loss);
                          return outs;
                      });
        c.fill = index_fill({{5, 10}});
        c.rtol = 1e-4;
        c.atol = 1e-5;
        check_cuda_matches_cpu(c);
    }
}
