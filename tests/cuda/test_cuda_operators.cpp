// Every operator with a CUDA kernel, run on cuda0 and compared with the same graph on cpu0
// over several shapes and dtypes. Skipped when no CUDA device is present.
#include "cuda_checker.h"

#include <cmath>

using namespace braid;
using namespace braid::test;

namespace {

OprCase make_case(std::string name, std::vector<TensorShape> shapes, std::vector<DType> dtypes,
                  std::function<SymbolVarArray(const SymbolVarArray&)> build) {
    OprCase c;
    c.name = std::move(name);
    c.shapes = std::move(shapes);
    c.dtypes = std::move(dtypes);
    c.build = std::move(build);
    return c;
}

//! Tolerance for a dtype: float16/bfloat16 results may differ by one rounding step.
void set_tolerance(OprCase& c, DType dt) {
    if (dt == dtype::Float16()) {
        c.rtol = 2e-3;
        c.atol = 1e-3;
    } else if (dt == dtype::BFloat16()) {
        c.rtol = 1.6e-2;
        c.atol = 1e-2;
    } else if (dt.is_float()) {
        c.rtol = 1e-5;
        c.atol = 1e-6;
    } else {
        c.rtol = c.atol = 0;
    }
}

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
    EXPECT_THROW(exec->run(), DTypeError);
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
