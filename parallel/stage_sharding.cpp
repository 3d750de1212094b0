#include "parallel/stage_sharding.h"

#include "base/error.h"
#include "graph/grad.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/reduce.h"

#include <limits>
#include <map>
#include <set>

namespace braid::parallel {

SubmeshPartition auto_partition_submeshes(size_t nr_layers, uint32_t nr_devices,
                                          uint32_t microbatches, const StageCostFn& cost) {
    if (nr_layers == 0 || nr_devices == 0 || microbatches == 0)
        BRAID_THROW(ValueError,
                    "stage partition: {} layers, {} devices, {} micro-batches; "
                    "expected at least one of each",
                    nr_layers, nr_devices, microbatches);
    constexpr double INF = std::numeric_limits<double>::infinity();
    // c[a][b][m]: layers [a, b) on m devices (INF: no plan fits).
    std::vector<std::vector<std::vector<double>>> c(
        nr_layers,
        std::vector<std::vector<double>>(nr_layers + 1, std::vector<double>(nr_devices + 1, INF)));
    std::set<double> candidates;
    for (size_t a = 0; a < nr_layers; ++a)
        for (size_t b = a + 1; b <= nr_layers; ++b)
            for (uint32_t m = 1; m <= nr_devices; ++m)
                if (auto t = cost(a, b, m)) {
                    c[a][b][m] = *t;
                    candidates.insert(*t);
                }
    SubmeshPartition best;
    best.objective = INF;
    for (double t_max : candidates) {
        // f[k][d]: least Σ t_i of layers [k, L) on exactly d devices, stages within t_max.
        std::vector<std::vector<double>> f(nr_layers + 1, std::vector<double>(nr_devices + 1, INF));
        std::vector<std::vector<std::pair<size_t, uint32_t>>> next(
            nr_layers + 1, std::vector<std::pair<size_t, uint32_t>>(nr_devices + 1));
        f[nr_layers][0] = 0;
        for (size_t k = nr_layers; k-- > 0;)
            for (uint32_t d = 1; d <= nr_devices; ++d)
                for (size_t b = k + 1; b <= nr_layers; ++b)
                    for (uint32_t m = 1; m <= d; ++m) {
                        double t = c[k][b][m];
                        if (t > t_max || f[b][d - m] == INF) continue;
                        if (t + f[b][d - m] < f[k][d]) {
                            f[k][d] = t + f[b][d - m];
                            next[k][d] = {b, m};
                        }
                    }
        if (f[0][nr_devices] == INF) continue;
        double objective = f[0][nr_devices] + double(microbatches - 1) * t_max;
        if (objective >= best.objective) continue;
        best = {};
        best.objective = objective;
        for (size_t k = 0, d = nr_devices; k < nr_layers;) {
            auto [b, m] = next[k][d];
            best.stage_begin.push_back(k);
            best.stage_devices.push_back(m);
            best.stage_cost.push_back(c[k][b][m]);
            k = b;
            d -= m;
        }
    }
    if (best.objective == INF)
        BRAID_THROW(ValueError,
                    "stage partition: no split of {} layers over {} devices fits (no "
                    "plan of the stages fits the memory limit)",
                    nr_layers, nr_devices);
    return best;
}

std::optional<double> sharded_stage_cost(const PipelineModel& model, size_t begin, size_t end,
                                         uint32_t devices, size_t rows,
                                         const AutoShardOptions& options) {
    if (begin >= end || end > model.layers.size())
        BRAID_THROW(ValueError, "stage cost: layers [{}, {}) of a model of {}", begin, end,
                    model.layers.size());
    // The width entering layer `begin`: the model's layers before it, built on a scratch graph.
    auto scratch = ComputingGraph::make();
    SymbolVar h = opr::Input::make(*scratch, "x", dtype::Float32(), {rows, model.input_width});
    for (size_t l = 0; l < begin; ++l) {
        SymbolVarArray params;
        for (auto& p : model.layers[l].params)
            params.push_back(opr::SharedParam::make(*scratch, p));
        h = model.layers[l].forward(h, params);
    }
    TensorShape in_shape = h.shape();

    auto g = ComputingGraph::make();
    SymbolVar x = opr::Input::make(*g, "x", dtype::Float32(), in_shape);
    SymbolVarArray wrt{x};
    SymbolVar y = x;
    for (size_t l = begin; l < end; ++l) {
        SymbolVarArray params;
        for (auto& p : model.layers[l].params) {
            params.push_back(opr::SharedParam::make(*g, p));
            wrt.push_back(params.back());
        }
        y = model.layers[l].forward(y, params);
    }
    // The backward from a given output gradient, as a stage receives it.
    SymbolVar gy = opr::Input::make(*g, "gy", dtype::Float32(), y.shape());
    SymbolVarArray grads = grad(opr::reduce_sum(y * gy), wrt);
    try {
        AutoSharder planner(grads, Mesh({devices}, {"x"}), options);
        double t = planner.solve().predicted_s;
        // The transfers with the neighbours, which the plan of the layers alone does not see:
        // per boundary the activation one way and its gradient back, and on a stage of several
        // ranks the spreading of what it receives (an all-reduce: parallel/sharded_pipeline.h).
        const CommModel& comm = options.comm;
        auto transfer = [&](const TensorShape& shape, bool received) {
            double bytes = double(shape.total_nr_elems() * sizeof(float));
            double s = comm.latency_s + bytes / comm.bytes_per_s;
            if (received && devices > 1)
                s += 2 * comm.latency_s + 2.0 * (devices - 1) / devices * bytes / comm.bytes_per_s;
            return s;
        };
        if (begin > 0) t += transfer(in_shape, true) + transfer(in_shape, false);
        if (end < model.layers.size()) t += transfer(y.shape(), false) + transfer(y.shape(), true);
        return t;
    } catch (const ValueError&) {
        if (options.memory_limit == 0) throw;
        return std::nullopt; // no plan within the memory limit
    }
}

} // namespace braid::parallel
