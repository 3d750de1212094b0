#include "parallel/pipeline.h"

#include "base/error.h"
#include "collective/remote_send_recv.h"
#include "graph/grad.h"
#include "operators/elemwise.h"
#include "operators/io.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <thread>

namespace braid::parallel {

// ---- the model on one device

SequentialLoss build_sequential_loss(ComputingGraph& graph, const PipelineModel& model,
                                     size_t rows) {
    SequentialLoss result;
    auto x = opr::Input::make(graph, "x", dtype::Float32(), {rows, model.input_width});
    auto labels = opr::Input::make(graph, "labels", dtype::Float32(), {rows, model.label_width});
    SymbolVar h = x;
    for (auto& layer : model.layers) {
        SymbolVarArray params;
        for (size_t p = 0; p < layer.params.size(); ++p)
            params.push_back(opr::SharedParam::make(graph, layer.params[p],
                                                    fmt::format("{}/{}", layer.name, p)));
        result.params.insert(result.params.end(), params.begin(), params.end());
        h = layer.forward(h, params);
    }
    result.loss = model.loss(h, labels);
    return result;
}

// ---- schedules

const char* pipeline_schedule_name(PipelineSchedule schedule) {
    return schedule == PipelineSchedule::GPIPE ? "gpipe" : "1f1b";
}

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
    if (name == "gpipe") return PipelineSchedule::GPIPE;
    if (name == "1f1b") return PipelineSchedule::ONE_F_ONE_B;
    BRAID_THROW(ValueError, "pipeline schedule \"{}\": expected \"gpipe\" or \"1f1b\"", name);
}

std::string to_string(const PipelineOp& op) {
    switch (op.kind) {
    case PipelineOp::RECV_ACTIVATION:
        return fmt::format("recv a{}", op.microbatch);
    case PipelineOp::FORWARD:
        return fmt::format("F{}", op.microbatch);
    case PipelineOp::SEND_ACTIVATION:
        return fmt::format("send a{}", op.microbatch);
    case PipelineOp::RECV_GRAD:
        return fmt::format("recv g{}", op.microbatch);
    case PipelineOp::BACKWARD:
        return fmt::format("B{}", op.microbatch);
    case PipelineOp::SEND_GRAD:
        return fmt::format("send g{}", op.microbatch);
    }
    return "?";
}

std::vector<PipelineOp> pipeline_tasks(PipelineSchedule schedule, uint32_t nr_stages,
                                       uint32_t microbatches, uint32_t stage) {
    if (nr_stages == 0 || microbatches == 0 || stage >= nr_stages)
        BRAID_THROW(ValueError, "pipeline of {} stages and {} micro-batches has no stage {}",
                    nr_stages, microbatches, stage);
    std::vector<PipelineOp> tasks;
    auto forward = [&](uint32_t j) { tasks.push_back({PipelineOp::FORWARD, j}); };
    auto backward = [&](uint32_t j) { tasks.push_back({PipelineOp::BACKWARD, j}); };
    if (schedule == PipelineSchedule::GPIPE) {
        for (uint32_t j = 0; j < microbatches; ++j) forward(j);
        for (uint32_t j = 0; j < microbatches; ++j) backward(j);
        return tasks;
    }
    // 1F1B (PipeDream-flush): warm up with S - i - 1 forwards, then alternate, then drain.
    uint32_t warmup = std::min(nr_stages - stage - 1, microbatches);
    for (uint32_t j = 0; j < warmup; ++j) forward(j);
    for (uint32_t k = 0; k + warmup < microbatches; ++k) {
        forward(k + warmup);
        backward(k);
    }
    for (uint32_t k = microbatches - warmup; k < microbatches; ++k) backward(k);
    return tasks;
}

