#include "parallel/sharded_pipeline.h"

#include "base/error.h"
#include "comm/group_client.h"
#include "graph/input_node.h"
#include "operators/io.h"

#include <fmt/format.h>

#include <cstring>
#include <numeric>

namespace braid::parallel {

//! One stage: as built on one device, and when it has several ranks, its plan and their graphs.
struct ShardedPipelineTrainer::Stage {
    uint32_t first_rank = 0, devices = 1;
    PipelineStage single;
    std::vector<std::shared_ptr<Tensor>> params; //!< the model's, of the stage's layers
    std::unique_ptr<AutoSharder> planner;
    ShardPlan plan;
    struct Rank {
        std::shared_ptr<ComputingGraph> graph;
        std::unique_ptr<MeshGroups> groups;
        SymbolVarArray inputs; //!< plan.args' order
        std::unique_ptr<Executable> step;
    };
    std::vector<Rank> ranks;
    //! Per plan argument: whether it is a micro-batch of the labels (else of x), and which.
    std::vector<std::pair<bool, uint32_t>> arg_rows;
};

ShardedPipelineTrainer::~ShardedPipelineTrainer() = default;

ShardedPipelineTrainer::ShardedPipelineTrainer(const PipelineModel& model,
                                               ShardedPipelineOptions options)
    : m_options(std::move(options)) {
    PipelineOptions& po = m_options.pipeline;
    uint32_t nr = po.nr_stages();
    auto& devices = m_options.stage_devices;
    if (devices.empty()) devices.assign(nr, 1);
    if (devices.size() != nr)
        BRAID_THROW(ValueError, "sharded pipeline: {} stage device counts for {} stages",
                    devices.size(), nr);
    std::vector<int32_t> first(nr, 0);
    for (uint32_t i = 0; i < nr; ++i) {
        if (devices[i] == 0) BRAID_THROW(ValueError, "sharded pipeline: stage {} has no device", i);
        if (i) first[i] = first[i - 1] + int32_t(devices[i - 1]);
    }
    if (po.backend != "local")
        BRAID_THROW(ValueError,
                    "sharded pipeline: backend \"{}\": the stages' ranks run as threads of this "
                    "process (backend \"local\")",
                    po.backend);
    if (!po.client) po.client = std::make_shared<comm::InProcessGroupClient>();
    po.rank = [first](uint32_t i) { return first.at(i); };
    po.comp_node = [first](uint32_t i) { return fmt::format("cpu{}", first.at(i)); };

    for (uint32_t i = 0; i < nr; ++i) {
        auto st = std::make_unique<Stage>();
        st->first_rank = uint32_t(first[i]);
        st->devices = devices[i];
        // In stage order: stage i's activation recvs read the shapes stage i - 1 published.
        st->single = build_pipeline_stage(model, po, i);
        for (size_t l = st->single.first_layer; l < st->single.end_layer; ++l)
            for (auto& p : model.layers[l].params) st->params.push_back(p);
        if (st->devices > 1) {
            Mesh mesh({st->devices}, {"x"});
            AutoShardOptions so = m_options.sharding;
            so.costs = AutoShardOptions::Costs::ANALYTIC;
            st->planner = std::make_unique<AutoSharder>(st->single.step_outputs, mesh, so);
            st->plan = st->planner->solve();
            // The plan's arguments are the stage's Inputs: "x/<j>" and "labels/<j>".
            auto input_name = [](const SymbolVar& v) {
                return static_cast<const InputNode*>(v.node()->owner())->input_name();
            };
            for (auto& arg : st->plan.args) {
                bool found = false;
                for (uint32_t j = 0; j < st->single.inputs.size() && !found; ++j)
                    if ((found = arg.name == input_name(st->single.inputs[j])))
                        st->arg_rows.emplace_back(false, j);
                for (uint32_t j = 0; j < st->single.labels.size() && !found; ++j)
                    if ((found = arg.name == input_name(st->single.labels[j])))
                        st->arg_rows.emplace_back(true, j);
                BRAID_ASSERT(found, "sharded pipeline stage {}: unexpected input \"{}\"", i,
                             arg.name);
            }
            LowerOptions lower;
            lower.global_inputs = true; // every rank is fed the whole micro-batches
            for (uint32_t r = 0; r < st->devices; ++r) {
                Stage::Rank rank;
                std::string cn_name = fmt::format("cpu{}", st->first_rank + r);
                CompNode cn = CompNode::load(cn_name);
                GraphOptions go;
                go.default_comp_node = cn_name;
                rank.graph = ComputingGraph::make(go);
                rank.groups = std::make_unique<MeshGroups>(
                    mesh, r, po.client, po.backend, fmt::format("{}/stage{}", po.key, i), cn);
                SpmdContext ctx(*rank.graph, *rank.groups);
                for (auto& arg : st->plan.args)
                    rank.inputs.push_back(
                        opr::Input::make(*rank.graph, arg.name, arg.dtype, arg.global_shape, cn));
                lower.comp_node = cn;
                SymbolVarArray outs = lower_plan(*st->planner, st->plan, lower)(ctx, rank.inputs);
                rank.step = rank.graph->compile(std::vector<OutputSpec>(outs.begin(), outs.end()));
                st->ranks.push_back(std::move(rank));
            }
        }
        m_stages.push_back(std::move(st));
    }
}

double ShardedPipelineTrainer::step(const Tensor& x, const Tensor& labels) {
    uint32_t mb = m_options.pipeline.microbatches;
    std::vector<std::pair<std::string, std::function<void()>>> jobs;
    for (uint32_t i = 0; i < nr_stages(); ++i) {
        Stage& st = *m_stages[i];
        if (st.devices == 1) {
            jobs.emplace_back(fmt::format("pipeline stage {} (rank {})", i, st.first_rank), [&] {
                st.single.feed(x, labels);
                st.single.step->run();
            });
            continue;
        }
        for (uint32_t r = 0; r < st.devices; ++r)
            jobs.emplace_back(fmt::format("pipeline stage {} (rank {}, {} of its {})", i,
                                          st.first_rank + r, r, st.devices),
                              [&, i, r] {
                                  auto& rank = st.ranks[r];
                                  std::string what = fmt::format("pipeline stage {}", i);
                                  for (size_t a = 0; a < st.arg_rows.size(); ++a) {
                                      auto [is_labels, j] = st.arg_rows[a];
                                      rank.step->feed(
                                          rank.inputs[a],
                                          microbatch_rows(is_labels ? labels : x, mb, j, what));
                                  }
                                  rank.step->run();
                              });
    }
    run_concurrently(jobs);
    // Stages of several ranks trained their own pieces: the model gets the updated values.
    for (auto& st : m_stages) {
        if (st->devices == 1) continue;
        const Executable& lead = *st->ranks[0].step;
        for (size_t p = 0; p < st->params.size(); ++p) {
            const Tensor& updated = lead.output(st->single.first_update + p);
            Tensor& param = *st->params[p];
            BRAID_ASSERT(updated.nr_bytes() == param.nr_bytes(),
                         "sharded pipeline: parameter {} came back as {} bytes instead of {}", p,
                         updated.nr_bytes(), param.nr_bytes());
            std::memcpy(param.raw_ptr(), updated.raw_ptr(), param.nr_bytes());
        }
    }
    Stage& last = *m_stages.back();
    if (last.devices == 1) return last.single.loss();
    return last.ranks[0].step->output(last.single.step_outputs.size() - 1).at(0);
}

uint32_t ShardedPipelineTrainer::nr_stages() const {
    return uint32_t(m_stages.size());
}

uint32_t ShardedPipelineTrainer::nr_ranks() const {
    return m_stages.back()->first_rank + m_stages.back()->devices;
}

uint32_t ShardedPipelineTrainer::stage_devices(uint32_t stage) const {
    return m_stages.at(stage)->devices;
}

const ShardPlan* ShardedPipelineTrainer::stage_plan(uint32_t stage) const {
    const Stage& st = *m_stages.at(stage);
    return st.planner ? &st.plan : nullptr;
}

std::string ShardedPipelineTrainer::to_string() const {
    std::string s;
    for (uint32_t i = 0; i < nr_stages(); ++i) {
        const Stage& st = *m_stages[i];
        s += fmt::format("stage {}: layers {}..{} on rank(s) {}..{}", i, st.single.first_layer,
                         st.single.end_layer - 1, st.first_rank, st.first_rank + st.devices - 1);
        if (st.planner) {
            size_t split = 0;
            for (auto& c : st.plan.operators)
                split += c.strategy.split != std::vector<int>(c.strategy.split.size(), -1);
            s += fmt::format(", {} of {} operators split, predicted {:.1f} us per step "
                             "(communication {:.1f} us)",
                             split, st.plan.operators.size(), st.plan.predicted_s * 1e6,
                             st.plan.comm_s * 1e6);
        }
        s += "\n";
    }
    return s;
}

} // namespace braid::parallel
