// Indexing operators: Subtensor (Python slice semantics, views), SetSubtensor and
// IncrSubtensor, Gather, IndexingOneHot, Embedding, Concat and Split, against plain loops,
// with their error messages.
#include "reference.h"

#include <gtest/gtest.h>

#include <optional>

using namespace braid;
using namespace braid::test;
using opr::AxisIndex;

namespace {

//! The positions a Python slice selects from range(n), by walking it.
std::vector<size_t> slice_positions(const AxisIndex& it, size_t n) {
    long len = long(n);
    if (it.is_index) {
        long i = *it.start < 0 ? *it.start + len : *it.start;
        return {size_t(i)};
    }
    auto clamp = [](long v, long lo, long hi) { return std::max(lo, std::min(v, hi)); };
    std::vector<size_t> pos;
    if (it.step > 0) {
        long s = it.start ? clamp(*it.start < 0 ? *it.start + len : *it.start, 0, len) : 0;
        long e = it.stop ? clamp(*it.stop < 0 ? *it.stop + len : *it.stop, 0, len) : len;
        for (long i = s; i < e; i += it.step) pos.push_back(size_t(i));
    } else {
        long s =
            it.start ? clamp(*it.start < 0 ? *it.start + len : *it.start, -1, len - 1) : len - 1;
        long e = it.stop ? clamp(*it.stop < 0 ? *it.stop + len : *it.stop, -1, len - 1) : -1;
        for (long i = s; i > e; i += it.step) pos.push_back(size_t(i));
    }
    return pos;
}

//! For each output element of x[items], its flat index in x; and the output shape.
std::vector<size_t> slice_map(const TensorShape& s, const std::vector<AxisIndex>& items,
                              TensorShape& out_shape) {
    size_t nd = s.ndim();
    std::vector<std::vector<size_t>> pos(nd);
    std::vector<bool> drop(nd, false);
    for (size_t d = 0; d < nd; ++d)
        for (size_t i = 0; i < s[d]; ++i) pos[d].push_back(i);
    for (auto& it : items) {
        size_t d = size_t(it.axis < 0 ? it.axis + int(nd) : it.axis);
        pos[d] = slice_positions(it, s[d]);
        drop[d] = it.is_index;
    }
    std::vector<size_t> dims;
    size_t total = 1;
    for (size_t d = 0; d < nd; ++d) {
        if (!drop[d]) dims.push_back(pos[d].size());
        total *= pos[d].size();
    }
    out_shape = TensorShape(dims);
    std::vector<size_t> map;
    for (size_t o = 0; o < total; ++o) {
        size_t rest = o, flat = 0, mul = 1;
        for (size_t d = nd; d-- > 0;) {
            size_t k = rest % pos[d].size();
            rest /= pos[d].size();
            flat += pos[d][k] * mul;
            mul *= s[d];
        }
        map.push_back(flat);
    }
    return map;
}

Tensor ref_subtensor(const Tensor& x, const std::vector<AxisIndex>& items) {
    TensorShape os;
    auto map = slice_map(x.shape(), items, os);
    Tensor r(os, x.dtype());
    for (size_t i = 0; i < map.size(); ++i)
        store_from_double(x.dtype(), r.raw_ptr(), i, x.at(map[i]));
    return r;
}

Tensor ref_set(const Tensor& x, const Tensor& v, const std::vector<AxisIndex>& items, bool incr) {
    TensorShape os;
    auto map = slice_map(x.shape(), items, os);
    Tensor r = x.copy();
    Tensor vb = v.view(v.layout().broadcast(os));
    for (size_t i = 0; i < map.size(); ++i)
        store_from_double(x.dtype(), r.raw_ptr(), map[i], (incr ? r.at(map[i]) : 0) + vb.at(i));
    return r;
}

std::vector<std::vector<AxisIndex>> item_lists() {
    using A = AxisIndex;
    auto none = std::nullopt;
    return {
        {A::slice(0, 1, 4)},
        {A::slice(1, none, none, -1)},
        {A::slice(2, -5, -1, 2), A::slice(0, none, none, 2)},
        {A::index(0, -1)},
        {A::index(1, 2), A::slice(-1, 6, 0, -2)},
        {A::slice(0, -100, 100), A::slice(2, 100, -100, -3)},
        {A::slice(1, 4, 2)},                              // empty
        {A::index(0, 0), A::index(1, 5), A::index(2, 6)}, // rank 0
        {A::slice(2, none, 3), A::slice(1, 1, none, 4), A::index(0, 3)},
    };
}

} // namespace