std::vector<std::vector<PipelineOp>> pipeline_program(PipelineSchedule schedule, uint32_t nr_stages,
                                                      uint32_t microbatches) {
    std::vector<std::vector<PipelineOp>> tasks(nr_stages), programs(nr_stages);
    // position[i][kind][j]: index of task F_j / B_j in stage i's tasks.
    std::vector<std::vector<size_t>> fpos(nr_stages), bpos(nr_stages);
    for (uint32_t i = 0; i < nr_stages; ++i) {
        tasks[i] = pipeline_tasks(schedule, nr_stages, microbatches, i);
        fpos[i].resize(microbatches);
        bpos[i].resize(microbatches);
        for (size_t t = 0; t < tasks[i].size(); ++t)
            (tasks[i][t].kind == PipelineOp::FORWARD ? fpos : bpos)[i][tasks[i][t].microbatch] = t;
    }
    for (uint32_t i = 0; i < nr_stages; ++i) {
        bool first = i == 0, last = i + 1 == nr_stages;
        // Where the recv of activation j goes: before F_j, unless the previous stage sends a_j
        // before it receives the gradient of some k whose backward comes earlier here. The
        // previous stage only takes g_k after sending a_j, so a_j must be taken here before
        // g_k is sent: between B_k's computation and its send (Megatron's
        // send_backward_recv_forward), so that B_k still overlaps the previous stage's F_j.
        std::vector<std::vector<uint32_t>> recvs_before(tasks[i].size()),
            recvs_after_backward(tasks[i].size());
        if (!first)
            for (uint32_t j = 0; j < microbatches; ++j) {
                size_t at = fpos[i][j];
                for (uint32_t k = 0; k < microbatches; ++k)
                    if (bpos[i][k] < at && fpos[i - 1][j] < bpos[i - 1][k]) at = bpos[i][k];
                (at == fpos[i][j] ? recvs_before : recvs_after_backward)[at].push_back(j);
            }
        for (size_t t = 0; t < tasks[i].size(); ++t) {
            for (uint32_t j : recvs_before[t])
                programs[i].push_back({PipelineOp::RECV_ACTIVATION, j});
            auto task = tasks[i][t];
            if (task.kind == PipelineOp::FORWARD) {
                programs[i].push_back(task);
                if (!last) programs[i].push_back({PipelineOp::SEND_ACTIVATION, task.microbatch});
            } else {
                if (!last) programs[i].push_back({PipelineOp::RECV_GRAD, task.microbatch});
                programs[i].push_back(task);
                for (uint32_t j : recvs_after_backward[t])
                    programs[i].push_back({PipelineOp::RECV_ACTIVATION, j});
                if (!first) programs[i].push_back({PipelineOp::SEND_GRAD, task.microbatch});
            }
        }
    }
    check_pipeline_program(programs);
    return programs;
}

void check_pipeline_program(const std::vector<std::vector<PipelineOp>>& programs) {
    size_t n = programs.size();
    std::vector<size_t> at(n, 0);
    // The recv a send pairs with, and on which stage.
    auto partner = [&](size_t i, const PipelineOp& op) -> std::pair<long, PipelineOp> {
        if (op.kind == PipelineOp::SEND_ACTIVATION)
            return {long(i) + 1, {PipelineOp::RECV_ACTIVATION, op.microbatch}};
        if (op.kind == PipelineOp::SEND_GRAD)
            return {long(i) - 1, {PipelineOp::RECV_GRAD, op.microbatch}};
        return {-1, op};
    };
    for (bool progress = true; progress;) {
        progress = false;
        for (size_t i = 0; i < n; ++i) {
            while (at[i] < programs[i].size()) {
                const auto& op = programs[i][at[i]];
                if (op.kind == PipelineOp::FORWARD || op.kind == PipelineOp::BACKWARD) {
                    ++at[i];
                    progress = true;
                    continue;
                }
                auto [peer, recv] = partner(i, op);
                if (peer < 0 || size_t(peer) >= n) {
                    if (op.kind == PipelineOp::SEND_ACTIVATION || op.kind == PipelineOp::SEND_GRAD)
                        BRAID_THROW(GraphError, "pipeline stage {}: {} has no stage to go to", i,
                                    to_string(op));
                    break; // a recv: waits for its sender
                }
                auto p = size_t(peer);
                if (at[p] < programs[p].size() && programs[p][at[p]] == recv) {
                    ++at[i];
                    ++at[p];
                    progress = true;
                    continue;
                }
                break;
            }
        }
    }
    std::string stuck;
    for (size_t i = 0; i < n; ++i)
        if (at[i] < programs[i].size())
            stuck += fmt::format("{}stage {} at {}", stuck.empty() ? "" : "; ", i,
                                 to_string(programs[i][at[i]]));
    if (!stuck.empty())
        BRAID_THROW(GraphError, "pipeline programs would deadlock (synchronous sends): {}", stuck);
}

std::vector<size_t> equal_layer_split(size_t nr_layers, uint32_t nr_stages) {
    if (nr_stages == 0 || nr_stages > nr_layers)
        BRAID_THROW(ValueError, "cannot split {} layers into {} stages", nr_layers, nr_stages);
    std::vector<size_t> begin;
    for (uint32_t i = 0; i < nr_stages; ++i) begin.push_back(i * nr_layers / nr_stages);
    return begin;
}

