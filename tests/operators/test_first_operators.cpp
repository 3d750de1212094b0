// Operator checks for the first operator families: elemwise, matmul, reduce, tensor_manip.
#include "checker.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace braid;
using namespace braid::test;

namespace {

//! Reference for a binary elementwise function with numpy broadcasting (float32).
Tensor ref_binary(const Tensor& a, const Tensor& b, float (*f)(float, float)) {
    const TensorShape* shapes[] = {&a.shape(), &b.shape()};
    TensorShape out;
    EXPECT_TRUE(broadcast_shapes(shapes, 2, out));
    Tensor r(out, dtype::Float32());
    Tensor ab = a.view(a.layout().broadcast(out)), bb = b.view(b.layout().broadcast(out));
    for (size_t i = 0; i < out.total_nr_elems(); ++i)
        r.ptr<float>()[i] = f(float(ab.at(i)), float(bb.at(i)));
    return r;
}

Tensor ref_unary(const Tensor& a, float (*f)(float)) {
    Tensor r(a.shape(), dtype::Float32());
    for (size_t i = 0; i < a.shape().total_nr_elems(); ++i) r.ptr<float>()[i] = f(float(a.at(i)));
    return r;
}

} // namespace

TEST(ElemwiseOpr, BinaryModesMatchReferenceWithBroadcasting) {
    struct Mode {
        opr::ElemMode mode;
        float (*f)(float, float);
    };
    std::vector<Mode> modes = {
        {opr::ElemMode::ADD, [](float a, float b) { return a + b; }},
        {opr::ElemMode::SUB, [](float a, float b) { return a - b; }},
        {opr::ElemMode::MUL, [](float a, float b) { return a * b; }},
        {opr::ElemMode::TRUE_DIV, [](float a, float b) { return a / b; }},
        {opr::ElemMode::MAX, [](float a, float b) { return std::max(a, b); }},
        {opr::ElemMode::MIN, [](float a, float b) { return std::min(a, b); }},
    };
    std::vector<std::pair<TensorShape, TensorShape>> shapes = {
        {{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {3, 1}},
        {{5}, {}},        {{}, {}},      {{0, 3}, {3}},    {{2, 1, 4}, {2, 3, 1}},
    };
    for (auto& m : modes)
        for (auto& [sa, sb] : shapes) {
            OprCase c;
            c.name = std::string(opr::elem_mode_name(m.mode)) + " " + sa.to_string() + " " +
                     sb.to_string();
            c.shapes = {sa, sb};
            c.build = [&](const SymbolVarArray& in) -> SymbolVarArray {
                return {opr::Elemwise::make(m.mode, in)};
            };
            c.reference = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                return {ref_binary(in[0], in[1], m.f)};
            };
            check_operator(c);
        }
}

TEST(ElemwiseOpr, UnaryModesMatchReference) {
    struct Mode {
        opr::ElemMode mode;
        float (*f)(float);
        double low;
    };
    std::vector<Mode> modes = {
        {opr::ElemMode::NEG, [](float x) { return -x; }, -2},
        {opr::ElemMode::ABS, [](float x) { return std::fabs(x); }, -2},
        {opr::ElemMode::RELU, [](float x) { return x > 0 ? x : 0.f; }, -2},
        {opr::ElemMode::EXP, [](float x) { return std::exp(x); }, -2},
        {opr::ElemMode::LOG, [](float x) { return std::log(x); }, 0.1},
        {opr::ElemMode::TANH, [](float x) { return std::tanh(x); }, -2},
        {opr::ElemMode::SIGMOID, [](float x) { return 1.f / (1.f + std::exp(-x)); }, -2},
    };
    for (auto& m : modes)
        for (TensorShape s : {TensorShape{7, 5}, TensorShape{}, TensorShape{0}}) {
            OprCase c;
            c.name = std::string(opr::elem_mode_name(m.mode)) + " " + s.to_string();
            c.shapes = {s};
            c.low = m.low;
            c.build = [&](const SymbolVarArray& in) -> SymbolVarArray {
                return {opr::Elemwise::make(m.mode, in)};
            };
            c.reference = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                return {ref_unary(in[0], m.f)};
            };
            check_operator(c);
        }
}