TEST(SubtensorOpr, PythonSliceSemanticsOnEveryItemKind) {
    for (auto& items : item_lists())
        for (DType dt : {dtype::Float32(), dtype::Int64(), dtype::Float16()}) {
            OprCase c;
            c.name = "subtensor";
            c.shapes = {{5, 6, 7}};
            c.dtypes = {dt};
            c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                auto s = opr::subtensor(in[0], items);
                return {s, s * 2.0}; // a consumer that needs packed memory
            };
            c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                Tensor r = ref_subtensor(in[0], items);
                Tensor r2 = ref_nary({r}, dt, [](const double* v) { return v[0] * 2; });
                return {r, r2};
            };
            c.rtol = c.atol = 0;
            check_operator(c);
        }
}

TEST(SubtensorOpr, HandPickedSlices) {
    Tensor x = tensor_of({6}, dtype::Float32(), {0, 1, 2, 3, 4, 5});
    auto none = std::nullopt;
    auto out = run_graph({x}, [&](ComputingGraph&, const SymbolVarArray& in) {
        return SymbolVarArray{opr::subtensor(in[0], {AxisIndex::slice(0, none, none, -1)}),
                              opr::subtensor(in[0], {AxisIndex::slice(0, -2, none)}),
                              opr::subtensor(in[0], {AxisIndex::slice(0, 1, 100, 3)}),
                              opr::subtensor(in[0], {AxisIndex::slice(0, 4, 0, -2)}),
                              opr::subtensor(in[0], {AxisIndex::index(0, -2)})};
    });
    EXPECT_EQ(values_of(out[0]), (std::vector<double>{5, 4, 3, 2, 1, 0}));
    EXPECT_EQ(values_of(out[1]), (std::vector<double>{4, 5}));
    EXPECT_EQ(values_of(out[2]), (std::vector<double>{1, 4}));
    EXPECT_EQ(values_of(out[3]), (std::vector<double>{4, 2}));
    EXPECT_EQ(out[4].shape(), TensorShape{});
    EXPECT_EQ(values_of(out[4]), (std::vector<double>{4}));
}

TEST(SubtensorOpr, IsAViewOfItsInputAndComposes) {
    std::mt19937 rng(4);
    Tensor x = random_tensor({8, 9}, dtype::Float32(), rng);
    auto g = ComputingGraph::make();
    auto in = opr::Input::make(*g, "x", dtype::Float32(), {8, 9});
    auto s1 = opr::subtensor(in, {AxisIndex::slice(1, std::nullopt, std::nullopt, -2)});
    auto s2 = opr::subtensor(s1, {AxisIndex::slice(0, 2, 7, 2), AxisIndex::index(1, 1)});
    EXPECT_EQ(s1.node()->owner()->output_mem(0), OutputMem::READONLY_FORWARD);
    auto exec = g->compile({s1, s2});
    exec->feed("x", x).run();
    EXPECT_EQ(exec->output(0).storage().block_id(), x.storage().block_id());
    EXPECT_EQ(exec->output(1).storage().block_id(), x.storage().block_id());
    Tensor r1 = ref_subtensor(x, {AxisIndex::slice(1, std::nullopt, std::nullopt, -2)});
    expect_tensor_near(exec->output(1),
                       ref_subtensor(r1, {AxisIndex::slice(0, 2, 7, 2), AxisIndex::index(1, 1)}), 0,
                       0, "nested subtensor");
}