// ---- one stage's graph

namespace {

std::string activation_key(const PipelineOptions& o, uint32_t from_stage, uint32_t microbatch) {
    return fmt::format("{}/a{}/{}", o.key, from_stage, microbatch);
}

void check_options(const PipelineModel& model, const PipelineOptions& o, uint32_t stage) {
    uint32_t s = o.nr_stages();
    if (s == 0 || o.stage_begin[0] != 0)
        BRAID_THROW(ValueError, "pipeline stage boundaries must start at layer 0 (got {})",
                    s ? fmt::format("{}", o.stage_begin[0]) : std::string("none"));
    for (uint32_t i = 1; i < s; ++i)
        if (o.stage_begin[i] <= o.stage_begin[i - 1] || o.stage_begin[i] >= model.layers.size())
            BRAID_THROW(ValueError,
                        "pipeline stage {} starts at layer {}: boundaries must increase and stay "
                        "below the {} layers",
                        i, o.stage_begin[i], model.layers.size());
    if (stage >= s) BRAID_THROW(ValueError, "pipeline of {} stages has no stage {}", s, stage);
    if (o.microbatches == 0 || o.batch == 0 || o.batch % o.microbatches != 0)
        BRAID_THROW(ValueError, "a batch of {} rows does not split into {} micro-batches", o.batch,
                    o.microbatches);
    if (!o.client) BRAID_THROW(ValueError, "pipeline stage {}: no group client", stage);
}

} // namespace

