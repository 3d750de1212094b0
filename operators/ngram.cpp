#include "operators/ngram.h"

#include "graph/operator_registry.h"
#include "operators/kernel_utils.h"

#include <algorithm>
#include <map>

namespace braid::opr {

NgramCount::NgramCount(VarNode* x, Param param, const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(x);
    add_output();
}

SymbolVar NgramCount::make(SymbolVar x, Param param, const OperatorConfig& config) {
    return x.graph().insert_opr(std::make_unique<NgramCount>(x.node(), param, config))->output(0);
}

namespace {

//! The pool's n-grams in pool order: (tokens, size), every size the counts describe.
std::vector<std::vector<long>> pool_ngrams(const NgramCountParam& p, const std::string& who) {
    std::vector<std::vector<long>> grams;
    for (size_t i = 0; i < p.ngram_counts.size(); ++i) {
        long begin = p.ngram_counts[i];
        long end = i + 1 < p.ngram_counts.size() ? p.ngram_counts[i + 1] : long(p.pool.size());
        long size = long(i) + 1;
        if (begin < 0 || end < begin || end > long(p.pool.size()) || (end - begin) % size != 0)
            BRAID_THROW(ValueError,
                        "{}: ngram_counts[{}] = {} does not start a run of {}-grams in a pool of "
                        "{} tokens (the next starts at {})",
                        who, i, begin, size, p.pool.size(), end);
        for (long at = begin; at < end; at += size)
            grams.emplace_back(p.pool.begin() + at, p.pool.begin() + at + size);
    }
    return grams;
}

} // namespace

void NgramCount::init_output_dtypes() {
    const auto& p = m_param;
    if (p.min_gram_length < 1 || p.max_gram_length < p.min_gram_length || p.max_skip_count < 0)
        BRAID_THROW(ValueError,
                    "{}: gram lengths {} to {} and max_skip_count {}: need 1 <= min <= max and a "
                    "count >= 0",
                    describe(), p.min_gram_length, p.max_gram_length, p.max_skip_count);
    size_t nr = pool_ngrams(p, describe()).size();
    if (p.ngram_indexes.size() != nr ||
        std::any_of(p.ngram_indexes.begin(), p.ngram_indexes.end(), [](long i) { return i < 0; }))
        BRAID_THROW(ValueError,
                    "{}: {} ngram_indexes for the pool's {} n-grams; each needs one index >= 0",
                    describe(), p.ngram_indexes.size(), nr);
    DType dt = input(0)->dtype();
    if (dt != dtype::Int32() && dt != dtype::Int64())
        BRAID_THROW(DTypeError, "{}: input \"{}\" has dtype {}; expected int32 or int64",
                    describe(), input(0)->name(), dt.name());
    output(0)->set_dtype(dtype::Float32());
}

bool NgramCount::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    const TensorShape* x = ctx.shape(0);
    if (!x) return false;
    if (x->ndim() != 1 && x->ndim() != 2)
        BRAID_THROW(ShapeError, "{}: input \"{}\" has shape {}; expected [C] or [B, C]", describe(),
                    input(0)->name(), x->to_string());
    size_t columns = m_param.ngram_indexes.empty()
                         ? 0
                         : size_t(*std::max_element(m_param.ngram_indexes.begin(),
                                                    m_param.ngram_indexes.end())) +
                               1;
    out[0] = x->ndim() == 1 ? TensorShape{columns} : TensorShape{(*x)[0], columns};
    return true;
}

void NgramCount::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const auto& p = m_param;
    size_t rows = x.shape().ndim() == 2 ? x.shape()[0] : 1;
    size_t width = x.shape().ndim() == 2 ? x.shape()[1] : x.shape()[0];
    size_t columns = y.shape()[y.shape().ndim() - 1];
    std::map<std::vector<long>, size_t> column_of;
    auto grams = pool_ngrams(p, describe());
    for (size_t k = 0; k < grams.size(); ++k) {
        long n = long(grams[k].size());
        if (n >= p.min_gram_length && n <= p.max_gram_length)
            column_of.emplace(grams[k], size_t(p.ngram_indexes[k]));
    }
    std::vector<long> tokens(rows * width);
    convert_elements(x.dtype(), x.raw_ptr(), dtype::Int64(), tokens.data(), tokens.size());
    float* counts = y.ptr<float>();
    std::fill(counts, counts + rows * columns, 0.f);
    std::vector<long> gram;
    for (size_t r = 0; r < rows; ++r) {
        const long* row = tokens.data() + r * width;
        for (size_t d = 1; d <= size_t(p.max_skip_count) + 1; ++d) {
            // 1-grams are the same at every skip distance: counted at d = 1 only.
            size_t min_n =
                d == 1 ? size_t(p.min_gram_length) : std::max<size_t>(size_t(p.min_gram_length), 2);
            for (size_t s = 0; s < width; ++s) {
                gram.clear();
                for (size_t n = 1, at = s; n <= size_t(p.max_gram_length) && at < width;
                     ++n, at += d) {
                    gram.push_back(row[at]);
                    if (n < min_n) continue;
                    auto it = column_of.find(gram);
                    if (it != column_of.end()) counts[r * columns + it->second] += 1.f;
                }
            }
        }
    }
}

namespace {

// x rounded to integers, counted against a pool of two 1-grams and a 2-gram, skips of one.
SymbolVarArray ngram_example(SymbolVar x) {
    NgramCountParam p;
    p.max_gram_length = 2;
    p.max_skip_count = 1;
    p.pool = {0, 1, 0, 1};
    p.ngram_counts = {0, 2};
    p.ngram_indexes = {0, 1, 2};
    return {NgramCount::make(x.astype(dtype::Int32()), p)};
}

} // namespace

void register_ngram_operators() {
    OperatorRegistry::instance().add("NgramCount", "ngram", dump_param<NgramCount>,
                                     load_param<NgramCount>, ngram_example);
}

} // namespace braid::opr