TEST(SubtensorOpr, ErrorsNameTheIndexAxisAndSize) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 5});
    expect_error<ShapeError>([&] { opr::subtensor(x, {AxisIndex::index(1, 5)}); },
                             {"Subtensor", "index 5 out of range for axis 1 of size 5", "{4,5}"});
    expect_error<ShapeError>([&] { opr::subtensor(x, {AxisIndex::index(0, -5)}); },
                             {"index -5 out of range for axis 0 of size 4"});
    expect_error<ShapeError>([&] { opr::subtensor(x, {AxisIndex::slice(0, 0, 2, 0)}); },
                             {"slice step 0 on axis 0"});
    expect_error<ShapeError>([&] { opr::subtensor(x, {AxisIndex::slice(2, 0, 1)}); },
                             {"axis 2 out of range for a rank-2 input"});
    expect_error<ShapeError>(
        [&] {
            opr::subtensor(x, {AxisIndex::slice(1, 0, 1), AxisIndex::index(-1, 0)});
        },
        {"axis -1 is indexed twice"});
}

TEST(SetSubtensorOpr, SetAndIncrWithBroadcastValues) {
    using A = AxisIndex;
    auto none = std::nullopt;
    struct Case {
        std::vector<AxisIndex> items;
        TensorShape value;
    };
    std::vector<Case> cases = {
        {{A::slice(0, 1, 4)}, {3, 6, 7}},     {{A::slice(0, 1, 4)}, {}},
        {{A::slice(1, none, none, -2)}, {7}}, {{A::index(0, -1), A::slice(2, 5, 1, -1)}, {6, 1}},
        {{A::slice(1, 3, 3)}, {1}}, // empty slice
    };
    for (auto& cs : cases)
        for (bool incr : {false, true})
            for (DType dt : {dtype::Float32(), dtype::Int32(), dtype::BFloat16()}) {
                OprCase c;
                c.name = fmt::format("{} {}", incr ? "incr" : "set", dt.name());
                c.shapes = {{5, 6, 7}, cs.value};
                c.dtypes = {dt, dt};
                auto items = cs.items;
                c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                    return {incr ? opr::incr_subtensor(in[0], in[1], items)
                                 : opr::set_subtensor(in[0], in[1], items)};
                };
                c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                    return {ref_set(in[0], in[1], items, incr)};
                };
                c.rtol = c.atol = dt == dtype::BFloat16() ? 1.6e-2 : 0;
                check_operator(c);
            }
    // Large enough for the parallel copy.
    OprCase c;
    c.name = "set large";
    c.shapes = {{300, 300}, {300}};
    c.build = [](const SymbolVarArray& in) -> SymbolVarArray {
        return {opr::set_subtensor(in[0], in[1], {A::slice(0, 10, 290, 7)})};
    };
    c.reference = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {ref_set(in[0], in[1], {A::slice(0, 10, 290, 7)}, false)};
    };
    check_operator(c);
}

TEST(SetSubtensorOpr, ErrorsNameShapesAndDtypes) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 5});
    auto v = opr::Input::make(*g, "v", dtype::Float32(), {3});
    auto vi = opr::Input::make(*g, "vi", dtype::Int32(), {5});
    expect_error<ShapeError>([&] { opr::set_subtensor(x, v, {AxisIndex::slice(0, 0, 2)}); },
                             {"SetSubtensor", "value shape {3}", "slice shape {2,5}", "{4,5}"});
    expect_error<DTypeError>([&] { opr::incr_subtensor(x, vi, {AxisIndex::index(0, 1)}); },
                             {"IncrSubtensor", "\"vi\" has dtype int32", "expected float32"});
    auto b = opr::Input::make(*g, "b", dtype::Bool(), {4});
    expect_error<DTypeError>([&] { opr::incr_subtensor(b, b, {}); },
                             {"IncrSubtensor", "bool", "incrementing takes"});
    expect_error<ShapeError>([&] { opr::set_subtensor(x, v, {AxisIndex::index(0, 9)}); },
                             {"index 9 out of range for axis 0 of size 4"});
}