TEST(ElemwiseOpr, Int32ArithmeticAndFloorDivision) {
    OprCase c;
    c.name = "int32 floor_div";
    c.shapes = {{6}, {6}};
    c.dtypes = {dtype::Int32(), dtype::Int32()};
    c.fill = [](std::mt19937&, Tensor& t, size_t idx) {
        int32_t a[] = {7, -7, 7, -7, 0, 9}, b[] = {2, 2, -2, -2, 3, 3};
        for (int i = 0; i < 6; ++i) t.ptr<int32_t>()[i] = idx == 0 ? a[i] : b[i];
    };
    c.build = [](const SymbolVarArray& in) -> SymbolVarArray { return {in[0] / in[1]}; };
    c.reference = [](const std::vector<Tensor>&) -> std::vector<Tensor> {
        Tensor r(TensorShape{6}, dtype::Int32());
        int32_t e[] = {3, -4, -4, 3, 0, 3};
        for (int i = 0; i < 6; ++i) r.ptr<int32_t>()[i] = e[i];
        return {r};
    };
    check_operator(c);
}

TEST(ElemwiseOpr, Float16ComputesInFloat32AndRoundsOnStore) {
    OprCase c;
    c.name = "float16 add";
    c.shapes = {{4, 3}, {3}};
    c.dtypes = {dtype::Float16(), dtype::Float16()};
    c.build = [](const SymbolVarArray& in) -> SymbolVarArray { return {in[0] + in[1]}; };
    c.reference = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        Tensor r(TensorShape{4, 3}, dtype::Float16());
        for (size_t i = 0; i < 12; ++i)
            r.ptr<uint16_t>()[i] = float_to_half(float(in[0].at(i)) + float(in[1].at(i % 3)));
        return {r};
    };
    check_operator(c);
}

TEST(ElemwiseOpr, MixedDtypesAreRejected) {
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", dtype::Float32(), {2});
    auto b = opr::Input::make(*g, "b", dtype::Int32(), {2});
    try {
        a + b;
        FAIL() << "expected DTypeError";
    } catch (const DTypeError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
        EXPECT_NE(msg.find("int32"), std::string::npos) << msg;
        EXPECT_NE(msg.find("Elemwise(ADD)"), std::string::npos) << msg;
    }
}

TEST(MatMulOpr, MatchesPlainLoopWithTransposeFlags) {
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            size_t m = 5, k = 7, n = 3;
            OprCase c;
            c.name = fmt::format("matmul ta={} tb={}", ta, tb);
            c.shapes = {ta ? TensorShape{k, m} : TensorShape{m, k},
                        tb ? TensorShape{n, k} : TensorShape{k, n}};
            c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                return {opr::matmul(in[0], in[1], ta, tb)};
            };
            c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                Tensor r(TensorShape{m, n}, dtype::Float32());
                for (size_t i = 0; i < m; ++i)
                    for (size_t j = 0; j < n; ++j) {
                        double s = 0;
                        for (size_t p = 0; p < k; ++p)
                            s += in[0].at(ta ? p * m + i : i * k + p) *
                                 in[1].at(tb ? j * k + p : p * n + j);
                        r.ptr<float>()[i * n + j] = float(s);
                    }
                return {r};
            };
            check_operator(c);
        }
}

TEST(MatMulOpr, InnerDimMismatchNamesBothShapes) {
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", dtype::Float32(), {4, 5});
    auto b = opr::Input::make(*g, "b", dtype::Float32(), {6, 3});
    try {
        opr::matmul(a, b);
        FAIL() << "expected ShapeError";
    } catch (const ShapeError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("{4,5}"), std::string::npos) << msg;
        EXPECT_NE(msg.find("{6,3}"), std::string::npos) << msg;
    }
}

