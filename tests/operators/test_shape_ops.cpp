// Shape operators: Dimshuffle / transpose (view or tiled copy), expand_dims / squeeze (views),
// TypeCvt rounding to float16 / bfloat16 and between integer and float types, Fill and
// Arange, with their error messages.
#include "reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace braid;
using namespace braid::test;

namespace {

//! out[idx] = x[idx permuted by pattern] (pattern -1 entries are new unit axes).
Tensor ref_dimshuffle(const Tensor& x, const std::vector<int>& pattern) {
    std::vector<size_t> dims;
    for (int p : pattern) dims.push_back(p < 0 ? 1 : x.shape()[size_t(p)]);
    TensorShape os(dims);
    Tensor r(os, x.dtype());
    size_t nd = x.shape().ndim();
    for (size_t i = 0; i < os.total_nr_elems(); ++i) {
        std::vector<size_t> oi(pattern.size()), xi(nd, 0);
        size_t rest = i;
        for (size_t d = pattern.size(); d-- > 0;) {
            oi[d] = rest % os[d];
            rest /= os[d];
        }
        for (size_t d = 0; d < pattern.size(); ++d)
            if (pattern[d] >= 0) xi[size_t(pattern[d])] = oi[d];
        size_t flat = 0;
        for (size_t d = 0; d < nd; ++d) flat = flat * x.shape()[d] + xi[d];
        store_from_double(x.dtype(), r.raw_ptr(), i, x.at(flat));
    }
    return r;
}

OprCase shuffle_case(TensorShape shape, std::vector<int> pattern, DType dt = dtype::Float32()) {
    OprCase c;
    c.name = "dimshuffle " + shape.to_string();
    c.shapes = {shape};
    c.dtypes = {dt};
    c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
        return {opr::dimshuffle(in[0], pattern), opr::dimshuffle(in[0], pattern) * 1.0};
    };
    c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        Tensor r = ref_dimshuffle(in[0], pattern);
        return {r, r};
    };
    c.rtol = c.atol = 0;
    return c;
}

} // namespace

TEST(DimshuffleOpr, EveryPermutationOfThreeAxesAndNewAxes) {
    std::vector<std::vector<int>> perms = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                           {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (auto& p : perms) check_operator(shuffle_case({3, 4, 5}, p));
    check_operator(shuffle_case({3, 4}, {1, -1, 0}));
    check_operator(shuffle_case({3, 4}, {-1, 0, -1, 1}));
    check_operator(shuffle_case({}, {-1, -1}));
    check_operator(shuffle_case({0, 3}, {1, 0}));
    check_operator(shuffle_case({2, 1, 3}, {2, 1, 0}, dtype::Float16()));
    check_operator(shuffle_case({300, 301}, {1, 0}));     // tiled, parallel copy
    check_operator(shuffle_case({7, 33, 65}, {2, 0, 1})); // tiles with remainders
    check_operator(shuffle_case({4, 5}, {1, 0}, dtype::Int64()));
}

TEST(DimshuffleOpr, OrderKeepingPatternsAreViewsPermutationsAreCopies) {
    std::mt19937 rng(1);
    Tensor x = random_tensor({3, 4}, dtype::Float32(), rng);
    auto g = ComputingGraph::make();
    auto in = opr::Input::make(*g, "x", dtype::Float32(), {3, 4});
    auto view = opr::dimshuffle(in, {-1, 0, 1});
    auto copy = opr::transpose(in);
    EXPECT_EQ(view.node()->owner()->output_mem(0), OutputMem::READONLY_FORWARD);
    EXPECT_EQ(copy.node()->owner()->output_mem(0), OutputMem::PLANNED);
    auto exec = g->compile({view, copy});
    exec->feed("x", x).run();
    EXPECT_EQ(exec->output(0).storage().block_id(), x.storage().block_id());
    EXPECT_TRUE(exec->output(1).layout().is_contiguous());
    expect_tensor_near(exec->output(1), ref_dimshuffle(x, {1, 0}), 0, 0, "transpose");
}

TEST(DimshuffleOpr, TransposeTakesNegativeAxesAndStridedInputs) {
    Tensor x = tensor_of({2, 3}, dtype::Float32(), {0, 1, 2, 3, 4, 5});
    auto out = run_graph({x}, [](ComputingGraph&, const SymbolVarArray& in) {
        auto rev =
            opr::subtensor(in[0], {opr::AxisIndex::slice(1, std::nullopt, std::nullopt, -1)});
        return SymbolVarArray{opr::transpose(in[0], {-1, 0}), opr::transpose(rev)};
    });
    EXPECT_EQ(values_of(out[0]), (std::vector<double>{0, 3, 1, 4, 2, 5}));
    EXPECT_EQ(values_of(out[1]), (std::vector<double>{2, 5, 1, 4, 0, 3}));
}

TEST(DimshuffleOpr, BadPatternsNameThePatternAndTheRank) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3, 4});
    expect_error<ShapeError>(
        [&] {
            opr::dimshuffle(x, {0, 1});
        },
        {"Dimshuffle(pattern=0,1)", "rank-3", "{2,3,4}", "axis 2 is missing"});
    expect_error<ShapeError>([&] { opr::dimshuffle(x, {0, 1, 1, 2}); }, {"axis 1 appears twice"});
    expect_error<ShapeError>(
        [&] {
            opr::dimshuffle(x, {0, 1, 3});
        },
        {"entry 3 is neither an axis (0..2) nor -1"});
    expect_error<ShapeError>(
        [&] {
            opr::transpose(x, {0, 1, 5});
        },
        {"axis 5 out of range for a rank-3 input"});
}