PipelineStage build_pipeline_stage(const PipelineModel& model, const PipelineOptions& o,
                                   uint32_t stage) {
    check_options(model, o, stage);
    uint32_t nr_stages = o.nr_stages(), nr_mb = o.microbatches;
    bool first = stage == 0, last = stage + 1 == nr_stages;
    auto rank = [&](uint32_t i) { return o.rank ? o.rank(i) : int32_t(i); };

    PipelineStage st;
    st.index = stage;
    st.nr_stages = nr_stages;
    st.microbatches = nr_mb;
    st.first_layer = o.stage_begin[stage];
    st.end_layer = last ? model.layers.size() : o.stage_begin[stage + 1];
    GraphOptions go;
    go.default_comp_node = o.comp_node ? o.comp_node(stage) : fmt::format("cpu{}", stage);
    // The stage's modules (profiles) and the memory test name operators by the program entry
    // that inserted them; the operators a compile-time fusion pass makes belong to none.
    // TODO: map fused operators back to the entries of the operators they replace.
    go.enable_fusion = false;
    st.graph = ComputingGraph::make(go);
    auto& g = *st.graph;
    CompNode cn = CompNode::load(go.default_comp_node);
    size_t rows = o.batch / nr_mb;

    SymbolVarArray params;
    for (size_t l = st.first_layer; l < st.end_layer; ++l)
        for (size_t p = 0; p < model.layers[l].params.size(); ++p)
            params.push_back(opr::SharedParam::make(g, model.layers[l].params[p],
                                                    fmt::format("{}/{}", model.layers[l].name, p)));

    std::vector<SymbolVar> input(nr_mb), output(nr_mb), loss(nr_mb), placeholder(nr_mb);
    SymbolVarArray acc(params.size());
    SymbolVar loss_sum;
    std::map<uint32_t, size_t> backward_entry; // program entry of B_j
    std::vector<OutputSpec> outputs;
    st.program = pipeline_program(o.schedule, nr_stages, nr_mb)[stage];

    // Names every var the ops since `begin` created "mb<j>/<what>/<name>" (memory reports).
    auto tag = [&](size_t begin, uint32_t j, const char* what) {
        for (size_t k = begin; k < g.operators().size(); ++k)
            for (auto* out : g.operators()[k]->outputs())
                out->set_name(fmt::format("mb{}/{}/{}", j, what, out->name()));
    };
    for (auto& op : st.program) {
        size_t begin = g.operators().size();
        uint32_t j = op.microbatch;
        switch (op.kind) {
        case PipelineOp::RECV_ACTIVATION:
            input[j] =
                opr::remote_recv(g, activation_key(o, stage - 1, j), rank(stage - 1),
                                 dtype::Float32(), o.client, o.backend, OperatorConfig::on(cn));
            tag(begin, j, "in");
            break;
        case PipelineOp::FORWARD: {
            if (first) {
                input[j] = opr::Input::make(g, fmt::format("x/{}", j), dtype::Float32(),
                                            {rows, model.input_width});
                st.inputs.push_back(input[j]);
                tag(begin, j, "in");
                begin = g.operators().size();
            }
            SymbolVar h = input[j];
            size_t p = 0;
            for (size_t l = st.first_layer; l < st.end_layer; ++l) {
                size_t n = model.layers[l].params.size();
                h = model.layers[l].forward(
                    h, SymbolVarArray(params.begin() + long(p), params.begin() + long(p + n)));
                p += n;
            }
            if (last) {
                auto labels = opr::Input::make(g, fmt::format("labels/{}", j), dtype::Float32(),
                                               {rows, model.label_width});
                st.labels.push_back(labels);
                loss[j] = model.loss(h, labels);
            }
            output[j] = h;
            tag(begin, j, "f");
            break;
        }
        case PipelineOp::SEND_ACTIVATION:
            placeholder[j] =
                opr::remote_send(output[j], activation_key(o, stage, j), rank(stage + 1), o.client,
                                 o.backend, OperatorConfig::on(cn));
            outputs.emplace_back(placeholder[j]);
            tag(begin, j, "out");
            break;
        case PipelineOp::RECV_GRAD:
            break; // inserted by BACKWARD's grad() (the send's rule)
        case PipelineOp::BACKWARD: {
            // The last stage differentiates its loss; the others the send's placeholder, whose
            // gradient is d(last stage's loss)/d(output), received from the next stage. Both
            // send d loss / d input back as a side effect (the activation recv's rule).
            auto grads = grad(last ? loss[j] : placeholder[j], params);
            for (size_t p = 0; p < params.size(); ++p) {
                acc[p] = acc[p].valid() ? acc[p] + grads[p] : grads[p];
                ++st.nr_accumulators;
            }
            if (last) { // a running sum; the loss is kept for it, not as an activation
                loss[j].node()->set_name(fmt::format("mb{}/loss", j));
                loss_sum = loss_sum.valid() ? loss_sum + loss[j] : loss[j];
            }
            tag(begin, j, "b");
            backward_entry[j] = st.op_range.size();
            break;
        }
        case PipelineOp::SEND_GRAD: {
            // Inserted by BACKWARD's grad(); recvs the program puts between the two must run
            // first: an extra dependency on each (graph/schedule.h orders by them).
            size_t b = backward_entry.at(j);
            OperatorNode* send = nullptr;
            for (size_t k = st.op_range[b].first; k < st.op_range[b].second; ++k)
                if (std::string(g.operators()[k]->type_name()) == "RemoteSend")
                    send = g.operators()[k].get();
            BRAID_ASSERT(send, "pipeline stage {}: B{} inserted no gradient send", stage, j);
            for (size_t e = b + 1; e < st.op_range.size(); ++e)
                if (st.program[e].kind == PipelineOp::RECV_ACTIVATION)
                    g.add_extra_dep(send->output(0), input[st.program[e].microbatch].node());
            break;
        }
        }
        st.op_range.emplace_back(begin, g.operators().size());
    }
    // The update, once per step, on the mean over the micro-batches.
    st.first_update = outputs.size();
    for (size_t p = 0; p < params.size(); ++p) {
        SymbolVar mean = nr_mb > 1 ? acc[p] * (1.0 / double(nr_mb)) : acc[p];
        mean.rename(fmt::format("grad/{}", params[p].name()));
        outputs.emplace_back(opr::ParamUpdate::make(params[p], mean, {}, o.optimizer));
    }
    if (last) {
        st.mean_loss = nr_mb > 1 ? loss_sum * (1.0 / double(nr_mb)) : loss_sum;
        outputs.emplace_back(st.mean_loss);
    }
    st.step = g.compile(outputs);
    for (auto& out : outputs) st.step_outputs.push_back(SymbolVar(out.var));
    return st;
}

Tensor microbatch_rows(const Tensor& t, uint32_t microbatches, uint32_t j,
                       const std::string& what) {
    if (t.shape().ndim() != 2 || t.shape()[0] % microbatches != 0)
        BRAID_THROW(ShapeError,
                    "{}: a batch of shape {} does not split into {} micro-batches of rows", what,
                    t.shape().to_string(), microbatches);
    size_t n = t.shape()[0] / microbatches;
    TensorShape shape = t.shape();
    shape[0] = n;
    return t.view(TensorLayout(shape, t.dtype()), j * n * (t.nr_bytes() / t.shape()[0]));
}

