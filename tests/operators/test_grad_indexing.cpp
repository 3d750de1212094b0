// Gradient rules of Gather, IndexingOneHot and Embedding, and the scatter operators they
// insert (ScatterAdd, IndexAdd): forward results against plain loops (repeated indices, every
// dtype), errors, and gradients against finite differences.
#include "grad_helpers.h"
#include "reference.h"

using namespace braid;
using namespace braid::test;

class GradIndexing : public ::testing::Test {
protected:
    void SetUp() override { register_all_operators(); }
};

namespace {

//! Fills float inputs uniformly in [-2, 2) and int32 inputs with indices in [0, bound).
std::function<void(std::mt19937&, Tensor&, size_t)> indices_below(size_t bound) {
    return [bound](std::mt19937& rng, Tensor& t, size_t) {
        size_t n = t.shape().total_nr_elems();
        if (t.dtype() == dtype::Int32()) {
            std::uniform_int_distribution<int32_t> d(0, int32_t(bound) - 1);
            for (size_t i = 0; i < n; ++i) t.ptr<int32_t>()[i] = d(rng);
        } else {
            t = random_tensor(t.shape(), t.dtype(), rng);
        }
    };
}

//! (outer, n, inner) around one axis.
struct Split3 {
    size_t outer = 1, n = 1, inner = 1;
};
Split3 split_of(const TensorShape& s, size_t axis) {
    Split3 r;
    for (size_t d = 0; d < s.ndim(); ++d) {
        if (d < axis) r.outer *= s[d];
        if (d > axis) r.inner *= s[d];
    }
    r.n = s[axis];
    return r;
}

//! scatter_add by plain loops, in double.
Tensor ref_scatter_add(const Tensor& x, const Tensor& idx, const Tensor& v, size_t axis) {
    Split3 xs = split_of(x.shape(), axis), is = split_of(idx.shape(), axis);
    std::vector<double> acc = values_of(x);
    for (size_t o = 0; o < is.outer; ++o)
        for (size_t j = 0; j < is.n; ++j)
            for (size_t i = 0; i < is.inner; ++i) {
                size_t p = (o * is.n + j) * is.inner + i;
                acc[(o * xs.n + size_t(idx.at(p))) * xs.inner + i] += v.at(p);
            }
    return tensor_of(x.shape(), x.dtype(), acc);
}

//! index_add by plain loops, in double.
Tensor ref_index_add(const Tensor& x, const Tensor& idx, const Tensor& v, size_t axis) {
    Split3 xs = split_of(x.shape(), axis);
    size_t m = idx.shape()[0];
    std::vector<double> acc = values_of(x);
    for (size_t o = 0; o < xs.outer; ++o)
        for (size_t j = 0; j < m; ++j)
            for (size_t i = 0; i < xs.inner; ++i)
                acc[(o * xs.n + size_t(idx.at(j))) * xs.inner + i] +=
                    v.at((o * m + j) * xs.inner + i);
    return tensor_of(x.shape(), x.dtype(), acc);
}

} // namespace

TEST_F(GradIndexing, ScatterAddMatchesLoopsForEveryDtype) {
    struct Shapes {
        TensorShape x, idx;
        int axis;
    };
    std::vector<Shapes> cases = {{{5}, {9}, 0},
                                 {{4, 3}, {7, 3}, 0},
                                 {{2, 5, 3}, {2, 4, 3}, 1},
                                 {{2, 3, 4}, {2, 3, 6}, -1},
                                 {{3, 700}, {5, 700}, 0}}; // several column chunks
    for (DType dt :
         {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int32(), dtype::Int64()})
        for (auto& s : cases) {
            size_t axis = size_t(s.axis < 0 ? s.axis + int(s.x.ndim()) : s.axis);
            OprCase c;
            c.name = fmt::format("scatter_add {} {} axis {}", dt.name(), s.x.to_string(), s.axis);
            c.shapes = {s.x, s.idx, s.idx};
            c.dtypes = {dt, dtype::Int32(), dt};
            c.fill = indices_below(s.x[axis]);
            int a = s.axis;
            c.build = [a](const SymbolVarArray& in) -> SymbolVarArray {
                return {opr::scatter_add(in[0], in[1], in[2], a)};
            };
            c.reference = [axis](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                return {ref_scatter_add(in[0], in[1], in[2], axis)};
            };
            c.rtol = dt.is_float() && dt != dtype::Float32() ? 2e-2 : 1e-5;
            c.atol = dt.is_float() && dt != dtype::Float32() ? 5e-2 : 1e-5;
            check_operator(c);
        }
}

