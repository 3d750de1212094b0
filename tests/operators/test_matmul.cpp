// MatMul and BatchedMatMul against plain loops: transposes, batch broadcasting, size-1 and
// empty dims, every float dtype, the tiled parallel GEMM paths, and each error message.
#include "dense_helpers.h"

#include "base/thread_pool.h"
#include "operators/dense_kernels.h"

using namespace braid;
using namespace braid::test;

namespace {

//! Element (i, j) of op(x) where x is [rows, cols] stored row-major at `base`.
double op_at(const std::vector<double>& x, size_t base, bool trans, size_t cols, size_t i,
             size_t j) {
    return trans ? x[base + j * cols + i] : x[base + i * cols + j];
}

//! Reference batched matmul with numpy broadcasting of the batch dims.
Tensor ref_batched_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, DType out_dtype) {
    const auto &sa = a.shape(), &sb = b.shape();
    size_t ra = sa.ndim(), rb = sb.ndim();
    size_t m = ta ? sa[ra - 1] : sa[ra - 2], k = ta ? sa[ra - 2] : sa[ra - 1];
    size_t n = tb ? sb[rb - 2] : sb[rb - 1];
    size_t nd = std::max(ra, rb) - 2;
    std::vector<size_t> batch(nd);
    for (size_t d = 0; d < nd; ++d) {
        auto dim = [&](const TensorShape& s, size_t r) -> size_t {
            ptrdiff_t i = ptrdiff_t(d) - ptrdiff_t(nd) + ptrdiff_t(r - 2);
            return i < 0 ? 1 : s[size_t(i)];
        };
        size_t da = dim(sa, ra), db = dim(sb, rb);
        batch[d] = da == 1 ? db : da;
    }
    std::vector<size_t> out_dims = batch;
    out_dims.push_back(m);
    out_dims.push_back(n);
    TensorShape out_shape(out_dims);
    auto av = values_of(a), bv = values_of(b);
    size_t nbatch = 1;
    for (size_t x : batch) nbatch *= x;
    std::vector<double> out(out_shape.total_nr_elems());
    for (size_t bi = 0; bi < nbatch; ++bi) {
        // Matrix index into a and b: unravel bi over `batch`, clamp broadcast dims to 0.
        size_t rem = bi, ia = 0, ib = 0, stride_a = 1, stride_b = 1;
        for (size_t d = nd; d-- > 0;) {
            size_t idx = rem % batch[d];
            rem /= batch[d];
            ptrdiff_t da = ptrdiff_t(d) - ptrdiff_t(nd) + ptrdiff_t(ra - 2);
            ptrdiff_t db = ptrdiff_t(d) - ptrdiff_t(nd) + ptrdiff_t(rb - 2);
            if (da >= 0) {
                size_t dim = sa[size_t(da)];
                ia += (dim == 1 ? 0 : idx) * stride_a;
                stride_a *= dim;
            }
            if (db >= 0) {
                size_t dim = sb[size_t(db)];
                ib += (dim == 1 ? 0 : idx) * stride_b;
                stride_b *= dim;
            }
        }
        size_t a_base = ia * m * k, b_base = ib * k * n;
        for (size_t i = 0; i < m; ++i)
            for (size_t j = 0; j < n; ++j) {
                double s = 0;
                for (size_t p = 0; p < k; ++p)
                    s += op_at(av, a_base, ta, ta ? m : k, i, p) *
                         op_at(bv, b_base, tb, tb ? k : n, p, j);
                out[(bi * m + i) * n + j] = s;
            }
    }
    return tensor_of(out_shape, out_dtype, out);
}

TensorShape with_trans(TensorShape s, bool trans) {
    if (trans) std::swap(s[s.ndim() - 1], s[s.ndim() - 2]);
    return s;
}

