// Attention against a plain double-precision softmax: causal and full, Sq != Sk (including
// fully masked rows), Dv != D, several key blocks, custom scale, large scores, every float
// dtype, the ring-attention merge property, and each error message.
#include "dense_helpers.h"

#include <cmath>
#include <limits>

using namespace braid;
using namespace braid::test;

namespace {

const double NINF = -std::numeric_limits<double>::infinity();

struct AttnRef {
    std::vector<double> out, lse;
};

AttnRef ref_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                      std::optional<float> scale) {
    const auto &qs = q.shape(), &ks = k.shape(), &vs = v.shape();
    size_t bh = qs[0] * qs[1], sq = qs[2], sk = ks[2], d = qs[3], dv = vs[3];
    double sc = scale ? double(*scale) : 1.0 / std::sqrt(double(d));
    auto qv = values_of(q), kv = values_of(k), vv = values_of(v);
    AttnRef r{std::vector<double>(bh * sq * dv), std::vector<double>(bh * sq)};
    std::vector<double> s(sk);
    for (size_t h = 0; h < bh; ++h)
        for (size_t i = 0; i < sq; ++i) {
            ptrdiff_t last =
                causal ? ptrdiff_t(i) + ptrdiff_t(sk) - ptrdiff_t(sq) : ptrdiff_t(sk) - 1;
            double mx = NINF;
            for (size_t j = 0; j < sk; ++j) {
                if (ptrdiff_t(j) > last) continue;
                double dot = 0;
                for (size_t p = 0; p < d; ++p)
                    dot += qv[(h * sq + i) * d + p] * kv[(h * sk + j) * d + p];
                s[j] = dot * sc;
                mx = std::max(mx, s[j]);
            }
            double* out = r.out.data() + (h * sq + i) * dv; // dv may be 0
            if (mx == NINF) {
                r.lse[h * sq + i] = NINF; // no visible key; out stays 0
                continue;
            }
            double sum = 0;
            for (size_t j = 0; j < sk && ptrdiff_t(j) <= last; ++j) sum += std::exp(s[j] - mx);
            for (size_t j = 0; j < sk && ptrdiff_t(j) <= last; ++j) {
                double w = std::exp(s[j] - mx) / sum;
                for (size_t p = 0; p < dv; ++p) out[p] += w * vv[(h * sk + j) * dv + p];
            }
            r.lse[h * sq + i] = mx + std::log(sum);
        }
    return r;
}

struct AttnCase {
    size_t b, h, sq, sk, d, dv;
    bool causal;
    std::optional<float> scale = std::nullopt;
    double range = 2.0; //!< inputs uniform in [-range, range)
};

void check_attention(const AttnCase& a, const DenseDType& dt) {
    OprCase c;
    c.name =
        fmt::format("attention B={} H={} Sq={} Sk={} D={} Dv={} causal={} scale={} {}", a.b, a.h,
                    a.sq, a.sk, a.d, a.dv, a.causal, a.scale ? *a.scale : -1.f, dt.dtype.name());
    c.shapes = {{a.b, a.h, a.sq, a.d}, {a.b, a.h, a.sk, a.d}, {a.b, a.h, a.sk, a.dv}};
    c.dtypes = {dt.dtype, dt.dtype, dt.dtype};
    c.low = -a.range;
    c.high = a.range;
    c.rtol = dt.rtol * 5;
    c.atol = dt.atol * 5;
    c.build = [=](const SymbolVarArray& in) -> SymbolVarArray {
        return opr::scaled_dot_product_attention(in[0], in[1], in[2], a.causal, a.scale);
    };
    c.reference = [=](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        auto r = ref_attention(in[0], in[1], in[2], a.causal, a.scale);
        return {tensor_of({a.b, a.h, a.sq, a.dv}, dt.dtype, r.out),
                tensor_of({a.b, a.h, a.sq}, dtype::Float32(), r.lse)};
    };
    check_operator(c);
}

} // namespace

TEST(AttentionOpr, MatchesSoftmaxReferenceAcrossShapes) {
    DenseDType f32 = dense_dtypes()[0];
    std::vector<AttnCase> cases = {
        {2, 3, 5, 7, 4, 4, false},
        {2, 3, 5, 7, 4, 4, true}, // Sq < Sk: queries aligned to the last keys
        {1, 2, 9, 4, 3, 5, true}, // Sq > Sk: the first 5 rows see nothing
        {1, 2, 9, 4, 3, 5, false},
        {1, 1, 6, 6, 8, 3, true},       // square causal, Dv < D
        {1, 1, 1, 1, 1, 1, false},      // size-1 everything
        {1, 1, 1, 9, 4, 2, true},       // one query sees every key
        {1, 2, 130, 70, 16, 8, true},   // several query blocks
        {1, 2, 70, 1100, 8, 12, false}, // several key blocks: online softmax rescaling
        {1, 1, 1100, 1100, 4, 4, true}, // key blocks partly masked
        {2, 1, 3, 5, 6, 6, false, 0.7f},
        {1, 2, 6, 6, 4, 4, true, -0.25f},
        {1, 1, 8, 600, 4, 4, false, 1.f, 9.0}, // scores up to ~300: needs the max shift
        {0, 2, 3, 3, 4, 4, false},             // empty batch
        {1, 2, 0, 3, 4, 4, true},              // no queries
        {1, 2, 3, 0, 4, 4, false},             // no keys: out 0, lse -inf
        {1, 2, 3, 5, 4, 0, true},              // Dv = 0: lse only
    };
    for (auto& a : cases) check_attention(a, f32);
}