TEST_F(GradIndexing, IndexAddMatchesLoopsForEveryDtype) {
    struct Shapes {
        TensorShape x;
        size_t m;
        int axis;
    };
    std::vector<Shapes> cases = {
        {{5}, 8, 0}, {{4, 3}, 6, 0}, {{2, 5, 3}, 4, 1}, {{2, 3, 4}, 5, -1}, {{6, 600}, 9, 0}};
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::Int32(), dtype::Int64()})
        for (auto& s : cases) {
            size_t axis = size_t(s.axis < 0 ? s.axis + int(s.x.ndim()) : s.axis);
            auto vdims = s.x.dims();
            vdims[axis] = s.m;
            OprCase c;
            c.name = fmt::format("index_add {} {} axis {}", dt.name(), s.x.to_string(), s.axis);
            c.shapes = {s.x, TensorShape{s.m}, TensorShape(vdims)};
            c.dtypes = {dt, dtype::Int32(), dt};
            c.fill = indices_below(s.x[axis]);
            int a = s.axis;
            c.build = [a](const SymbolVarArray& in) -> SymbolVarArray {
                return {opr::index_add(in[0], in[1], in[2], a)};
            };
            c.reference = [axis](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                return {ref_index_add(in[0], in[1], in[2], axis)};
            };
            c.rtol = dt == dtype::Float16() ? 2e-2 : 1e-5;
            c.atol = dt == dtype::Float16() ? 5e-2 : 1e-5;
            check_operator(c);
        }
}

TEST_F(GradIndexing, ScatterErrors) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 3});
    auto i = opr::Input::make(*g, "i", dtype::Int32(), {2, 3});
    auto v = opr::Input::make(*g, "v", dtype::Float32(), {2, 3});
    auto f = opr::Input::make(*g, "f", dtype::Float32(), {2, 3});
    expect_error<ShapeError>([&] { opr::scatter_add(x, i, v, 1); }, {"does not fit"});
    expect_error<DTypeError>([&] { opr::scatter_add(x, f, v, 0); }, {"int32"});
    expect_error<ShapeError>([&] { opr::index_add(x, i, v, 0); }, {"1-D"});
    auto out = opr::scatter_add(x, i, v, 0);
    auto exec = g->compile({out});
    Tensor bad(TensorShape{2, 3}, dtype::Int32());
    for (size_t k = 0; k < 6; ++k) bad.ptr<int32_t>()[k] = k == 4 ? 4 : 0;
    std::mt19937 rng(1);
    exec->feed("x", random_tensor({4, 3}, dtype::Float32(), rng))
        .feed("i", bad)
        .feed("v", random_tensor({2, 3}, dtype::Float32(), rng));
    expect_error<ValueError>([&] { exec->run(); }, {"index 4", "position 4", "0..3"});
}

TEST_F(GradIndexing, GatherIndexingOneHotAndEmbedding) {
    struct GatherCase {
        TensorShape x, idx;
        int axis;
    };
    for (auto& s : std::vector<GatherCase>{
             {{5}, {8}, 0}, {{4, 3}, {6, 3}, 0}, {{2, 5, 3}, {2, 2, 3}, 1}, {{3, 4}, {3, 7}, -1}}) {
        size_t axis = size_t(s.axis < 0 ? s.axis + int(s.x.ndim()) : s.axis);
        int a = s.axis;
        auto c = grad_case("gather " + s.x.to_string(), {s.x, s.idx},
                           [a](const SymbolVarArray& in) { return opr::gather(in[0], in[1], a); });
        c.dtypes = {dtype::Float32(), dtype::Int32()};
        c.fill = indices_below(s.x[axis]); // repeats: the gradient accumulates
        check_gradient(c);
    }
    for (bool keep : {false, true})
        for (int axis : {0, 1, -1}) {
            TensorShape xs{3, 4, 2};
            size_t a = size_t(axis < 0 ? axis + 3 : axis);
            std::vector<size_t> rest;
            for (size_t d = 0; d < 3; ++d)
                if (d != a) rest.push_back(xs[d]);
            auto c = grad_case(fmt::format("indexing_one_hot axis {} keepdims {}", axis, keep),
                               {xs, TensorShape(rest)}, [=](const SymbolVarArray& in) {
                                   return opr::indexing_one_hot(in[0], in[1], axis, keep);
                               });
            c.dtypes = {dtype::Float32(), dtype::Int32()};
            c.fill = indices_below(xs[a]);
            check_gradient(c);
        }
    for (auto& ids : std::vector<TensorShape>{{7}, {2, 3}, {}}) {
        auto c = grad_case(
            "embedding ids " + ids.to_string(), {{5, 3}, ids},
            [](const SymbolVarArray& in) { return opr::tanh(opr::embedding(in[0], in[1])); });
        c.dtypes = {dtype::Float32(), dtype::Int32()};
        c.fill = indices_below(5);
        check_gradient(c);
    }
}

TEST_F(GradIndexing, ScatterOperatorsAreDifferentiable) {
    auto s = grad_case("scatter_add", {{4, 3}, {6, 3}, {6, 3}}, [](const SymbolVarArray& in) {
        return opr::tanh(opr::scatter_add(in[0], in[1], in[2], 0));
    });
    s.dtypes = {dtype::Float32(), dtype::Int32(), dtype::Float32()};
    s.fill = indices_below(4);
    check_gradient(s);
    auto x = grad_case("index_add", {{2, 4, 3}, {5}, {2, 5, 3}}, [](const SymbolVarArray& in) {
        return opr::tanh(opr::index_add(in[0], in[1], in[2], 1));
    });
    x.dtypes = {dtype::Float32(), dtype::Int32(), dtype::Float32()};
    x.fill = indices_below(4);
    check_gradient(x);
}