// ---------------------------------------------------------------- Gather / one-hot / embedding
namespace {

Tensor ref_gather(const Tensor& x, const Tensor& idx, int axis) {
    size_t nd = x.shape().ndim(), a = size_t(axis < 0 ? axis + int(nd) : axis);
    Tensor r(idx.shape(), x.dtype());
    for (size_t i = 0; i < idx.shape().total_nr_elems(); ++i) {
        size_t rest = i, flat = 0, mul = 1;
        for (size_t d = nd; d-- > 0;) {
            size_t k = rest % idx.shape()[d];
            rest /= idx.shape()[d];
            if (d == a) k = size_t(idx.at(i));
            flat += k * mul;
            mul *= x.shape()[d];
        }
        store_from_double(x.dtype(), r.raw_ptr(), i, x.at(flat));
    }
    return r;
}

void fill_indices(std::mt19937& rng, Tensor& t, size_t bound) {
    std::uniform_int_distribution<int32_t> dist(0, int32_t(bound) - 1);
    for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) t.ptr<int32_t>()[i] = dist(rng);
}

} // namespace

TEST(GatherOpr, TakeAlongEachAxis) {
    for (int axis : {0, 1, 2, -1})
        for (DType dt : {dtype::Float32(), dtype::Int64(), dtype::Float16(), dtype::Int8()}) {
            size_t a = size_t(axis < 0 ? axis + 3 : axis);
            TensorShape xs{4, 5, 6}, is = xs;
            is[a] = 3;
            OprCase c;
            c.name = fmt::format("gather axis {} {}", axis, dt.name());
            c.shapes = {xs, is};
            c.dtypes = {dt, dtype::Int32()};
            c.fill = [=](std::mt19937& rng, Tensor& t, size_t k) {
                if (k == 1)
                    fill_indices(rng, t, xs[a]);
                else
                    t = random_tensor(t.shape(), t.dtype(), rng);
            };
            c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                return {opr::gather(in[0], in[1], axis)};
            };
            c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                return {ref_gather(in[0], in[1], axis)};
            };
            c.rtol = c.atol = 0;
            check_operator(c);
        }
}

TEST(IndexingOneHotOpr, PicksOneElementPerPosition) {
    for (bool keep : {false, true})
        for (auto& [xs, axis] : std::vector<std::pair<TensorShape, int>>{
                 {{6, 10}, 1}, {{3, 4, 5}, 1}, {{3, 4, 5}, 0}, {{7}, 0}, {{300, 200}, -1}}) {
            size_t a = size_t(axis < 0 ? axis + int(xs.ndim()) : axis);
            std::vector<size_t> rest;
            for (size_t d = 0; d < xs.ndim(); ++d)
                if (d != a) rest.push_back(xs[d]);
            OprCase c;
            c.name = "indexing_one_hot " + xs.to_string();
            c.shapes = {xs, TensorShape(rest)};
            c.dtypes = {dtype::Float32(), dtype::Int32()};
            TensorShape xsc = xs;
            c.fill = [=](std::mt19937& rng, Tensor& t, size_t k) {
                if (k == 1)
                    fill_indices(rng, t, xsc[a]);
                else
                    t = random_tensor(t.shape(), t.dtype(), rng);
            };
            int ax = axis;
            c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                return {opr::indexing_one_hot(in[0], in[1], ax, keep)};
            };
            c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                TensorShape is = xsc;
                is[a] = 1;
                Tensor idx = in[1].reshape(is);
                Tensor r = ref_gather(in[0], idx, ax);
                if (!keep) r = r.reshape(in[1].shape());
                return {r};
            };
            c.rtol = c.atol = 0;
            check_operator(c);
        }
}

