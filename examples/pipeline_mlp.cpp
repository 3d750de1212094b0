// Pipeline-parallel training of an MLP (parallel/pipeline.h): the layers split into stages, each
// step's batch into micro-batches, under the GPipe or the 1F1B schedule. A single-device
// reference trains the same model on the whole batches; after the last step every stage's
// parameters must equal the reference's.
//
//     ./build/examples/pipeline_mlp [--stages 4] [--schedule gpipe|1f1b] [--microbatches 4]
//         stages are threads of this process (backend "local", in-process group manager),
//         stage i on comp node cpu<i>
//     mpirun -np 4 ./build/examples/pipeline_mlp --backend mpi [--schedule ...]
//         one stage per process (backend "mpi"); they meet through comm::MpiRendezvous, and
//         every process trains the reference and checks its own stage
//     ./build/examples/pipeline_mlp --stage-begin 0,4 --stage-devices 2,2
//         stages of several ranks (parallel/sharded_pipeline.h): each stage's operators sharded
//         over its ranks by the intra-operator ILP, ranks as threads on cpu0, cpu1, ...
//     ./build/examples/pipeline_mlp --auto-stages 4
//         the stages and their ranks chosen by the inter-operator pass
//         (parallel/stage_sharding.h, analytic costs), then trained as above
//     --sweep    every schedule and B = 1, 2, 4, 8 in one run (the equality check of both)
//     --profile  the stages' Alpa-style profiles (parallel/pipeline_profile.h), table and JSON,
//                instead of the check; --widths, --activation, --activate-last, --stage-begin
//                and --batch pick the model (docs/parallel.md profiles the seed's MLP stage)
//
// Exit status: 0 when every parameter is within 1e-5 (relative, max |a - b| / max |b| per
// tensor) of the reference, 1 when one is not, 2 on an error.
#include "braid.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_rendezvous.h"
#include "parallel/pipeline.h"
#include "parallel/pipeline_model.h"
#include "parallel/pipeline_profile.h"
#include "parallel/sharded_pipeline.h"
#include "parallel/stage_sharding.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <random>

using namespace braid;
using namespace braid::parallel;