TEST(ReduceOpr, ModesOverAxesWithAndWithoutKeepdims) {
    using opr::ReduceMode;
    for (auto mode : {ReduceMode::SUM, ReduceMode::MEAN, ReduceMode::MAX, ReduceMode::MIN})
        for (std::vector<int> axes : {std::vector<int>{}, {0}, {1}, {-1}, {0, 2}})
            for (bool keep : {false, true}) {
                TensorShape s{3, 4, 5};
                OprCase c;
                c.name = fmt::format("reduce {} axes {} keep {}", opr::reduce_mode_name(mode),
                                     axes.size(), keep);
                c.shapes = {s};
                c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                    return {opr::Reduce::make(in[0], {mode, axes, keep})};
                };
                c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                    std::vector<bool> red(3, axes.empty());
                    for (int a : axes) red[size_t(a < 0 ? a + 3 : a)] = true;
                    std::vector<size_t> dims;
                    for (size_t d = 0; d < 3; ++d)
                        if (!red[d])
                            dims.push_back(s[d]);
                        else if (keep)
                            dims.push_back(1);
                    TensorShape os(dims);
                    std::vector<double> acc(os.total_nr_elems(), mode == ReduceMode::MAX   ? -1e30
                                                                 : mode == ReduceMode::MIN ? 1e30
                                                                                           : 0.0);
                    size_t cnt = 1;
                    for (size_t d = 0; d < 3; ++d)
                        if (red[d]) cnt *= s[d];
                    for (size_t i = 0; i < 3; ++i)
                        for (size_t j = 0; j < 4; ++j)
                            for (size_t k = 0; k < 5; ++k) {
                                size_t idx[] = {i, j, k};
                                size_t o = 0;
                                for (size_t d = 0; d < 3; ++d)
                                    if (!red[d]) o = o * s[d] + idx[d];
                                double v = in[0].at((i * 4 + j) * 5 + k);
                                if (mode == ReduceMode::MAX)
                                    acc[o] = std::max(acc[o], v);
                                else if (mode == ReduceMode::MIN)
                                    acc[o] = std::min(acc[o], v);
                                else
                                    acc[o] += v;
                            }
                    Tensor r(os, dtype::Float32());
                    for (size_t o = 0; o < acc.size(); ++o)
                        r.ptr<float>()[o] =
                            float(mode == ReduceMode::MEAN ? acc[o] / double(cnt) : acc[o]);
                    return {r};
                };
                check_operator(c);
            }
}

TEST(ReduceOpr, BadAxisIsAShapeError) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3});
    EXPECT_THROW(opr::reduce_sum(x, {2}), ShapeError);
    EXPECT_THROW(opr::reduce_sum(x, {0, 0}), ShapeError);
}

TEST(TensorManipOpr, ReshapeBroadcastTypeCvt) {
    OprCase c;
    c.name = "reshape/broadcast/typecvt";
    c.shapes = {{2, 6}};
    c.build = [](const SymbolVarArray& in) -> SymbolVarArray {
        return {in[0].reshape({3, -1}), in[0].reshape({12}).broadcast({2, 12}),
                in[0].astype(dtype::Int32()), in[0].astype(dtype::BFloat16())};
    };
    c.reference = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        Tensor r0 = in[0].copy().reshape({3, 4});
        Tensor r1(TensorShape{2, 12}, dtype::Float32());
        Tensor r2(TensorShape{2, 6}, dtype::Int32());
        Tensor r3(TensorShape{2, 6}, dtype::BFloat16());
        for (size_t i = 0; i < 12; ++i) {
            r1.ptr<float>()[i] = r1.ptr<float>()[i + 12] = float(in[0].at(i));
            r2.ptr<int32_t>()[i] = int32_t(in[0].at(i)); // truncation toward zero
            r3.ptr<uint16_t>()[i] = float_to_bf16(float(in[0].at(i)));
        }
        return {r0, r1, r2, r3};
    };
    check_operator(c);
}

TEST(TensorManipOpr, ReshapeRejectsWrongElementCount) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 6});
    EXPECT_THROW(x.reshape({5, -1}), ShapeError);
    EXPECT_THROW(x.reshape({5, 2}), ShapeError);
    EXPECT_THROW(x.reshape({-1, -1}), ShapeError);
    EXPECT_THROW(x.broadcast({3, 6}), ShapeError);
}

TEST(OperatorRegistry, EveryOperatorTypeInAGraphIsRegistered) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3});
    auto p =
        opr::SharedParam::make(*g, std::make_shared<Tensor>(TensorShape{3, 2}, dtype::Float32()));
    auto y =
        opr::reduce_sum(opr::matmul(x, p) * 2.0).reshape({1}).broadcast({2}).astype(dtype::Int32());
    (void)opr::GetVarShape::make(y);
    for (auto& opr : g->operators())
        EXPECT_NE(OperatorRegistry::instance().find(opr->type_name()), nullptr)
            << opr->type_name() << " is not registered";
}
