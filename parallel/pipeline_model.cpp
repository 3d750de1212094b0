#include "parallel/pipeline_model.h"

#include "base/error.h"
#include "operators/elemwise.h"
#include "operators/matmul.h"
#include "operators/reduce.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

namespace braid::parallel {

PipelineModel pipeline_mlp_model(const std::vector<size_t>& widths, uint32_t seed,
                                 const std::string& activation, bool activate_last) {
    if (widths.size() < 2)
        BRAID_THROW(ValueError, "an MLP needs at least 2 widths, got {}", widths.size());
    if (activation != "tanh" && activation != "relu")
        BRAID_THROW(ValueError, "MLP activation \"{}\": expected \"tanh\" or \"relu\"", activation);
    bool relu = activation == "relu";
    std::mt19937 rng(seed);
    PipelineModel model;
    model.input_width = widths.front();
    model.label_width = widths.back();
    for (size_t l = 0; l + 1 < widths.size(); ++l) {
        float scale = 1.f / std::sqrt(float(widths[l]));
        std::uniform_real_distribution<float> u(-scale, scale), ub(-0.1f, 0.1f);
        auto w = std::make_shared<Tensor>(TensorShape{widths[l], widths[l + 1]}, dtype::Float32());
        auto b = std::make_shared<Tensor>(TensorShape{widths[l + 1]}, dtype::Float32());
        for (size_t i = 0; i < w->shape().total_nr_elems(); ++i) w->ptr<float>()[i] = u(rng);
        for (size_t i = 0; i < b->shape().total_nr_elems(); ++i) b->ptr<float>()[i] = ub(rng);
        bool activate = activate_last || l + 2 < widths.size();
        model.layers.push_back({fmt::format("dense{}", l),
                                {w, b},
                                [activate, relu](SymbolVar x, const SymbolVarArray& p) {
                                    auto y = opr::matmul(x, p[0]) + p[1];
                                    if (!activate) return y;
                                    return relu ? opr::relu(y) : opr::tanh(y);
                                }});
    }
    model.loss = [](SymbolVar y, SymbolVar labels) {
        return opr::reduce_mean(opr::reduce_sum(opr::square(y - labels), {1}));
    };
    return model;
}

PipelineModel clone_model(const PipelineModel& model) {
    PipelineModel copy = model;
    for (auto& layer : copy.layers)
        for (auto& p : layer.params) p = std::make_shared<Tensor>(p->copy());
    return copy;
}

std::vector<std::pair<Tensor, Tensor>> random_batches(const PipelineModel& model, size_t steps,
                                                      size_t batch, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<std::pair<Tensor, Tensor>> out;
    for (size_t s = 0; s < steps; ++s) {
        Tensor x({batch, model.input_width}, dtype::Float32());
        Tensor y({batch, model.label_width}, dtype::Float32());
        for (size_t i = 0; i < x.shape().total_nr_elems(); ++i) x.ptr<float>()[i] = d(rng);
        for (size_t i = 0; i < y.shape().total_nr_elems(); ++i) y.ptr<float>()[i] = d(rng);
        out.emplace_back(x, y);
    }
    return out;
}

std::vector<double> train_on_one_device(const PipelineModel& model,
                                        const std::vector<std::pair<Tensor, Tensor>>& batches,
                                        const opr::OptimizerConfig& optimizer) {
    if (batches.empty()) return {};
    auto g = ComputingGraph::make();
    auto l = build_sequential_loss(*g, model, batches[0].first.shape()[0]);
    std::vector<OutputSpec> outs{l.loss};
    for (auto& u : opr::minimize(l.loss, l.params, optimizer)) outs.push_back(u);
    auto exec = g->compile(outs);
    std::vector<double> losses;
    for (auto& [x, y] : batches) {
        exec->feed("x", x).feed("labels", y).run();
        losses.push_back(exec->output(0).at(0));
    }
    return losses;
}

double max_relative_difference(const PipelineModel& a, const PipelineModel& b) {
    if (a.layers.size() != b.layers.size())
        BRAID_THROW(ValueError, "models of {} and {} layers", a.layers.size(), b.layers.size());
    double worst = 0;
    for (size_t l = 0; l < a.layers.size(); ++l)
        for (size_t p = 0; p < a.layers[l].params.size(); ++p) {
            const Tensor &x = *a.layers[l].params[p], &y = *b.layers[l].params[p];
            double diff = 0, scale = 0;
            for (size_t i = 0; i < y.shape().total_nr_elems(); ++i) {
                diff = std::max(diff, std::abs(double(x.ptr<float>()[i]) - y.ptr<float>()[i]));
                scale = std::max(scale, std::abs(double(y.ptr<float>()[i])));
            }
            worst = std::max(worst, scale > 0 ? diff / scale : diff);
        }
    return worst;
}

} // namespace braid::parallel