TEST(AttentionOpr, HalfPrecisionComputesInFloat32) {
    for (auto& dt : dense_dtypes()) {
        check_attention({1, 2, 7, 9, 8, 6, true}, dt);
        check_attention({2, 1, 5, 3, 4, 4, false}, dt);
    }
}

TEST(AttentionOpr, FullyMaskedRowsGiveZeroOutputAndMinusInfinityLse) {
    auto g = ComputingGraph::make();
    auto q = opr::Input::make(*g, "q", dtype::Float32(), {1, 1, 4, 2});
    auto k = opr::Input::make(*g, "k", dtype::Float32(), {1, 1, 2, 2});
    auto v = opr::Input::make(*g, "v", dtype::Float32(), {1, 1, 2, 3});
    auto outs = opr::scaled_dot_product_attention(q, k, v, true);
    auto exec = g->compile({outs[0], outs[1]});
    std::mt19937 rng(5);
    exec->feed(q, random_tensor({1, 1, 4, 2}, dtype::Float32(), rng))
        .feed(k, random_tensor({1, 1, 2, 2}, dtype::Float32(), rng))
        .feed(v, random_tensor({1, 1, 2, 3}, dtype::Float32(), rng));
    exec->run();
    const Tensor &out = exec->output(0), &lse = exec->output(1);
    for (size_t row = 0; row < 2; ++row) { // rows 0 and 1 see key j <= row - 2: none
        EXPECT_EQ(lse.at(row), NINF) << "row " << row;
        for (size_t p = 0; p < 3; ++p) EXPECT_EQ(out.at(row * 3 + p), 0.0) << "row " << row;
    }
    for (size_t row = 2; row < 4; ++row) EXPECT_TRUE(std::isfinite(lse.at(row))) << "row " << row;
}

namespace {

//! Runs attention on host tensors in a fresh graph; returns {out, lse}.
std::vector<Tensor> run_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
    auto g = ComputingGraph::make();
    auto qv = opr::Input::make(*g, "q", q.dtype(), q.shape());
    auto kv = opr::Input::make(*g, "k", k.dtype(), k.shape());
    auto vv = opr::Input::make(*g, "v", v.dtype(), v.shape());
    auto outs = opr::scaled_dot_product_attention(qv, kv, vv, causal);
    auto exec = g->compile({outs[0], outs[1]});
    exec->feed(qv, q).feed(kv, k).feed(vv, v);
    exec->run();
    return {exec->output(0).copy(), exec->output(1).copy()};
}

//! Rows [begin, end) of dim 2 of a [B, H, S, X] tensor (or [B, H, S] when 3-D).
Tensor slice_rows(const Tensor& t, size_t begin, size_t end) {
    const auto& s = t.shape();
    size_t bh = s[0] * s[1], rows = s[2], width = s.ndim() == 4 ? s[3] : 1;
    TensorShape r = s;
    r[2] = end - begin;
    Tensor res(r, t.dtype());
    for (size_t i = 0; i < bh; ++i)
        std::memcpy(res.ptr<float>() + i * (end - begin) * width,
                    t.ptr<float>() + (i * rows + begin) * width,
                    (end - begin) * width * sizeof(float));
    return res;
}

//! The standard merge of two (out, lse) blocks over disjoint key sets of the same queries.
std::vector<Tensor> merge_blocks(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    Tensor out(a[0].shape(), dtype::Float32()), lse(a[1].shape(), dtype::Float32());
    size_t rows = a[1].shape().total_nr_elems(), dv = a[0].shape()[3];
    for (size_t r = 0; r < rows; ++r) {
        double la = a[1].at(r), lb = b[1].at(r);
        double hi = std::max(la, lb);
        double l = hi == NINF ? NINF : hi + std::log(std::exp(la - hi) + std::exp(lb - hi));
        double wa = l == NINF ? 0 : std::exp(la - l), wb = l == NINF ? 0 : std::exp(lb - l);
        lse.ptr<float>()[r] = float(l);
        for (size_t p = 0; p < dv; ++p)
            out.ptr<float>()[r * dv + p] =
                float(wa * a[0].at(r * dv + p) + wb * b[0].at(r * dv + p));
    }
    return {out, lse};
}

} // namespace