namespace {

constexpr double kTolerance = 1e-5;

struct Options {
    std::string backend = "local", schedule = "1f1b";
    uint32_t stages = 4, microbatches = 4;
    int steps = 10;
    size_t batch = 32;
    bool sweep = false, profile = false, activate_last = false;
    std::vector<size_t> widths{16, 64, 64, 64, 64, 64, 64, 64, 4}; //!< 8 layers, 2 per stage
    std::vector<size_t> stage_begin;                               //!< empty: equal layers
    std::vector<uint32_t> stage_devices; //!< ranks per stage (sharded stages); empty: one each
    uint32_t auto_stages = 0;            //!< devices for the inter-operator pass to plan over
    std::string activation = "tanh";
};

PipelineModel make_model(const Options& o) {
    return pipeline_mlp_model(o.widths, 3, o.activation, o.activate_last);
}

opr::OptimizerConfig sgd() {
    opr::OptimizerConfig c;
    c.lr = 0.02f;
    c.momentum = 0.9f;
    return c;
}

//! A fresh model, its copy trained on one device (the reference), the batches, the reference's
//! losses.
struct Trial {
    PipelineModel model, reference;
    std::vector<std::pair<Tensor, Tensor>> data;
    std::vector<double> ref_losses;
};

Trial make_trial(const Options& o) {
    Trial t;
    t.model = make_model(o);
    t.reference = clone_model(t.model);
    t.data = random_batches(t.model, size_t(o.steps), o.batch, 2024);
    t.ref_losses = train_on_one_device(t.reference, t.data, sgd());
    return t;
}

PipelineOptions pipeline_options(const Options& o, const PipelineModel& model,
                                 PipelineSchedule schedule, uint32_t microbatches) {
    PipelineOptions p;
    p.stage_begin =
        o.stage_begin.empty() ? equal_layer_split(model.layers.size(), o.stages) : o.stage_begin;
    p.microbatches = microbatches;
    p.schedule = schedule;
    p.optimizer = sgd();
    p.batch = o.batch;
    p.backend = o.backend;
    p.key = fmt::format("pipeline/{}/{}", pipeline_schedule_name(schedule), microbatches);
    return p;
}

//! The largest difference of stage `stage`'s layers (all layers when stage < 0).
double stage_difference(const PipelineModel& got, const PipelineModel& ref, size_t first,
                        size_t end) {
    PipelineModel a, b;
    a.layers.assign(got.layers.begin() + long(first), got.layers.begin() + long(end));
    b.layers.assign(ref.layers.begin() + long(first), ref.layers.begin() + long(end));
    return max_relative_difference(a, b);
}

std::vector<std::pair<PipelineSchedule, uint32_t>> cases(const Options& o) {
    if (!o.sweep) return {{parse_pipeline_schedule(o.schedule), o.microbatches}};
    std::vector<std::pair<PipelineSchedule, uint32_t>> all;
    for (auto s : {PipelineSchedule::GPIPE, PipelineSchedule::ONE_F_ONE_B})
        for (uint32_t b : {1u, 2u, 4u, 8u}) all.emplace_back(s, b);
    return all;
}

//! The stages' profiles after one warm-up step, compute_cost over `steps` more; no reference.
int run_profile(const Options& o) {
    auto [schedule, b] = cases(o).front();
    auto model = make_model(o);
    auto data = random_batches(model, size_t(o.steps), o.batch, 2024);
    PipelineTrainer trainer(model, pipeline_options(o, model, schedule, b));
    std::vector<StageProfile> profiles;
    for (uint32_t i = 0; i < trainer.nr_stages(); ++i)
        profiles.push_back(profile_stage(trainer.stage(i), pipeline_schedule_name(schedule)));
    trainer.step(data[0].first, data[0].second);
    measure_compute_cost(trainer, data[0].first, data[0].second, o.steps, profiles);
    std::printf("%s%s\n", stage_profile_table(profiles).c_str(),
                stage_profiles_json(profiles).c_str());
    return 0;
}

//! Stages of several ranks: given (--stage-devices) or chosen (--auto-stages).
int run_sharded(Options o) {
    bool ok = true;
    for (auto [schedule, b] : cases(o)) {
        auto [model, reference, data, ref_losses] = make_trial(o);
        ShardedPipelineOptions so;
        so.pipeline = pipeline_options(o, model, schedule, b);
        so.stage_devices = o.stage_devices;
        if (o.auto_stages) {
            AutoShardOptions costs; // analytic, as the sharded stages are planned
            auto part = auto_partition_submeshes(
                model.layers.size(), o.auto_stages, b, [&](size_t a, size_t e, uint32_t m) {
                    return sharded_stage_cost(model, a, e, m, o.batch / b, costs);
                });
            so.pipeline.stage_begin = part.stage_begin;
            so.stage_devices = part.stage_devices;
        }
        ShardedPipelineTrainer trainer(model, so);
        std::printf("%u stages on %u ranks (threads, backend local), schedule %s, %u "
                    "micro-batches of %zu rows, %d steps\n%s",
                    trainer.nr_stages(), trainer.nr_ranks(), pipeline_schedule_name(schedule), b,
                    o.batch / b, o.steps, trainer.to_string().c_str());
        for (int s = 0; s < o.steps; ++s) {
            double loss = trainer.step(data[s].first, data[s].second);
            if (s % 5 == 0 || s + 1 == o.steps)
                std::printf("step %3d  loss: pipeline %.6f  reference %.6f\n", s, loss,
                            ref_losses[s]);
        }
        double d = max_relative_difference(model, reference);
        ok &= d <= kTolerance;
        std::printf("max relative difference from the reference %.3g (%s %.0e)\n", d,
                    d <= kTolerance ? "within" : "NOT within", kTolerance);
    }
    return ok ? 0 : 1;
}

int run_threads(const Options& o) {
    if (o.profile) return run_profile(o);
    if (!o.stage_devices.empty() || o.auto_stages) return run_sharded(o);
    bool ok = true;
    for (auto [schedule, b] : cases(o)) {
        auto [model, reference, data, ref_losses] = make_trial(o);
        PipelineTrainer trainer(model, pipeline_options(o, model, schedule, b));
        std::printf("%u stages as threads (backend local), schedule %s, %u micro-batches of %zu "
                    "rows, %d steps\n",
                    o.stages, pipeline_schedule_name(schedule), b, o.batch / b, o.steps);
        for (int s = 0; s < o.steps; ++s) {
            double loss = trainer.step(data[s].first, data[s].second);
            if (s % 5 == 0 || s + 1 == o.steps)
                std::printf("step %3d  loss: pipeline %.6f  reference %.6f\n", s, loss,
                            ref_losses[s]);
        }
        for (uint32_t i = 0; i < o.stages; ++i) {
            auto& st = trainer.stage(i);
            double d = stage_difference(model, reference, st.first_layer, st.end_layer);
            ok &= d <= kTolerance;
            std::printf("stage %u (layers %zu-%zu): max relative difference from the reference "
                        "%.3g (%s %.0e); arena %zu B, at most %zu micro-batches of activations\n",
                        i, st.first_layer, st.end_layer - 1, d,
                        d <= kTolerance ? "within" : "NOT within", kTolerance,
                        st.step->memory_report().nodes.at(0).arena_bytes,
                        max_microbatches_in_flight(st));
        }
    }
    return ok ? 0 : 1;
}

int run_mpi(Options o) {
    comm::mpi_ensure_initialized();
    auto rendezvous = std::make_unique<comm::MpiRendezvous>();
    o.stages = uint32_t(rendezvous->world_size());
    uint32_t rank = uint32_t(rendezvous->world_rank());
    int failed = 0;
    for (auto [schedule, b] : cases(o)) {
        auto [model, reference, data, ref_losses] = make_trial(o);
        auto options = pipeline_options(o, model, schedule, b);
        options.client = rendezvous->client();
        options.comp_node = [](uint32_t) { return std::string("cpu0"); };
        auto stage = build_pipeline_stage(model, options, rank);
        double loss = 0;
        for (int s = 0; s < o.steps; ++s) {
            stage.feed(data[s].first, data[s].second);
            stage.step->run();
            loss = stage.loss();
        }
        double d = stage_difference(model, reference, stage.first_layer, stage.end_layer);
        bool within = d <= kTolerance;
        if (rank + 1 == o.stages)
            std::printf("%u stages as MPI processes, schedule %s, %u micro-batches: last loss "
                        "%.6f (reference %.6f)\n",
                        o.stages, pipeline_schedule_name(schedule), b, loss, ref_losses.back());
        std::fflush(stdout);
        for (uint32_t r = 0; r < o.stages; ++r) {
            BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
            if (r == rank)
                std::printf("  stage %u (layers %zu-%zu): max relative difference %.3g (%s "
                            "%.0e)\n",
                            rank, stage.first_layer, stage.end_layer - 1, d,
                            within ? "within" : "NOT within", kTolerance);
            std::fflush(stdout);
        }
        failed |= within ? 0 : 1;
    }
    int any_failed = 0;
    BRAID_MPI_CHECK(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    comm::CommunicatorCache::instance().clear();
    BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    rendezvous.reset();
    return any_failed;
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"pipeline_mlp: pipeline-parallel MLP training checked against one device"};
    app.add_option("--backend", o.backend, "local (stages are threads) or mpi (under mpirun)")
        ->check(CLI::IsMember({"local", "mpi"}));
    app.add_option("--stages", o.stages, "stages (threads); with mpi: the processes of mpirun")
        ->check(CLI::Range(1, 8));
    app.add_option("--schedule", o.schedule, "gpipe or 1f1b")
        ->check(CLI::IsMember({"gpipe", "1f1b"}));
    app.add_option("--microbatches", o.microbatches, "micro-batches per step")
        ->check(CLI::Range(1, 1024));
    app.add_option("--steps", o.steps, "training steps")->check(CLI::Range(1, 100000));
    app.add_option("--batch", o.batch, "rows per step")->check(CLI::Range(1, 1 << 20));
    app.add_flag("--sweep", o.sweep, "both schedules with 1, 2, 4 and 8 micro-batches");
    app.add_flag("--profile", o.profile,
                 "print the stages' profiles instead of checking against one device (threads)");
    app.add_option("--widths", o.widths, "the MLP's widths, input first (comma-separated)")
        ->delimiter(',');
    app.add_option("--stage-devices", o.stage_devices,
                   "ranks of each stage (comma-separated): stages sharded over several ranks")
        ->delimiter(',');
    app.add_option("--auto-stages", o.auto_stages,
                   "choose the stages and their ranks over this many devices, then train")
        ->check(CLI::Range(1, 64));
    app.add_option("--stage-begin", o.stage_begin, "first layer of each stage (comma-separated)")
        ->delimiter(',');
    app.add_option("--activation", o.activation, "tanh or relu")
        ->check(CLI::IsMember({"tanh", "relu"}));
    app.add_flag("--activate-last", o.activate_last, "the activation after the last layer too");
    CLI11_PARSE(app, argc, argv);
    if (!o.stage_begin.empty())
        o.stages = uint32_t(o.stage_begin.size());
    else if (!o.stage_devices.empty())
        o.stages = uint32_t(o.stage_devices.size());
    if (o.backend == "mpi" && (!o.stage_devices.empty() || o.auto_stages)) {
        std::fprintf(stderr, "pipeline_mlp: --stage-devices and --auto-stages run the ranks as "
                             "threads (backend local), not under mpi\n");
        return 2;
    }
    try {
        register_all_operators();
        return o.backend == "mpi" ? run_mpi(o) : run_threads(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pipeline_mlp: %s\n", e.what());
        return 2;
    }
}