TEST(AxisAddRemoveOpr, ExpandDimsAndSqueezeAreViews) {
    std::mt19937 rng(2);
    Tensor x = random_tensor({2, 1, 3}, dtype::Float32(), rng);
    auto g = ComputingGraph::make();
    auto in = opr::Input::make(*g, "x", dtype::Float32(), {2, 1, 3});
    SymbolVarArray outs = {opr::expand_dims(in, {0}),    opr::expand_dims(in, {-1}),
                           opr::expand_dims(in, {0, 2}), opr::squeeze(in),
                           opr::squeeze(in, {-2}),       opr::squeeze(opr::expand_dims(in, {3}))};
    std::vector<TensorShape> shapes = {{1, 2, 1, 3}, {2, 1, 3, 1}, {1, 2, 1, 1, 3},
                                       {2, 3},       {2, 3},       {2, 3}};
    for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(outs[i].shape(), shapes[i]) << i;
    std::vector<OutputSpec> specs(outs.begin(), outs.end());
    auto exec = g->compile(specs);
    exec->feed("x", x).run();
    for (size_t i = 0; i < outs.size(); ++i) {
        EXPECT_EQ(exec->output(i).storage().block_id(), x.storage().block_id());
        EXPECT_EQ(values_of(exec->output(i)), values_of(x)) << i;
    }
    auto s = opr::Input::make(*g, "s", dtype::Float32(), {});
    EXPECT_EQ(opr::expand_dims(s, {0, 1}).shape(), (TensorShape{1, 1}));
    EXPECT_EQ(opr::squeeze(opr::expand_dims(s, {0})).shape(), TensorShape{});
}

TEST(AxisAddRemoveOpr, ErrorsNameAxisRankAndSize) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 1, 3});
    expect_error<ShapeError>(
        [&] { opr::squeeze(x, {0}); },
        {"AxisAddRemove(REMOVE axes=0)", "cannot remove axis 0 of {2,1,3}", "size is 2"});
    expect_error<ShapeError>([&] { opr::squeeze(x, {3}); }, {"axis 3", "rank-3"});
    expect_error<ShapeError>([&] { opr::expand_dims(x, {5}); },
                             {"new axis 5 out of range for the rank-4 output"});
    expect_error<ShapeError>([&] { opr::expand_dims(x, {0, -5}); }, {"new axis -5 given twice"});
}

// ---------------------------------------------------------------- TypeCvt
namespace {

std::vector<double> convert(const Tensor& x, DType to) {
    return values_of(run_graph({x}, [&](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{in[0].astype(to)};
    })[0]);
}

} // namespace

TEST(TypeCvtOpr, Float32ToHalfRoundsToNearestEven) {
    const double u11 = std::ldexp(1, -11), u25 = std::ldexp(1, -25);
    Tensor x =
        tensor_of({10}, dtype::Float32(),
                  {1 + u11, 1 + 3 * u11, 65519, 65520, -65520, u25, 3 * u25, -0.0, 1e-10, NAN});
    auto h = convert(x, dtype::Float16());
    std::vector<double> expect = {1, 1 + 4 * u11,        65504, INFINITY, -INFINITY,
                                  0, std::ldexp(1, -23), 0,     0};
    for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(h[i], expect[i]) << i;
    EXPECT_TRUE(std::signbit(h[7]));
    EXPECT_TRUE(std::isnan(h[9]));

    const double u8 = std::ldexp(1, -8);
    Tensor y = tensor_of({5}, dtype::Float32(), {1 + u8, 1 + 3 * u8, 3.4e38, -1e-39, NAN});
    auto b = convert(y, dtype::BFloat16());
    EXPECT_EQ(b[0], 1);
    EXPECT_EQ(b[1], 1 + 4 * u8);
    EXPECT_EQ(b[2], INFINITY); // 3.4e38 rounds past bfloat16's largest finite value
    EXPECT_TRUE(std::isnan(b[4]));
}

