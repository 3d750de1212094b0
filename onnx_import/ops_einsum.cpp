// ONNX Einsum → braid: each operand's repeated letters become diagonals and its private letters
// sums; two operands then meet in one batched matrix product (batch letters, kept letters of
// each side, contracted letters), whose result is put in the output's letter order.
#include "op_util.h"

#include "operators/elemwise.h"
#include "operators/matmul.h"
#include "operators/reduce.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace braid::onnx_import {

using namespace braid::opr;

namespace {

//! An operand with one letter per dim.
struct Term {
    SymbolVar v;
    std::string letters;
};

std::vector<size_t> dims_of(const SymbolVar& v) {
    return v.shape().dims();
}

//! `spec` with "..." replaced by capital letters for the `rank` - (letters) dims it covers
//! (the same letters in every operand, aligned to the right as numpy broadcasts them).
std::string expand_ellipsis(const NodeCtx& c, const std::string& spec, size_t rank,
                            size_t& ellipsis_rank) {
    auto at = spec.find("...");
    if (at == std::string::npos) {
        if (spec.size() != rank)
            c.invalid(fmt::format("subscripts \"{}\" for an operand of rank {}", spec, rank));
        return spec;
    }
    size_t named = spec.size() - 3;
    if (named > rank) c.invalid(fmt::format("subscripts \"{}\" for rank {}", spec, rank));
    size_t n = rank - named;
    ellipsis_rank = std::max(ellipsis_rank, n);
    std::string caps;
    for (size_t i = 0; i < n; ++i) caps += char('Z' - (n - 1 - i));
    return spec.substr(0, at) + caps + spec.substr(at + 3);
}

//! Repeated letters of one operand become its diagonal.
Term diagonals(const NodeCtx& c, Term t) {
    for (size_t i = 0; i < t.letters.size(); ++i) {
        size_t j = t.letters.find(t.letters[i], i + 1);
        if (j == std::string::npos) continue;
        auto d = dims_of(t.v);
        if (d[i] != d[j])
            c.invalid(fmt::format("letter {} has sizes {} and {}", t.letters[i], d[i], d[j]));
        // Move dims i and j last, merge them, and take positions k * (n + 1).
        std::vector<int> perm;
        for (size_t k = 0; k < d.size(); ++k)
            if (k != i && k != j) perm.push_back(int(k));
        perm.push_back(int(i)), perm.push_back(int(j));
        std::vector<long> shape;
        std::string letters;
        for (size_t k = 0; k < d.size(); ++k)
            if (k != i && k != j) shape.push_back(long(d[k])), letters += t.letters[k];
        long n = long(d[i]);
        shape.push_back(n * n);
        std::vector<int64_t> pos;
        for (long k = 0; k < n; ++k) pos.push_back(k * (n + 1));
        t.v = take(transpose(t.v, perm).reshape(shape), int(shape.size()) - 1, pos);
        t.letters = letters + t.letters[i];
        return diagonals(c, t);
    }
    return t;
}

//! Sums the letters of `t` that no one else needs.
Term sum_private(Term t, const std::string& needed) {
    std::vector<int> axes;
    std::string kept;
    for (size_t i = 0; i < t.letters.size(); ++i)
        if (needed.find(t.letters[i]) == std::string::npos)
            axes.push_back(int(i));
        else
            kept += t.letters[i];
    if (axes.empty()) return t;
    return {reduce_sum(t.v, axes, false), kept};
}

//! t's dims in the order of `order` (a permutation of its letters).
SymbolVar arrange(const Term& t, const std::string& order) {
    std::vector<int> perm;
    for (char ch : order) perm.push_back(int(t.letters.find(ch)));
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == int(i);
    return identity ? t.v : transpose(t.v, perm);
}

SymbolVarArray einsum(const NodeCtx& c) {
    std::string eq;
    for (char ch : c.attr_string("equation", ""))
        if (ch != ' ') eq += ch;
    size_t arrow = eq.find("->");
    std::string lhs = eq.substr(0, arrow);
    std::vector<std::string> specs;
    for (size_t pos = 0; pos <= lhs.size();) {
        size_t comma = std::min(lhs.find(',', pos), lhs.size());
        specs.push_back(lhs.substr(pos, comma - pos));
        pos = comma + 1;
    }
    if (specs.size() != c.nr_inputs())
        c.invalid(fmt::format("equation \"{}\" has {} operands; the node has {} inputs", eq,
                              specs.size(), c.nr_inputs()));
    if (specs.size() > 2) c.unsupported("Einsum of more than two operands");
    size_t ell = 0;
    std::vector<Term> terms;
    for (size_t i = 0; i < specs.size(); ++i) {
        SymbolVar v = c.in(i);
        terms.push_back({v, expand_ellipsis(c, specs[i], rank_of(c, v), ell)});
    }
    std::string out;
    if (arrow != std::string::npos) {
        size_t dummy = ell;
        std::string rhs = eq.substr(arrow + 2);
        out = rhs.find("...") == std::string::npos
                  ? rhs
                  : expand_ellipsis(c, rhs, rhs.size() - 3 + ell, dummy);
    } else {
        // Implicit output: the ellipsis dims, then the letters used once, in order.
        std::map<char, int> uses;
        for (auto& t : terms)
            for (char ch : t.letters) uses[ch]++;
        for (auto& [ch, n] : uses)
            if (ch >= 'A' && ch <= 'Z') out += ch;
        for (auto& [ch, n] : uses)
            if (n == 1 && !(ch >= 'A' && ch <= 'Z')) out += ch;
    }
    for (auto& t : terms) {
        for (char ch : t.letters)
            if (!std::isalpha(static_cast<unsigned char>(ch)))
                c.invalid(fmt::format("equation \"{}\": \"{}\" is not a subscript letter", eq, ch));
        t = diagonals(c, t);
    }
    if (terms.size() == 1) {
        Term t = sum_private(terms[0], out);
        return one(arrange(t, out));
    }
    Term a = sum_private(terms[0], out + terms[1].letters);
    Term b = sum_private(terms[1], out + a.letters);
    std::string batch, only_a, only_b, contract;
    for (char ch : a.letters) {
        bool in_b = b.letters.find(ch) != std::string::npos,
             in_out = out.find(ch) != std::string::npos;
        (in_b ? (in_out ? batch : contract) : only_a) += ch;
    }
    for (char ch : b.letters)
        if (a.letters.find(ch) == std::string::npos) only_b += ch;
    auto size_of = [&](const Term& t, char ch) { return long(t.v.shape()[t.letters.find(ch)]); };
    long nb = 1, m = 1, n = 1, k = 1;
    std::vector<long> result;
    for (char ch : batch) {
        if (size_of(a, ch) != size_of(b, ch))
            c.unsupported(fmt::format("letter {} of sizes {} and {} (broadcast)", ch,
                                      size_of(a, ch), size_of(b, ch)));
        nb *= size_of(a, ch), result.push_back(size_of(a, ch));
    }
    for (char ch : only_a) m *= size_of(a, ch), result.push_back(size_of(a, ch));
    for (char ch : only_b) n *= size_of(b, ch), result.push_back(size_of(b, ch));
    for (char ch : contract) {
        if (size_of(a, ch) != size_of(b, ch))
            c.invalid(
                fmt::format("letter {} has sizes {} and {}", ch, size_of(a, ch), size_of(b, ch)));
        k *= size_of(a, ch);
    }
    SymbolVar am = arrange(a, batch + only_a + contract).reshape({nb, m, k});
    SymbolVar bm = arrange(b, batch + contract + only_b).reshape({nb, k, n});
    SymbolVar y = batched_matmul(am, bm);
    Term r{result.empty() ? y.reshape(std::vector<long>{}) : y.reshape(result),
           batch + only_a + only_b};
    return one(arrange(r, out));
}

} // namespace

void add_einsum_converter(ConverterTable& t) {
    t["Einsum"] = einsum;
}

} // namespace braid::onnx_import