TEST(AttentionOpr, MergingKeyBlocksByLseEqualsAttentionOverAllKeys) {
    std::mt19937 rng(11);
    size_t b = 2, h = 3, s = 40, d = 8, dv = 6, split = 17;
    Tensor q = random_tensor({b, h, s, d}, dtype::Float32(), rng);
    Tensor k = random_tensor({b, h, s, d}, dtype::Float32(), rng);
    Tensor v = random_tensor({b, h, s, dv}, dtype::Float32(), rng);

    // Full attention: keys [0, split) and [split, s) as two independent blocks.
    auto full = run_attention(q, k, v, false);
    auto first = run_attention(q, slice_rows(k, 0, split), slice_rows(v, 0, split), false);
    auto second = run_attention(q, slice_rows(k, split, s), slice_rows(v, split, s), false);
    auto merged = merge_blocks(first, second);
    expect_tensor_near(merged[0], full[0], 1e-5, 1e-5, "merged out (full)");
    expect_tensor_near(merged[1], full[1], 1e-5, 1e-5, "merged lse (full)");

    // Causal, as a ring step splits it: the later half of the queries attends to the earlier
    // half of the keys without a mask and to its own half with the causal mask.
    size_t half = s / 2;
    auto causal = run_attention(q, k, v, true);
    Tensor q2 = slice_rows(q, half, s);
    auto past = run_attention(q2, slice_rows(k, 0, half), slice_rows(v, 0, half), false);
    auto diag = run_attention(q2, slice_rows(k, half, s), slice_rows(v, half, s), true);
    auto ring = merge_blocks(past, diag);
    expect_tensor_near(ring[0], slice_rows(causal[0], half, s), 1e-5, 1e-5, "merged out (causal)");
    expect_tensor_near(ring[1], slice_rows(causal[1], half, s), 1e-5, 1e-5, "merged lse (causal)");

    // A block whose rows see no key (lse = -inf) has zero weight in the merge.
    auto none = run_attention(q2, slice_rows(k, 0, 1), slice_rows(v, 0, 1), false);
    for (size_t r = 0; r < none[1].shape().total_nr_elems(); ++r)
        none[1].ptr<float>()[r] = -std::numeric_limits<float>::infinity();
    auto same = merge_blocks(ring, none);
    expect_tensor_near(same[0], ring[0], 0, 0, "merge with an empty block (out)");
    expect_tensor_near(same[1], ring[1], 0, 0, "merge with an empty block (lse)");
}

TEST(AttentionOpr, ErrorsNameTheShapesAndDtypes) {
    auto g = ComputingGraph::make();
    auto in = [&](const char* name, TensorShape s, DType dt = dtype::Float32()) {
        return opr::Input::make(*g, name, dt, s);
    };
    auto q = in("q", {2, 4, 8, 16}), k = in("k", {2, 4, 10, 16}), v = in("v", {2, 4, 10, 32});
    using opr::scaled_dot_product_attention;
    expect_error<ShapeError>(
        [&] {
            scaled_dot_product_attention(in("q3", {4, 8, 16}), k, v);
        },
        {"Attention", "4-D", "{4,8,16}"});
    expect_error<ShapeError>(
        [&] {
            scaled_dot_product_attention(q, in("kh", {2, 2, 10, 16}), v);
        },
        {"batch and head dims", "{2,4,8,16}", "{2,2,10,16}"});
    expect_error<ShapeError>(
        [&] {
            scaled_dot_product_attention(q, in("kd", {2, 4, 10, 8}), v);
        },
        {"head dims differ", "{2,4,8,16}", "{2,4,10,8}"});
    expect_error<ShapeError>(
        [&] {
            scaled_dot_product_attention(q, k, in("vs", {2, 4, 9, 32}));
        },
        {"key counts differ", "{2,4,10,16}", "{2,4,9,32}"});
    expect_error<DTypeError>(
        [&] {
            scaled_dot_product_attention(q, k, in("vh", {2, 4, 10, 32}, dtype::Float16()));
        },
        {"float32, float32 and float16"});
    expect_error<DTypeError>(
        [&] {
            auto qi = in("qi", {1, 1, 2, 2}, dtype::Int32());
            scaled_dot_product_attention(qi, qi, qi);
        },
        {"int32"});
    expect_error<ValueError>(
        [&] {
            scaled_dot_product_attention(q, k, v, false, std::numeric_limits<float>::infinity());
        },
        {"scale must be finite"});
}

TEST(AttentionOpr, OutputsHaveStaticShapesAndLseIsFloat32) {
    auto g = ComputingGraph::make();
    auto q = opr::Input::make(*g, "q", dtype::BFloat16(), {2, 3, 5, 8});
    auto k = opr::Input::make(*g, "k", dtype::BFloat16(), {2, 3, 7, 8});
    auto v = opr::Input::make(*g, "v", dtype::BFloat16(), {2, 3, 7, 4});
    auto outs = opr::scaled_dot_product_attention(q, k, v, true);
    ASSERT_EQ(outs.size(), 2u);
    EXPECT_EQ(outs[0].shape(), (TensorShape{2, 3, 5, 4}));
    EXPECT_EQ(outs[0].dtype(), dtype::BFloat16());
    EXPECT_EQ(outs[1].shape(), (TensorShape{2, 3, 5}));
    EXPECT_EQ(outs[1].dtype(), dtype::Float32());
    EXPECT_EQ(outs[0].name(), outs[0].node()->owner()->name() + ":out");
    EXPECT_EQ(outs[1].name(), outs[1].node()->owner()->name() + ":lse");
}