void check_batched(const TensorShape& a, const TensorShape& b, bool ta, bool tb,
                   const DenseDType& dt) {
    OprCase c;
    c.name = fmt::format("batched_matmul {} x {} ta={} tb={} {}", a.to_string(), b.to_string(), ta,
                         tb, dt.dtype.name());
    c.shapes = {with_trans(a, ta), with_trans(b, tb)};
    c.dtypes = {dt.dtype, dt.dtype};
    c.rtol = dt.rtol;
    c.atol = dt.atol;
    c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
        return {opr::batched_matmul(in[0], in[1], ta, tb)};
    };
    c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {ref_batched_matmul(in[0], in[1], ta, tb, dt.dtype)};
    };
    check_operator(c);
}

} // namespace

TEST(MatMulOpr, EveryFloatDtypeAndEmptyDims) {
    for (auto& dt : dense_dtypes())
        for (auto [m, k, n] : {std::tuple<size_t, size_t, size_t>{5, 7, 3},
                               {1, 1, 1},
                               {0, 4, 3},
                               {3, 0, 2},
                               {4, 3, 0},
                               {65, 33, 70},
                               {97, 45, 131}})
            for (bool ta : {false, true})
                for (bool tb : {false, true}) {
                    OprCase c;
                    c.name = fmt::format("matmul {}x{}x{} ta={} tb={} {}", m, k, n, ta, tb,
                                         dt.dtype.name());
                    c.shapes = {ta ? TensorShape{k, m} : TensorShape{m, k},
                                tb ? TensorShape{n, k} : TensorShape{k, n}};
                    c.dtypes = {dt.dtype, dt.dtype};
                    c.rtol = dt.rtol;
                    c.atol = dt.atol;
                    c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
                        return {opr::matmul(in[0], in[1], ta, tb)};
                    };
                    c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                        return {ref_batched_matmul(in[0], in[1], ta, tb, dt.dtype)};
                    };
                    check_operator(c);
                }
}

TEST(MatMulOpr, RejectsNonFloatMixedDtypesAndWrongRank) {
    auto g = ComputingGraph::make();
    auto f = opr::Input::make(*g, "f", dtype::Float32(), {2, 2});
    auto h = opr::Input::make(*g, "h", dtype::Float16(), {2, 2});
    auto i = opr::Input::make(*g, "i", dtype::Int32(), {2, 2});
    auto r3 = opr::Input::make(*g, "r3", dtype::Float32(), {2, 2, 2});
    expect_error<DTypeError>([&] { opr::matmul(i, i); }, {"MatMul", "int32"});
    expect_error<DTypeError>([&] { opr::matmul(f, h); }, {"float32", "float16"});
    expect_error<ShapeError>([&] { opr::matmul(f, r3); }, {"2-D", "{2,2}", "{2,2,2}"});
}

TEST(BatchedMatMulOpr, BroadcastsBatchDimsLikeNumpy) {
    DenseDType f32 = dense_dtypes()[0];
    struct Case {
        TensorShape a, b;
    };
    std::vector<Case> cases = {
        {{2, 3, 4}, {2, 4, 5}},       // same batch
        {{3, 4}, {4, 5}},             // no batch dims
        {{2, 1, 3, 4}, {5, 4, 6}},    // broadcast both ways, ranks differ
        {{4, 3, 4}, {4, 5}},          // shared right-hand matrix: one folded GEMM
        {{1, 3, 4}, {6, 4, 2}},       // left-hand matrix shared
        {{2, 3, 1, 4}, {2, 3, 4, 1}}, // m = n = 1
        {{0, 3, 4}, {4, 5}},          // empty batch
        {{2, 3, 0}, {2, 0, 4}},       // k = 0: zeros
        {{2, 0, 3}, {1, 3, 4}},       // m = 0
        {{3, 70, 40}, {3, 40, 90}},   // each GEMM big enough to tile
    };
    for (auto& cs : cases)
        for (bool ta : {false, true})
            for (bool tb : {false, true}) check_batched(cs.a, cs.b, ta, tb, f32);
}

