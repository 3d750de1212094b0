// Random dataflow graphs built with braid's own operators, for memory-plan property tests
// and the memplan benchmark: elementwise add/mul/max/relu/neg/abs with numpy broadcasting,
// reshapes (views; optionally to a shape fed at execution, which makes the rest dynamic),
// float16 round trips, and matmuls on small shapes. Inputs come mostly from the last few
// vars (chains and short fan-outs) and sometimes from anywhere (long skips), so lifetimes
// mix short and long. The generator tracks every shape itself, dynamic ones included.
#pragma once

#include "braid.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace braid::testing {

//! What make_random_graph() builds.
struct RandomGraphConfig {
    size_t nr_oprs = 30; //!< operators added after the inputs
    uint64_t seed = 0;
    std::vector<std::string> comp_nodes{"cpu0"}; //!< each operator picks one at random
    bool dynamic_shapes = false;                 //!< some reshapes take a target fed at execution
    size_t max_dim = 64;                         //!< largest feature dimension
    size_t max_elems = 4096;                     //!< largest element count of a matmul
    size_t window = 8;                           //!< most inputs come from the last `window` vars
    //! The other inputs (skip connections) come from the last `skip_reach` vars; 0: any var.
    size_t skip_reach = 0;
    double fetch_probability = 0.08;    //!< each var is fetched with this probability
    double callback_probability = 0.04; //!< each var gets a callback with this probability
};

//! A random graph plus what running it needs.
struct RandomGraph {
    std::shared_ptr<ComputingGraph> graph;
    std::vector<SymbolVar> fetched;   //!< outputs read after execution (the last var first)
    std::vector<SymbolVar> callbacks; //!< outputs observed through callbacks
    std::vector<std::pair<std::string, Tensor>> feeds;
    //! What a memory-plan check observes, fixed at its first compile: compiling may add
    //! operators (copies between comp nodes), which would change sinks() for later compiles.
    std::vector<SymbolVar> observed;

    //! Every var no operator reads: compiling them all covers the whole graph.
    std::vector<SymbolVar> sinks() const {
        std::vector<SymbolVar> res;
        for (auto& opr : graph->operators())
            for (auto* out : opr->outputs())
                if (out->readers().empty()) res.emplace_back(out);
        return res;
    }
};

namespace detail {

inline Tensor random_tensor(const TensorShape& shape, DType dtype, std::mt19937_64& rng,
                            float scale) {
    Tensor f(shape, dtype::Float32());
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) f.ptr<float>()[i] = dist(rng);
    if (dtype == dtype::Float32()) return f;
    Tensor t(shape, dtype);
    convert_elements(dtype::Float32(), f.raw_ptr(), dtype, t.raw_ptr(), shape.total_nr_elems());
    return t;
}

//! One var the generator can build on, with the shape it will have at execution.
struct Item {
    SymbolVar var;
    TensorShape shape;
    DType dtype;
};

} // namespace detail

