// NgramCount: how often each n-gram of a pool occurs in each row of integer tokens, with skips
// (the counting of ONNX TfIdfVectorizer; the importer adds its IDF and TF-IDF weighting).
//
// x (int32 or int64) [C] or [B, C] -> float32 [out] or [B, out], out = max(ngram_indexes) + 1.
// The pool lists n-grams by size: the 1-grams from ngram_counts[0], the 2-grams from
// ngram_counts[1], and so on to the end of the pool; the k-th n-gram of the pool (counting every
// size) is counted in column ngram_indexes[k]. In each row, for each skip distance d from 1 to
// max_skip_count + 1, an n-gram is the tokens at s, s + d, ..., s + (n - 1) d for every start s;
// those of min_gram_length to max_gram_length tokens that are in the pool are counted, 1-grams
// only at d = 1 (a skip changes nothing for them). No gradient. CPU only.
#pragma once

#include "graph/computing_graph.h"
#include "graph/param_fields.h"
#include "graph/symbol_var.h"

#include <vector>

namespace braid::opr {

//! The params of NgramCount.
struct NgramCountParam {
    int min_gram_length = 1, max_gram_length = 1;
    int max_skip_count = 0;
    std::vector<long> pool;          //!< the n-grams' tokens, 1-grams first
    std::vector<long> ngram_counts;  //!< where each size's n-grams start in the pool
    std::vector<long> ngram_indexes; //!< each n-gram's output column, in pool order
    static constexpr auto fields() {
        using P = NgramCountParam;
        return std::tuple{param_field("min_gram_length", &P::min_gram_length),
                          param_field("max_gram_length", &P::max_gram_length),
                          param_field("max_skip_count", &P::max_skip_count),
                          param_field("pool", &P::pool),
                          param_field("ngram_counts", &P::ngram_counts),
                          param_field("ngram_indexes", &P::ngram_indexes)};
    }
};

//! Counts of the pool's n-grams in each row of x.
class NgramCount final : public ParamOperator<NgramCount, NgramCountParam> {
public:
    NgramCount(VarNode* x, Param param, const OperatorConfig& config);
    //! Inserts the operator; throws ValueError for gram lengths, counts or indexes that do not
    //! describe the pool, DTypeError for x not int32 or int64, ShapeError (at shape inference)
    //! for x not of rank 1 or 2.
    static SymbolVar make(SymbolVar x, Param param, const OperatorConfig& config = {});

    const char* type_name() const override { return "NgramCount"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    void execute(ExecCtx& ctx) override;
};

} // namespace braid::opr