TEST(TypeCvtOpr, IntegersRoundOnceToHalfAndFloat) {
    // 2^24 + 2^16 + 1 lies just above a bfloat16 tie; rounding through float32 first
    // would land on the tie and round down.
    Tensor i32 = tensor_of({4}, dtype::Int32(), {16842753, 2049, 2051, 70000});
    auto bf = convert(i32, dtype::BFloat16());
    EXPECT_EQ(bf[0], 16908288);
    auto h = convert(i32, dtype::Float16());
    EXPECT_EQ(h[1], 2048);
    EXPECT_EQ(h[2], 2052);
    EXPECT_EQ(h[3], INFINITY);
    // int64: 2^60 + 2^36 + 1 rounds up in float32; through double it would tie and round down.
    Tensor i64(TensorShape{2}, dtype::Int64());
    i64.ptr<int64_t>()[0] = (int64_t(1) << 60) + (int64_t(1) << 36) + 1;
    i64.ptr<int64_t>()[1] = -((int64_t(1) << 60) + (int64_t(1) << 36) + 1);
    auto f = convert(i64, dtype::Float32());
    EXPECT_EQ(f[0], std::ldexp(1, 60) + std::ldexp(1, 37));
    EXPECT_EQ(f[1], -(std::ldexp(1, 60) + std::ldexp(1, 37)));
    EXPECT_EQ(convert(i64, dtype::BFloat16())[0], std::ldexp(1, 60));
}

TEST(TypeCvtOpr, FloatToIntTruncatesAndSaturatesAndBoolIsNonzero) {
    Tensor x = tensor_of({6}, dtype::Float32(), {2.7, -2.7, 3e9, -3e9, NAN, 0.5});
    EXPECT_EQ(convert(x, dtype::Int32()),
              (std::vector<double>{2, -2, 2147483647, -2147483648.0, 0, 0}));
    EXPECT_EQ(convert(x, dtype::Bool()), (std::vector<double>{1, 1, 1, 1, 1, 1}));
    EXPECT_EQ(convert(x, dtype::Uint8()), (std::vector<double>{2, 0, 255, 0, 0, 0}));
    Tensor h(TensorShape{1}, dtype::Float16());
    h.ptr<uint16_t>()[0] = float_to_half(1.f + std::ldexp(1.f, -8) + std::ldexp(1.f, -10));
    EXPECT_EQ(convert(h, dtype::BFloat16())[0], 1 + std::ldexp(1, -7));
}

TEST(TypeCvtOpr, EveryPairOfDtypesRoundTripsSmallIntegers) {
    std::vector<DType> all = {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int8(),
                              dtype::Uint8(),   dtype::Int32(),   dtype::Int64(),    dtype::Bool()};
    for (DType from : all)
        for (DType to : all) {
            std::vector<double> v = {0, 1, 7, 100};
            if (from == dtype::Bool() || to == dtype::Bool()) v = {0, 1, 1, 0};
            auto got = convert(tensor_of({4}, from, v), to);
            EXPECT_EQ(got, v) << from.name() << " -> " << to.name();
        }
}

TEST(TypeCvtOpr, LargeTensorsConvertInParallel) {
    OprCase c;
    c.name = "typecvt large";
    c.shapes = {{100003}};
    c.build = [](const SymbolVarArray& in) -> SymbolVarArray {
        return {in[0].astype(dtype::Float16()),
                in[0].astype(dtype::BFloat16()).astype(dtype::Float32())};
    };
    c.reference = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        Tensor h(in[0].shape(), dtype::Float16()), b(in[0].shape(), dtype::Float32());
        for (size_t i = 0; i < in[0].shape().total_nr_elems(); ++i) {
            h.ptr<uint16_t>()[i] = float_to_half(in[0].ptr<float>()[i]);
            b.ptr<float>()[i] = bf16_to_float(float_to_bf16(in[0].ptr<float>()[i]));
        }
        return {h, b};
    };
    c.rtol = c.atol = 0;
    check_operator(c);
}