TEST(BatchedMatMulOpr, HalfPrecisionComputesInFloat32) {
    for (auto& dt : dense_dtypes()) {
        check_batched({2, 1, 5, 7}, {3, 7, 4}, false, true, dt);
        check_batched({6, 9, 8}, {8, 3}, true, false, dt);
    }
}

TEST(BatchedMatMulOpr, ErrorsNameTheShapes) {
    auto g = ComputingGraph::make();
    auto in = [&](const char* name, TensorShape s, DType dt = dtype::Float32()) {
        return opr::Input::make(*g, name, dt, s);
    };
    expect_error<ShapeError>(
        [&] {
            opr::batched_matmul(in("a", {2, 3, 4}), in("b", {3, 4, 5}));
        },
        {"BatchedMatMul", "{2,3,4}", "{3,4,5}", "broadcast"});
    expect_error<ShapeError>(
        [&] {
            opr::batched_matmul(in("c", {2, 3, 4}), in("d", {2, 5, 6}));
        },
        {"inner dims", "{2,3,4}", "{2,5,6}"});
    expect_error<ShapeError>(
        [&] {
            opr::batched_matmul(in("e", {4}), in("f", {4, 2}));
        },
        {"at least 2 dims", "{4}", "{4,2}"});
    expect_error<DTypeError>(
        [&] {
            opr::batched_matmul(in("g", {2, 2}, dtype::Int8()), in("h", {2, 2}, dtype::Int8()));
        },
        {"BatchedMatMul", "int8"});
}

TEST(DenseKernels, TiledAndBatchedGemmsMatchOneBlasCall) {
    // Odd sizes and every transpose, with more threads than batch items so GEMMs are tiled.
    size_t saved = kernel_threads();
    set_kernel_threads(4);
    std::mt19937 rng(3);
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            size_t m = 97, n = 131, k = 45, batch = 3;
            std::vector<Tensor> a, b, c, want;
            std::vector<const float*> ap, bp;
            std::vector<float*> cp;
            for (size_t i = 0; i < batch; ++i) {
                a.push_back(random_tensor(ta ? TensorShape{k, m} : TensorShape{m, k},
                                          dtype::Float32(), rng));
                b.push_back(random_tensor(tb ? TensorShape{n, k} : TensorShape{k, n},
                                          dtype::Float32(), rng));
                c.push_back(random_tensor({m, n}, dtype::Float32(), rng));
                want.push_back(c.back().copy());
                ap.push_back(a.back().ptr<float>());
                bp.push_back(b.back().ptr<float>());
                cp.push_back(c.back().ptr<float>());
                opr::kern::sgemm(ta, tb, m, n, k, 0.5f, ap.back(), ta ? m : k, bp.back(),
                                 tb ? k : n, 2.f, want.back().ptr<float>(), n);
            }
            opr::kern::sgemm_batched(ta, tb, m, n, k, 0.5f, ap.data(), ta ? m : k, bp.data(),
                                     tb ? k : n, 2.f, cp.data(), n, batch);
            for (size_t i = 0; i < batch; ++i)
                expect_tensor_near(c[i], want[i], 1e-5, 1e-5, fmt::format("batched item {}", i));
            Tensor c0 = random_tensor({m, n}, dtype::Float32(), rng), w0 = c0.copy();
            opr::kern::sgemm_parallel(ta, tb, m, n, k, 1.f, ap[0], ta ? m : k, bp[0], tb ? k : n,
                                      1.f, c0.ptr<float>(), n);
            opr::kern::sgemm(ta, tb, m, n, k, 1.f, ap[0], ta ? m : k, bp[0], tb ? k : n, 1.f,
                             w0.ptr<float>(), n);
            expect_tensor_near(c0, w0, 1e-5, 1e-5, "parallel gemm");
        }
    set_kernel_threads(saved);
}