void PipelineStage::feed(const Tensor& x, const Tensor& y) {
    std::string what = fmt::format("pipeline stage {}", index);
    for (auto* t : {&x, &y}) microbatch_rows(*t, microbatches, 0, what); // both checked first
    for (uint32_t j = 0; j < inputs.size(); ++j)
        step->feed(inputs[j], microbatch_rows(x, microbatches, j, what));
    for (uint32_t j = 0; j < labels.size(); ++j)
        step->feed(labels[j], microbatch_rows(y, microbatches, j, what));
}

double PipelineStage::loss() const {
    return mean_loss.valid() ? step->output(mean_loss).at(0) : 0.0;
}

long PipelineStage::program_entry_of(const OperatorNode& opr) const {
    const auto& oprs = graph->operators();
    for (size_t k = 0; k < op_range.size(); ++k)
        for (size_t i = op_range[k].first; i < op_range[k].second; ++i)
            if (oprs[i].get() == &opr) return long(k);
    return -1;
}

// ---- stages on threads

PipelineTrainer::PipelineTrainer(const PipelineModel& model, PipelineOptions options)
    : m_options(std::move(options)) {
    if (!m_options.client) m_options.client = std::make_shared<comm::InProcessGroupClient>();
    // In stage order: stage i's activation recvs read the shapes stage i - 1 published.
    for (uint32_t i = 0; i < m_options.nr_stages(); ++i)
        m_stages.push_back(build_pipeline_stage(model, m_options, i));
}

double PipelineTrainer::step(const Tensor& x, const Tensor& labels) {
    std::vector<uint32_t> all;
    for (uint32_t i = 0; i < nr_stages(); ++i) all.push_back(i);
    return step_only(x, labels, all);
}

void run_concurrently(const std::vector<std::pair<std::string, std::function<void()>>>& jobs) {
    std::vector<std::string> errors(jobs.size());
    std::vector<std::thread> threads;
    for (size_t k = 0; k < jobs.size(); ++k)
        threads.emplace_back([&, k] {
            try {
                jobs[k].second();
            } catch (const std::exception& e) {
                errors[k] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    std::string failed;
    for (size_t k = 0; k < jobs.size(); ++k)
        if (!errors[k].empty())
            failed += fmt::format("{}{}: {}", failed.empty() ? "" : "\n", jobs[k].first, errors[k]);
    if (!failed.empty()) BRAID_THROW(Error, "{}", failed);
}

double PipelineTrainer::step_only(const Tensor& x, const Tensor& labels,
                                  const std::vector<uint32_t>& stages) {
    std::vector<std::pair<std::string, std::function<void()>>> jobs;
    for (uint32_t i : stages)
        jobs.emplace_back(fmt::format("pipeline stage {}", i), [&, i] {
            auto& st = m_stages.at(i);
            st.feed(x, labels);
            st.step->run();
        });
    run_concurrently(jobs);
    return m_stages.back().mean_loss.valid() &&
                   std::find(stages.begin(), stages.end(), nr_stages() - 1) != stages.end()
               ? m_stages.back().loss()
               : 0.0;
}

// ---- memory

namespace {

//! Whether `name` is "mb<j>/f/..." (tagged by build_pipeline_stage), and its j.
bool forward_activation(const std::string& name, uint32_t& j) {
    if (name.rfind("mb", 0) != 0) return false;
    size_t k = 2;
    j = 0;
    while (k < name.size() && std::isdigit(static_cast<unsigned char>(name[k])))
        j = j * 10 + uint32_t(name[k++] - '0');
    return k > 2 && name.compare(k, 3, "/f/") == 0;
}

} // namespace

size_t max_microbatches_in_flight(const PipelineStage& stage) {
    const auto& report = stage.step->memory_report();
    size_t worst = 0;
    for (auto& node : report.nodes) {
        std::vector<std::set<uint32_t>> alive(node.nr_steps + 1);
        for (auto& p : node.placements) {
            uint32_t j = 0;
            if (!forward_activation(p.name, j)) continue;
            for (size_t t = p.lifetime_begin; t < p.lifetime_end && t < alive.size(); ++t)
                alive[t].insert(j);
        }
        for (auto& s : alive) worst = std::max(worst, s.size());
    }
    return worst;
}

} // namespace braid::parallel