// ---------------------------------------------------------------- Fill / Arange
TEST(FillOpr, StaticShapesFoldAndLikeFollowsTheShape) {
    auto g = ComputingGraph::make();
    auto z = opr::zeros(*g, {2, 3}, dtype::Int32());
    auto o = opr::ones(*g, {4}, dtype::Float16());
    auto f = opr::fill(*g, {}, 2.5);
    ASSERT_NE(z.node()->static_value(), nullptr);
    EXPECT_EQ(values_of(*z.node()->static_value()), std::vector<double>(6, 0));
    EXPECT_EQ(values_of(*o.node()->static_value()), std::vector<double>(4, 1));
    EXPECT_EQ(values_of(*f.node()->static_value()), std::vector<double>{2.5});

    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 2});
    auto like = opr::full_like(x, -1.5) + x * 0.0;
    auto big = opr::fill(*g, {300, 300}, 3.0, dtype::BFloat16());
    auto exec = g->compile({like, opr::ones_like(x), big, opr::zeros_like(x)});
    std::mt19937 rng(1);
    exec->feed("x", random_tensor({2, 2}, dtype::Float32(), rng)).run();
    EXPECT_EQ(values_of(exec->output(0)), std::vector<double>(4, -1.5));
    EXPECT_EQ(values_of(exec->output(2)), std::vector<double>(90000, 3));
    exec->feed("x", random_tensor({3}, dtype::Float32(), rng)).run();
    EXPECT_EQ(exec->output(1).shape(), TensorShape{3});
    EXPECT_EQ(values_of(exec->output(1)), std::vector<double>(3, 1));
    EXPECT_EQ(values_of(exec->output(3)), std::vector<double>(3, 0));
}

TEST(FillOpr, ShapeVarMustBeAnIntegerVectorOfNonNegativeDims) {
    auto g = ComputingGraph::make();
    auto fs = opr::ImmutableTensor::make(*g, tensor_of({2}, dtype::Float32(), {2, 3}));
    expect_error<DTypeError>([&] { opr::Fill::make(fs, 1.0, dtype::Float32()); },
                             {"Fill", "shape var", "float32", "integer"});
    auto neg = opr::ImmutableTensor::make(*g, tensor_of({2}, dtype::Int32(), {2, -3}));
    expect_error<ShapeError>([&] { opr::Fill::make(neg, 1.0, dtype::Float32()); },
                             {"Fill", "negative dim -3"});
}

TEST(ArangeOpr, ValuesLengthsAndErrors) {
    auto g = ComputingGraph::make();
    auto a = opr::arange(*g, 0, 5);
    auto b = opr::arange(*g, 5, 0, -1.5);
    auto c = opr::arange(*g, 0, 10, 3, dtype::Int32());
    auto d = opr::arange(*g, 3, 1);
    auto e = opr::arange(*g, 0, 1, 0.1);
    EXPECT_EQ(values_of(*a.node()->static_value()), (std::vector<double>{0, 1, 2, 3, 4}));
    EXPECT_EQ(values_of(*b.node()->static_value()), (std::vector<double>{5, 3.5, 2, 0.5}));
    EXPECT_EQ(values_of(*c.node()->static_value()), (std::vector<double>{0, 3, 6, 9}));
    EXPECT_EQ(d.shape(), TensorShape{0});
    EXPECT_EQ(e.shape(), TensorShape{10});
    auto big = opr::arange(*g, 0, 10000, 1, dtype::Int32());
    auto exec = g->compile({big});
    exec->run();
    EXPECT_EQ(exec->output(0).at(9999), 9999);
    expect_error<ValueError>([&] { opr::arange(*g, 0, 1, 0); }, {"Arange", "step 0", "nonzero"});
    expect_error<DTypeError>([&] { opr::arange(*g, 0, 1, 1, dtype::Bool()); }, {"Arange", "bool"});
}

TEST(OperatorRegistry, EveryNewOperatorTypeIsRegistered) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto ids = opr::Input::make(*g, "ids", dtype::Int32(), {4});
    (void)opr::argmax(x);
    (void)opr::transpose(x);
    (void)opr::squeeze(opr::expand_dims(x, {0}));
    (void)opr::softmax(x);
    (void)opr::layer_norm(x);
    (void)opr::rms_norm(x);
    auto s = opr::subtensor(x, {opr::AxisIndex::index(0, 1)});
    (void)opr::set_subtensor(x, s, {opr::AxisIndex::index(0, 2)});
    (void)opr::incr_subtensor(x, s, {opr::AxisIndex::index(0, 2)});
    (void)opr::indexing_one_hot(x, ids, 1);
    (void)opr::gather(x, opr::expand_dims(ids, {1}), 1);
    (void)opr::embedding(x, ids);
    (void)opr::concat(opr::split(x, 1, size_t(2)), 1);
    (void)opr::zeros_like(x);
    (void)opr::arange(*g, 0, 3);
    for (auto& opr : g->operators())
        EXPECT_NE(OperatorRegistry::instance().find(opr->type_name()), nullptr)
            << opr->type_name() << " is not registered";
}
