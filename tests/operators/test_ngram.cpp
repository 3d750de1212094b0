// NgramCount against counts worked out by hand: unigrams once, bigrams at every skip distance,
// rows of a batch apart; and the checks of its pool description.
#include "braid.h"
#include "operators/ngram.h"

#include <gtest/gtest.h>

using namespace braid;

namespace {

opr::NgramCount::Param pool_param() {
    // Unigrams 1 and 3, bigrams (1, 2) and (2, 1); columns in that order.
    opr::NgramCount::Param p;
    p.min_gram_length = 1;
    p.max_gram_length = 2;
    p.max_skip_count = 1;
    p.pool = {1, 3, 1, 2, 2, 1};
    p.ngram_counts = {0, 2};
    p.ngram_indexes = {0, 1, 2, 3};
    return p;
}

} // namespace

TEST(NgramCount, CountsEachPoolNgramPerRowWithSkips) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Int64(), TensorShape{2, 5});
    auto y = opr::NgramCount::make(x, pool_param());
    EXPECT_EQ(y.shape(), (TensorShape{2, 4}));
    auto exec = g->compile({y});
    Tensor t(TensorShape{2, 5}, dtype::Int64());
    // Row 0: 1 twice and 3 once; (1, 2) twice and (2, 1) once next to each other, and with one
    // token skipped (1, 1), (2, 2), (1, 3), none in the pool. Row 1: 1 once; (1, 2) only with a
    // token skipped.
    int64_t v[] = {1, 2, 1, 2, 3, 1, 9, 2, 0, 0};
    std::copy(v, v + 10, t.ptr<int64_t>());
    exec->feed("x", t).run();
    Tensor out = exec->output(0).contiguous();
    std::vector<float> got(out.ptr<float>(), out.ptr<float>() + 8);
    EXPECT_EQ(got, (std::vector<float>{2, 1, 2, 1, 1, 0, 1, 0}));
    // Without skips the skipped (1, 2) of row 1 is not counted.
    auto p = pool_param();
    p.max_skip_count = 0;
    auto g2 = ComputingGraph::make();
    auto x2 = opr::Input::make(*g2, "x", dtype::Int64(), TensorShape{2, 5});
    auto exec2 = g2->compile({opr::NgramCount::make(x2, p)});
    exec2->feed("x", t).run();
    Tensor out2 = exec2->output(0).contiguous();
    EXPECT_EQ(std::vector<float>(out2.ptr<float>(), out2.ptr<float>() + 8),
              (std::vector<float>{2, 1, 2, 1, 1, 0, 0, 0}));
}

TEST(NgramCount, APoolTheCountsDoNotDescribeIsAValueError) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Int64(), TensorShape{5});
    auto p = pool_param();
    p.ngram_counts = {0, 3}; // three tokens of bigrams: not a whole number of them
    EXPECT_THROW(opr::NgramCount::make(x, p), ValueError);
    p = pool_param();
    p.ngram_indexes = {0, 1, 2}; // one index short
    EXPECT_THROW(opr::NgramCount::make(x, p), ValueError);
    auto f = opr::Input::make(*g, "f", dtype::Float32(), TensorShape{5});
    EXPECT_THROW(opr::NgramCount::make(f, pool_param()), DTypeError);
}