TEST(GatherOpr, ErrorsNameIndexShapesAndRanges) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 5});
    auto fi = opr::Input::make(*g, "fi", dtype::Float32(), {4, 2});
    auto bad = opr::Input::make(*g, "bad", dtype::Int32(), {3, 2});
    expect_error<DTypeError>([&] { opr::gather(x, fi, 1); },
                             {"Gather", "index \"fi\" has dtype float32; expected int32"});
    expect_error<ShapeError>([&] { opr::gather(x, bad, 1); },
                             {"Gather", "index shape {3,2}", "input shape {4,5}"});
    expect_error<ShapeError>([&] { opr::indexing_one_hot(x, bad, 1); },
                             {"IndexingOneHot", "{3,2}", "expected {4}"});
    Tensor xv = tensor_of({2, 3}, dtype::Float32(), {0, 1, 2, 3, 4, 5});
    Tensor iv = tensor_of({2, 1}, dtype::Int32(), {2, 3});
    expect_error<ValueError>(
        [&] {
            run_graph({xv, iv}, [](ComputingGraph&, const SymbolVarArray& in) {
                return SymbolVarArray{opr::gather(in[0], in[1], 1)};
            });
        },
        {"Gather", "index 3 at position 1 is out of range for axis 1 of size 3"});
}

TEST(EmbeddingOpr, LooksUpRowsForIdsOfAnyShape) {
    for (auto& ids : std::vector<TensorShape>{{2, 3}, {}, {5}, {0, 4}, {2, 2, 2}})
        for (DType dt : {dtype::Float32(), dtype::BFloat16(), dtype::Int32()}) {
            OprCase c;
            c.name = "embedding " + ids.to_string();
            c.shapes = {{10, 4}, ids};
            c.dtypes = {dt, dtype::Int32()};
            c.fill = [](std::mt19937& rng, Tensor& t, size_t k) {
                if (k == 1)
                    fill_indices(rng, t, 10);
                else
                    t = random_tensor(t.shape(), t.dtype(), rng);
            };
            c.build = [](const SymbolVarArray& in) -> SymbolVarArray {
                return {opr::embedding(in[0], in[1])};
            };
            c.reference = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                std::vector<size_t> dims = in[1].shape().dims();
                dims.push_back(4);
                Tensor r(TensorShape(dims), in[0].dtype());
                for (size_t i = 0; i < in[1].shape().total_nr_elems(); ++i)
                    for (size_t j = 0; j < 4; ++j)
                        store_from_double(in[0].dtype(), r.raw_ptr(), i * 4 + j,
                                          in[0].at(size_t(in[1].at(i)) * 4 + j));
                return {r};
            };
            c.rtol = c.atol = 0;
            check_operator(c);
        }
}

TEST(EmbeddingOpr, OutOfRangeIdsNameTheIdAndTheTableSize) {
    Tensor table = tensor_of({3, 2}, dtype::Float32(), {0, 1, 2, 3, 4, 5});
    for (int bad : {3, -1}) {
        Tensor ids = tensor_of({2}, dtype::Int32(), {0, double(bad)});
        expect_error<ValueError>(
            [&] {
                run_graph({table, ids}, [](ComputingGraph&, const SymbolVarArray& in) {
                    return SymbolVarArray{opr::embedding(in[0], in[1])};
                });
            },
            {"Embedding", fmt::format("id {} at position 1", bad), "table of 3 rows",
             "valid ids: 0..2"});
    }
    auto g = ComputingGraph::make();
    auto t3 = opr::Input::make(*g, "t3", dtype::Float32(), {2, 3, 4});
    auto ids = opr::Input::make(*g, "ids", dtype::Int32(), {2});
    auto fids = opr::Input::make(*g, "fids", dtype::Float32(), {2});
    expect_error<ShapeError>([&] { opr::embedding(t3, ids); },
                             {"Embedding", "table has shape {2,3,4}", "2 dims"});
    auto t2 = opr::Input::make(*g, "t2", dtype::Float32(), {5, 4});
    expect_error<DTypeError>([&] { opr::embedding(t2, fids); },
                             {"Embedding", "ids \"fids\" has dtype float32; expected int32"});
}