//! Builds a random graph in a new ComputingGraph with `options`. Deterministic per config.
inline RandomGraph make_random_graph(const RandomGraphConfig& cfg, GraphOptions options = {}) {
    using detail::Item;
    register_all_operators();
    options.default_comp_node = cfg.comp_nodes.front();
    RandomGraph rg;
    rg.graph = ComputingGraph::make(options);
    auto& g = *rg.graph;
    std::mt19937_64 rng(cfg.seed * 0x9e3779b97f4a7c15ull + 1);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    auto pick_index = [&](size_t n) { return size_t(rng() % n); };
    auto pick_node = [&] {
        return CompNode::load(cfg.comp_nodes[pick_index(cfg.comp_nodes.size())]);
    };

    std::vector<size_t> dims;
    for (size_t d : {1, 2, 3, 5, 8, 16, 33, 64})
        if (d <= cfg.max_dim) dims.push_back(d);
    auto pick_dim = [&] { return dims[pick_index(dims.size())]; };
    size_t batch = std::vector<size_t>{1, 2, 4, 7}[pick_index(4)];

    std::vector<Item> pool;
    size_t nr_names = 0;
    auto param = [&](const TensorShape& shape, DType dt, CompNode cn, float scale) {
        auto t = std::make_shared<Tensor>(detail::random_tensor(shape, dt, rng, scale));
        return opr::SharedParam::make(g, t, OperatorConfig("", cn));
    };
    size_t nr_inputs = 1 + pick_index(3);
    for (size_t i = 0; i < nr_inputs; ++i) {
        TensorShape shape{batch, pick_dim()};
        std::string name = "x" + std::to_string(i);
        pool.push_back({opr::Input::make(g, name, dtype::Float32(), shape, pick_node()), shape,
                        dtype::Float32()});
        rg.feeds.emplace_back(name, detail::random_tensor(shape, dtype::Float32(), rng, 1.f));
    }
    // Mostly recent vars, sometimes any var: short chains and long skip connections.
    auto pick_item = [&]() -> Item& {
        if (unit(rng) < 0.8 && pool.size() > 1)
            return pool[pool.size() - 1 - pick_index(std::min(cfg.window, pool.size()))];
        size_t reach = cfg.skip_reach ? std::min(cfg.skip_reach, pool.size()) : pool.size();
        return pool[pool.size() - 1 - pick_index(reach)];
    };
    auto same_shape_partner = [&](const Item& x) -> const Item* {
        for (size_t tries = 0; tries < 6; ++tries) {
            const Item& p = pick_item();
            if (p.shape == x.shape && p.dtype == x.dtype) return &p;
        }
        return nullptr;
    };

    for (size_t op = 0; op < cfg.nr_oprs; ++op) {
        Item x = pick_item();
        CompNode cn = pick_node();
        auto on = OperatorConfig::on(cn);
        double r = unit(rng);
        Item y;
        if (r < 0.25) { // unary
            static const opr::ElemMode modes[] = {opr::ElemMode::RELU, opr::ElemMode::NEG,
                                                  opr::ElemMode::ABS};
            y = {opr::Elemwise::make(modes[pick_index(3)], {x.var}, on), x.shape, x.dtype};
        } else if (r < 0.6) { // binary, broadcasting a parameter or a constant when needed
            static const opr::ElemMode modes[] = {opr::ElemMode::ADD, opr::ElemMode::MUL,
                                                  opr::ElemMode::MAX};
            const Item* partner = unit(rng) < 0.6 ? same_shape_partner(x) : nullptr;
            SymbolVar other;
            if (partner) {
                other = partner->var;
            } else {
                size_t nd = x.shape.ndim(), last = nd ? x.shape[nd - 1] : 1;
                double s = unit(rng);
                if (s < 0.3 || nd == 0)
                    other = opr::ImmutableTensor::make_scalar(g, unit(rng), x.dtype, on);
                else if (s < 0.65)
                    other = param(TensorShape{last}, x.dtype, cn, 1.f);
                else if (s < 0.8 && nd == 2)
                    other = param(TensorShape{x.shape[0], 1}, x.dtype, cn, 1.f);
                else
                    other = param(x.shape, x.dtype, cn, 1.f);
            }
            auto mode = modes[pick_index(3)];
            bool swap = unit(rng) < 0.3;
            auto out = swap ? opr::Elemwise::make(mode, {other, x.var}, on)
                            : opr::Elemwise::make(mode, {x.var, other}, on);
            y = {out, x.shape, x.dtype};
        } else if (r < 0.75) { // reshape: a view
            size_t n = x.shape.total_nr_elems();
            std::vector<long> target;
            if (x.shape.ndim() == 2 && unit(rng) < 0.5)
                target = {long(x.shape[1]), long(x.shape[0])};
            else if (unit(rng) < 0.5)
                target = {long(n), 1};
            else
                target = {1, long(n)};
            std::vector<size_t> udims(target.begin(), target.end());
            if (cfg.dynamic_shapes && unit(rng) < 0.3) {
                std::string name = "shape" + std::to_string(nr_names++);
                auto shape_in = opr::Input::make(g, name, dtype::Int32(), {target.size()}, cn);
                Tensor value(TensorShape{target.size()}, dtype::Int32());
                for (size_t i = 0; i < target.size(); ++i)
                    value.ptr<int32_t>()[i] = int32_t(target[i]);
                rg.feeds.emplace_back(name, value);
                y = {opr::Reshape::make(x.var, shape_in, on), TensorShape(udims), x.dtype};
            } else {
                y = {opr::Reshape::make(x.var, target, on), TensorShape(udims), x.dtype};
            }
        } else if (r < 0.8) { // float16 round trip: other element sizes
            DType to = x.dtype == dtype::Float32() ? dtype::Float16() : dtype::Float32();
            y = {opr::TypeCvt::make(x.var, to, on), x.shape, to};
        } else { // matmul on 2-D vars
            if (x.shape.ndim() != 2) {
                y = {opr::Elemwise::make(opr::ElemMode::RELU, {x.var}, on), x.shape, x.dtype};
            } else {
                size_t m = x.shape[0], k = x.shape[1], n = pick_dim();
                while (n > 1 && m * n > cfg.max_elems) n = (n + 1) / 2;
                float scale = 1.f / std::sqrt(float(k));
                const Item* partner = nullptr;
                for (size_t tries = 0; tries < 4 && !partner; ++tries) {
                    const Item& p = pick_item();
                    if (p.shape.ndim() == 2 && p.shape[0] == m && p.dtype == x.dtype) partner = &p;
                }
                if (partner && unit(rng) < 0.4 &&
                    k * partner->shape[1] <= cfg.max_elems) { // x^T * p: {k, m} x {m, n2}
                    y = {opr::MatMul::make(x.var, partner->var, {true, false}, on),
                         TensorShape{k, partner->shape[1]}, x.dtype};
                } else {
                    auto w = param(TensorShape{k, n}, x.dtype, cn, scale);
                    y = {opr::MatMul::make(x.var, w, {}, on), TensorShape{m, n}, x.dtype};
                }
            }
        }
        pool.push_back(y);
        if (unit(rng) < cfg.fetch_probability) rg.fetched.push_back(y.var);
        if (unit(rng) < cfg.callback_probability) rg.callbacks.push_back(y.var);
    }
    rg.fetched.insert(rg.fetched.begin(), pool.back().var);
    return rg;
}

} // namespace braid::testing
