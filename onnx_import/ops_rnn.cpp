// ONNX's recurrent layers (RNN, GRU, LSTM) → braid: the recurrence unrolled over the sequence,
// which import knows statically. The input projections of all steps are one matrix product;
// each step adds its recurrent product and gates. Per-sample sequence lengths (a runtime input)
// become masks: a finished sample keeps its state and outputs zeros.
#include "op_util.h"

#include "operators/concat_split.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/matmul.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

namespace braid::onnx_import {

using namespace braid::opr;

namespace {

enum class Cell { RNN, GRU, LSTM };

//! An activation named in the `activations` attribute, with its alpha and beta.
struct Activation {
    std::string name;
    float alpha = 0, beta = 0;
};

SymbolVar activate(const NodeCtx& c, const Activation& a, SymbolVar x) {
    const std::string& n = a.name;
    if (n == "Sigmoid") return sigmoid(x);
    if (n == "Tanh") return tanh(x);
    if (n == "Relu") return relu(x);
    if (n == "LeakyRelu") return where(less(x, scalar_like(x, 0)), x * double(a.alpha), x);
    if (n == "HardSigmoid") return clip(x * double(a.alpha) + double(a.beta), 0.0, 1.0);
    if (n == "Affine") return x * double(a.alpha) + double(a.beta);
    if (n == "ScaledTanh") return tanh(x * double(a.beta)) * double(a.alpha);
    if (n == "Softsign") return x / (abs(x) + 1.0);
    if (n == "Softplus") return log1p(exp(x));
    if (n == "Elu") return where(less(x, scalar_like(x, 0)), expm1(x) * double(a.alpha), x);
    c.unsupported("activation \"" + n + "\"");
}

//! The activations of each direction: the attribute's, else the cell's defaults.
std::vector<std::vector<Activation>> activations(const NodeCtx& c, Cell cell, size_t dirs) {
    std::vector<std::string> defaults = cell == Cell::RNN ? std::vector<std::string>{"Tanh"}
                                        : cell == Cell::GRU
                                            ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                            : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    size_t per = defaults.size();
    std::vector<Activation> all;
    if (auto* a = c.attr("activations")) {
        for (auto& s : a->strings()) all.push_back({s});
        auto* al = c.attr("activation_alpha");
        auto* be = c.attr("activation_beta");
        for (size_t i = 0; i < all.size(); ++i) {
            // Defaults of the parameterized activations, as ONNX defines them.
            if (all[i].name == "LeakyRelu") all[i].alpha = 0.01f;
            if (all[i].name == "HardSigmoid") all[i].alpha = 0.2f, all[i].beta = 0.5f;
            if (all[i].name == "Elu" || all[i].name == "ScaledTanh" || all[i].name == "Affine")
                all[i].alpha = 1.f, all[i].beta = 1.f;
            if (al && int(i) < al->floats_size()) all[i].alpha = al->floats(int(i));
            if (be && int(i) < be->floats_size()) all[i].beta = be->floats(int(i));
        }
    } else {
        for (size_t d = 0; d < dirs; ++d)
            for (auto& n : defaults) all.push_back({n});
    }
    if (all.size() != per * dirs)
        c.invalid(fmt::format("{} activations; this cell takes {} per direction", all.size(), per));
    std::vector<std::vector<Activation>> res(dirs);
    for (size_t d = 0; d < dirs; ++d)
        res[d].assign(all.begin() + long(d * per), all.begin() + long((d + 1) * per));
    return res;
}

SymbolVar slice0(SymbolVar v, long i) {
    return subtensor(v, {AxisIndex::index(0, i)});
}
//! Gate g of `gates` stacked blocks of `h` along the last axis.
SymbolVar gate(SymbolVar v, long g, long h) {
    int last = int(v.shape().ndim()) - 1;
    return subtensor(v, {AxisIndex::slice(last, g * h, (g + 1) * h)});
}

SymbolVarArray recurrent(const NodeCtx& c, Cell cell) {
    SymbolVar x = c.in(0), w = c.in(1), r = c.in(2);
    if (rank_of(c, x) != 3 || rank_of(c, w) != 3 || rank_of(c, r) != 3)
        c.invalid("X, W and R must be 3-D");
    bool batch_first = c.attr_int("layout", 0) != 0;
    if (batch_first) x = transpose(x, {1, 0, 2});
    long seq = long(x.shape()[0]), batch = long(x.shape()[1]), in = long(x.shape()[2]);
    long h = c.attr_int("hidden_size", long(r.shape()[2]));
    long ngates = cell == Cell::RNN ? 1 : cell == Cell::GRU ? 3 : 4;
    std::string direction = c.attr_string("direction", "forward");
    size_t dirs = direction == "bidirectional" ? 2 : 1;
    if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
        c.invalid("direction \"" + direction + "\"");
    if (w.shape() != TensorShape{dirs, size_t(ngates * h), size_t(in)} ||
        r.shape() != TensorShape{dirs, size_t(ngates * h), size_t(h)})
        c.invalid(fmt::format("W {} and R {} do not fit {} directions of {} gates of hidden size "
                              "{} over input size {}",
                              w.shape().to_string(), r.shape().to_string(), dirs, ngates, h, in));
    if (cell == Cell::LSTM && c.attr_int("input_forget", 0)) c.unsupported("input_forget 1");
    auto acts = activations(c, cell, dirs);
    float clip_at = c.attr_float("clip", 0.f);
    bool lbr = c.attr_int("linear_before_reset", 0) != 0;
    auto state_in = [&](size_t input, size_t d) -> SymbolVar {
        if (!c.has_input(input)) return {};
        SymbolVar s = c.in(input);
        if (batch_first) s = transpose(s, {1, 0, 2});
        return slice0(s, long(d));
    };
    // Where each step is inside its sample's sequence: [seq, batch, 1].
    SymbolVar live;
    if (c.has_input(4)) {
        SymbolVar lens = TypeCvt::make(c.in(4), dtype::Int32()).reshape({1, batch, 1});
        SymbolVar steps = arange(c.graph(), 0, double(seq), 1, dtype::Int32()).reshape({seq, 1, 1});
        live = less(steps, lens);
    }
    SymbolVarArray ys, hs, cs;
    for (size_t d = 0; d < dirs; ++d) {
        bool reverse = direction == "reverse" || d == 1;
        SymbolVar wd = slice0(w, long(d)), rd = slice0(r, long(d));
        // Input projections of every step at once: [seq, batch, gates * h].
        SymbolVar xw =
            matmul(x.reshape({seq * batch, in}), wd, false, true).reshape({seq, batch, ngates * h});
        SymbolVar wb, rb;
        if (c.has_input(3)) {
            SymbolVar b = slice0(c.in(3), long(d));
            wb = subtensor(b, {AxisIndex::slice(0, 0, ngates * h)});
            rb = subtensor(b, {AxisIndex::slice(0, ngates * h, 2 * ngates * h)});
            xw = xw + wb;
        }
        SymbolVar ht = state_in(5, d), ct = cell == Cell::LSTM ? state_in(6, d) : SymbolVar{};
        if (!ht.node()) ht = zeros_like(gate(slice0(xw, 0), 0, h));
        if (cell == Cell::LSTM && !ct.node()) ct = zeros_like(ht);
        SymbolVar peep =
            cell == Cell::LSTM && c.has_input(7) ? slice0(c.in(7), long(d)) : SymbolVar{};
        auto pre = [&](SymbolVar v) { return clip_at > 0 ? clip(v, -clip_at, clip_at) : v; };
        const auto& act = acts[d];
        std::vector<SymbolVar> outs(static_cast<size_t>(seq));
        for (long k = 0; k < seq; ++k) {
            long t = reverse ? seq - 1 - k : k;
            SymbolVar gx = slice0(xw, t);
            SymbolVar gh = matmul(ht, rd, false, true);
            if (rb.node()) gh = gh + rb;
            SymbolVar h_new, c_new;
            if (cell == Cell::RNN) {
                h_new = activate(c, act[0], pre(gx + gh));
            } else if (cell == Cell::GRU) {
                SymbolVar z = activate(c, act[0], pre(gate(gx, 0, h) + gate(gh, 0, h)));
                SymbolVar rr = activate(c, act[0], pre(gate(gx, 1, h) + gate(gh, 1, h)));
                SymbolVar cand;
                if (lbr) {
                    // The reset gate scales the recurrent product (with its bias).
                    cand = gate(gx, 2, h) + rr * gate(gh, 2, h);
                } else {
                    // The reset gate scales the state before its product.
                    SymbolVar rh = subtensor(rd, {AxisIndex::slice(0, 2 * h, 3 * h)});
                    cand = gate(gx, 2, h) + matmul(rr * ht, rh, false, true);
                    if (rb.node()) cand = cand + gate(rb, 2, h);
                }
                SymbolVar hh = activate(c, act[1], pre(cand));
                h_new = (1.0 - z) * hh + z * ht;
            } else {
                SymbolVar g = gx + gh;
                SymbolVar gi = gate(g, 0, h), go = gate(g, 1, h), gf = gate(g, 2, h),
                          gc = gate(g, 3, h);
                if (peep.node()) {
                    gi = gi + gate(peep, 0, h) * ct;
                    gf = gf + gate(peep, 2, h) * ct;
                }
                SymbolVar i = activate(c, act[0], pre(gi)), f = activate(c, act[0], pre(gf));
                c_new = f * ct + i * activate(c, act[1], pre(gc));
                if (peep.node()) go = go + gate(peep, 1, h) * c_new;
                h_new = activate(c, act[0], pre(go)) * activate(c, act[2], c_new);
            }
            if (live.node()) {
                SymbolVar m = Broadcast::make(slice0(live, t), h_new.shape());
                outs[size_t(t)] = where(m, h_new, zeros_like(h_new));
                h_new = where(m, h_new, ht);
                if (c_new.node()) c_new = where(m, c_new, ct);
            } else {
                outs[size_t(t)] = h_new;
            }
            ht = h_new;
            if (c_new.node()) ct = c_new;
        }
        SymbolVarArray steps;
        for (auto& o : outs) steps.push_back(expand_dims(o, {0}));
        ys.push_back(expand_dims(concat(steps, 0), {1})); // [seq, 1, batch, h]
        hs.push_back(expand_dims(ht, {0}));
        if (ct.node()) cs.push_back(expand_dims(ct, {0}));
    }
    SymbolVar y = dirs == 1 ? ys[0] : concat(ys, 1);
    SymbolVar yh = dirs == 1 ? hs[0] : concat(hs, 0);
    SymbolVar yc = cs.empty() ? SymbolVar{} : dirs == 1 ? cs[0] : concat(cs, 0);
    if (batch_first) {
        y = transpose(y, {2, 0, 1, 3});
        yh = transpose(yh, {1, 0, 2});
        if (yc.node()) yc = transpose(yc, {1, 0, 2});
    }
    SymbolVarArray res{y, yh};
    if (yc.node()) res.push_back(yc);
    return res;
}

} // namespace

void add_rnn_converters(ConverterTable& t) {
    t["RNN"] = [](const NodeCtx& c) { return recurrent(c, Cell::RNN); };
    t["GRU"] = [](const NodeCtx& c) { return recurrent(c, Cell::GRU); };
    t["LSTM"] = [](const NodeCtx& c) { return recurrent(c, Cell::LSTM); };
}

} // namespace braid::onnx_import