// ---------------------------------------------------------------- Concat / Split
TEST(ConcatOpr, JoinsAlongEachAxis) {
    struct Case {
        std::vector<TensorShape> shapes;
        int axis;
    };
    std::vector<Case> cases = {
        {{{2, 3}, {4, 3}}, 0},
        {{{2, 3}, {2, 1}, {2, 5}}, 1},
        {{{2, 3, 4}, {2, 2, 4}}, -2},
        {{{3}, {0}, {2}}, 0},
        {{{5, 2}}, 1},
        {{{0, 3}, {0, 2}}, 1},
        {{{2, 40000}, {2, 30000}}, 1},
        {{{20000, 2}, {20000, 3}}, 1},
    };
    for (auto& cs : cases)
        for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::Int64()}) {
            OprCase c;
            c.name = fmt::format("concat axis {}", cs.axis);
            c.shapes = cs.shapes;
            c.dtypes.assign(cs.shapes.size(), dt);
            int axis = cs.axis;
            c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                return {opr::concat(in, axis)};
            };
            c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                size_t nd = in[0].shape().ndim(), a = size_t(axis < 0 ? axis + int(nd) : axis);
                TensorShape os = in[0].shape();
                os[a] = 0;
                for (auto& t : in) os[a] += t.shape()[a];
                Tensor r(os, dt);
                size_t off = 0;
                for (auto& t : in) {
                    TensorLayout l = r.layout();
                    l[a] = t.shape()[a];
                    if (!l.is_empty()) {
                        Tensor dst = r.view(l, off * size_t(r.layout().stride[a]) * dt.size());
                        dst.copy_from(t);
                    }
                    off += t.shape()[a];
                }
                return {r};
            };
            c.rtol = c.atol = 0;
            check_operator(c);
        }
}

TEST(ConcatOpr, MismatchedShapesNameBoth) {
    auto g = ComputingGraph::make();
    auto a = opr::Input::make(*g, "a", dtype::Float32(), {2, 3});
    auto b = opr::Input::make(*g, "b", dtype::Float32(), {3, 4});
    auto c = opr::Input::make(*g, "c", dtype::Int32(), {2, 3});
    expect_error<ShapeError>(
        [&] {
            opr::concat({a, b}, 1);
        },
        {"Concat(axis=1)", "\"b\" has shape {3,4}", "\"a\" has {2,3}", "every dim but axis 1"});
    expect_error<ShapeError>([&] { opr::concat({a, b}, 2); }, {"axis 2", "rank-2"});
    expect_error<DTypeError>([&] { opr::concat({a, c}, 0); }, {"Concat", "float32", "int32"});
    expect_error<GraphError>([&] { opr::concat({}, 0); }, {"Concat", "at least one"});
}

TEST(SplitOpr, SizesAndEqualPartsAsViews) {
    for (int axis : {0, 1, -1}) {
        OprCase c;
        c.name = fmt::format("split axis {}", axis);
        c.shapes = {{6, 6}};
        c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
            auto parts = opr::split(in[0], axis, std::vector<size_t>{1, 0, 3, 2});
            auto thirds = opr::split(in[0], axis, size_t(3));
            SymbolVarArray outs = parts;
            outs.push_back(thirds[2] * 1.0);
            return outs;
        };
        c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
            std::vector<Tensor> res;
            long start = 0;
            for (long len : {1, 0, 3, 2}) {
                res.push_back(ref_subtensor(in[0], {AxisIndex::slice(axis, start, start + len)}));
                start += len;
            }
            res.push_back(ref_subtensor(in[0], {AxisIndex::slice(axis, 4, 6)}));
            return res;
        };
        c.rtol = c.atol = 0;
        check_operator(c);
    }
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    auto parts = opr::split(x, 1, size_t(3));
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[1].shape(), (TensorShape{4, 2}));
    EXPECT_EQ(parts[1].name(), parts[1].node()->owner()->name() + ":1");
}

TEST(SplitOpr, ErrorsNameTheLengthAndTheParts) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {4, 6});
    expect_error<ShapeError>(
        [&] {
            opr::split(x, 1, std::vector<size_t>{2, 3});
        },
        {"Split", "sizes sum to 5 but axis 1 of {4,6} has length 6"});
    expect_error<ShapeError>([&] { opr::split(x, 1, size_t(4)); },
                             {"axis 1 of {4,6} has length 6, not divisible into 4 parts"});
    expect_error<ShapeError>([&] { opr::split(x, 3, size_t(2)); }, {"axis 3", "rank-2"});
    expect_error<GraphError>([&] { opr::split(x, 0, size_t(0)); }, {"Split"});
}
