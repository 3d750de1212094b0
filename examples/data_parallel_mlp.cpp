// Data-parallel training of the MLP of mlp_classifier.h. N ranks each hold a copy of the
// parameters and a graph of their own; every step each rank computes the gradients on its
// 1/N of the batch, all-reduces them with CollectiveComm (ALL_REDUCE_SUM, then divided by N:
// the mean of the ranks' mean gradients is the full batch's mean gradient) and applies the
// same SGD update. A single-rank reference trains on the full batches from the same initial
// parameters; after the last step every rank's parameters must equal the reference's.
//
//     ./build/examples/data_parallel_mlp [--ranks 4] [--steps 20]
//         ranks are threads of this process (backend "local", in-process group manager),
//         rank r on comp node cpu<r>
//     braid-launch -n 2 -- ./build/examples/data_parallel_mlp --backend gloo [--steps 20]
//         one rank per process (backend "gloo"), meeting through braid-launch's group manager
//     mpirun -np 2 ./build/examples/data_parallel_mlp --backend mpi [--steps 20]
//         one rank per process (backend "mpi"); they meet through comm::MpiRendezvous, and
//         every process computes the reference itself
//
// Prints the loss every few steps and, per rank, the largest difference from the reference.
// Exit status: 0 when every parameter is within 1e-5 (relative, see max_relative_difference)
// of the reference, 1 when one is not, 2 on an error.
#include "base/host_port.h"
#include "braid.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_rendezvous.h"
#include "comm/tcp_client.h"
#include "mlp_classifier.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

using namespace braid;
using namespace braid::example;

namespace {

constexpr double kTolerance = 1e-5;

struct Options {
    std::string backend = "local";
    uint32_t ranks = 4;
    int steps = 20;
    size_t batch = 128;
    float lr = 0.2f, momentum = 0.9f;
    bool ranks_given = false; //!< --ranks on the command line (mpi: must match the world)
};

//! What every rank and the reference start from and train on: the same seed everywhere.
struct Problem {
    MlpParams initial;
    std::vector<Tensor> x, labels; //!< one full batch per step
};

Problem make_problem(const Options& opt) {
    std::mt19937 rng(2024);
    Problem p;
    p.initial = MlpParams::init(rng);
    auto teacher = make_teacher(rng);
    for (int s = 0; s < opt.steps; ++s) {
        p.x.emplace_back(TensorShape{opt.batch, kIn}, dtype::Float32());
        p.labels.emplace_back(TensorShape{opt.batch, kClasses}, dtype::Float32());
        make_batch(rng, *teacher, p.x.back(), p.labels.back());
    }
    return p;
}

opr::OptimizerConfig sgd(const Options& opt) {
    opr::OptimizerConfig c;
    c.lr = opt.lr;
    c.momentum = opt.momentum;
    return c;
}

//! Rows [begin, end) of a full batch (a view, no copy): the shard one rank trains on.
Tensor rows(const Tensor& t, size_t begin, size_t end) {
    TensorShape shape = t.shape();
    shape[0] = end - begin;
    return t.view(TensorLayout(shape, t.dtype()), begin * (t.nr_bytes() / t.shape()[0]));
}

//! Trains one rank of `group` on its shards; returns the mean loss over ranks of each step.
std::vector<double> train_rank(const Problem& problem, const MlpParams& params,
                               const opr::Group& group, const Options& opt) {
    GraphOptions graph_options;
    graph_options.default_comp_node = group.comp_node.locator();
    auto graph = ComputingGraph::make(graph_options);
    size_t shard = opt.batch / group.size, begin = size_t(group.rank) * shard;
    auto model = build_mlp_loss(*graph, params, shard);
    auto grads = grad(model.loss, model.params);
    float inv_ranks = 1.f / float(group.size);
    std::vector<OutputSpec> outputs{opr::all_reduce_sum(model.loss, group, "loss") * inv_ranks};
    for (size_t i = 0; i < grads.size(); ++i) {
        auto mean_grad = opr::all_reduce_sum(grads[i], group) * inv_ranks;
        outputs.push_back(
            opr::ParamUpdate::make(model.params[i], mean_grad, {model.loss}, sgd(opt)));
    }
    auto step = graph->compile(outputs);
    std::vector<double> losses;
    for (int s = 0; s < opt.steps; ++s) {
        Tensor x = rows(problem.x[s], begin, begin + shard);
        Tensor labels = rows(problem.labels[s], begin, begin + shard);
        step->feed("x", x).feed("labels", labels).run();
        losses.push_back(step->output(0).at(0));
    }
    return losses;
}

//! Trains the single-rank reference on the full batches; returns the loss of each step.
std::vector<double> train_reference(const Problem& problem, const MlpParams& params,
                                    const Options& opt) {
    auto graph = ComputingGraph::make();
    auto model = build_mlp_loss(*graph, params, opt.batch);
    std::vector<OutputSpec> outputs{model.loss};
    for (auto& update : opr::minimize(model.loss, model.params, sgd(opt)))
        outputs.push_back(update);
    auto step = graph->compile(outputs);
    std::vector<double> losses;
    for (int s = 0; s < opt.steps; ++s) {
        step->feed("x", problem.x[s]).feed("labels", problem.labels[s]).run();
        losses.push_back(step->output(0).at(0));
    }
    return losses;
}

/*!
 * max over the parameters of max_i |a_i - b_i| / max_i |b_i|: each parameter's largest
 * difference relative to its largest value (an element-wise ratio would divide by the
 * biases' near-zero entries).
 */
double max_relative_difference(const MlpParams& a, const MlpParams& b) {
    double worst = 0;
    auto pa = a.all(), pb = b.all();
    for (size_t k = 0; k < pa.size(); ++k) {
        double diff = 0, scale = 0;
        for (size_t i = 0; i < pa[k]->shape().total_nr_elems(); ++i) {
            diff = std::max(diff, std::abs(double(pa[k]->at(i)) - double(pb[k]->at(i))));
            scale = std::max(scale, std::abs(double(pb[k]->at(i))));
        }
        worst = std::max(worst, scale > 0 ? diff / scale : diff);
    }
    return worst;
}

void print_losses(const std::vector<double>& ranks, const std::vector<double>& reference) {
    for (size_t s = 0; s < ranks.size(); ++s)
        if (s % 5 == 0 || s + 1 == ranks.size())
            std::printf("step %3zu  loss: ranks %.6f  reference %.6f\n", s, ranks[s], reference[s]);
}

//! Reports each rank's difference; returns whether all are within the tolerance.
bool report(const std::vector<double>& differences, uint32_t first_rank) {
    bool ok = true;
    for (size_t r = 0; r < differences.size(); ++r) {
        bool within = differences[r] <= kTolerance;
        ok &= within;
        std::printf("rank %zu: max relative difference from the reference %.3g (%s %.0e)\n",
                    first_rank + r, differences[r], within ? "within" : "NOT within", kTolerance);
    }
    return ok;
}

//! Ranks as threads of this process, one graph and comp node (cpu<r>) each.
int run_threads(const Options& opt) {
    Problem problem = make_problem(opt);
    MlpParams reference = problem.initial.clone();
    auto reference_losses = train_reference(problem, reference, opt);

    auto client = std::make_shared<comm::InProcessGroupClient>();
    std::vector<MlpParams> params;
    for (uint32_t r = 0; r < opt.ranks; ++r) params.push_back(problem.initial.clone());
    std::vector<std::vector<double>> losses(opt.ranks);
    std::vector<std::string> errors(opt.ranks);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < opt.ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                opr::Group group{"dp",
                                 opt.ranks,
                                 int32_t(r),
                                 client,
                                 "local",
                                 0,
                                 CompNode::load(fmt::format("cpu{}", r))};
                losses[r] = train_rank(problem, params[r], group, opt);
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (uint32_t r = 0; r < opt.ranks; ++r)
        if (!errors[r].empty()) BRAID_THROW(Error, "rank {}: {}", r, errors[r]);

    std::printf("%u ranks as threads (backend local), %d steps, batch %zu (%zu per rank)\n",
                opt.ranks, opt.steps, opt.batch, opt.batch / opt.ranks);
    print_losses(losses[0], reference_losses);
    std::vector<double> differences;
    for (auto& p : params) differences.push_back(max_relative_difference(p, reference));
    return report(differences, 0) ? 0 : 1;
}

//! One rank per MPI process; every process also trains the reference.
int run_mpi(Options opt) {
    comm::mpi_ensure_initialized();
    auto rendezvous = std::make_unique<comm::MpiRendezvous>();
    if (opt.ranks_given && opt.ranks != uint32_t(rendezvous->world_size()))
        BRAID_THROW(ValueError, "--ranks {} but mpirun started {} processes (one rank each)",
                    opt.ranks, rendezvous->world_size());
    opt.ranks = uint32_t(rendezvous->world_size());
    uint32_t rank = uint32_t(rendezvous->world_rank());
    if (opt.batch % opt.ranks != 0)
        BRAID_THROW(ValueError, "the batch of {} rows does not split over {} processes", opt.batch,
                    opt.ranks);
    Problem problem = make_problem(opt);
    MlpParams params = problem.initial.clone();
    opr::Group group{"dp",  opt.ranks, int32_t(rank),         rendezvous->client(),
                     "mpi", 0,         CompNode::load("cpu0")};
    auto losses = train_rank(problem, params, group, opt);

    MlpParams reference = problem.initial.clone();
    auto reference_losses = train_reference(problem, reference, opt);
    if (rank == 0) {
        std::printf("%u ranks as MPI processes (backend mpi), %d steps, batch %zu (%zu per "
                    "rank)\n",
                    opt.ranks, opt.steps, opt.batch, opt.batch / opt.ranks);
        print_losses(losses, reference_losses);
    }
    std::fflush(stdout);
    // Print in rank order, then agree on the exit status.
    int failed = 0, any_failed = 0;
    for (uint32_t r = 0; r < opt.ranks; ++r) {
        BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (r == rank) failed = report({max_relative_difference(params, reference)}, rank) ? 0 : 1;
        std::fflush(stdout);
    }
    BRAID_MPI_CHECK(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    comm::CommunicatorCache::instance().clear();
    BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    rendezvous.reset();
    return any_failed;
}

/*!
 * One rank per process under braid-launch (backend gloo): rank, world size and the group
 * manager come from BRAID_RANK, BRAID_WORLD_SIZE and BRAID_SERVER. Every process also trains
 * the reference and reports its own rank; braid-launch fails the job when one rank differs.
 */
int run_gloo(Options opt) {
    const char* server = std::getenv("BRAID_SERVER");
    const char* rank_text = std::getenv("BRAID_RANK");
    const char* size_text = std::getenv("BRAID_WORLD_SIZE");
    if (!server || !rank_text || !size_text)
        BRAID_THROW(ValueError, "--backend gloo runs under braid-launch (BRAID_SERVER, "
                                "BRAID_RANK and BRAID_WORLD_SIZE are not set)");
    uint32_t rank = uint32_t(std::stoul(rank_text)), size = uint32_t(std::stoul(size_text));
    if (opt.ranks_given && opt.ranks != size)
        BRAID_THROW(ValueError, "--ranks {} but braid-launch started {} ranks", opt.ranks, size);
    opt.ranks = size;
    if (opt.batch % opt.ranks != 0)
        BRAID_THROW(ValueError, "the batch of {} rows does not split over {} processes", opt.batch,
                    opt.ranks);
    auto address = host_port_or_throw(server, "BRAID_SERVER");
    auto client = std::make_shared<comm::TcpGroupClient>(address.host, address.port);
    Problem problem = make_problem(opt);
    MlpParams params = problem.initial.clone();
    opr::Group group{"dp", size, int32_t(rank), client, "gloo", 0, CompNode::load("cpu0")};
    auto losses = train_rank(problem, params, group, opt);

    MlpParams reference = problem.initial.clone();
    auto reference_losses = train_reference(problem, reference, opt);
    if (rank == 0) {
        std::printf("%u ranks as processes (backend gloo), %d steps, batch %zu (%zu per rank)\n",
                    opt.ranks, opt.steps, opt.batch, opt.batch / opt.ranks);
        print_losses(losses, reference_losses);
    }
    bool ok = report({max_relative_difference(params, reference)}, rank);
    std::fflush(stdout);
    comm::CommunicatorCache::instance().clear();
    return ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    Options opt;
    CLI::App app{"data_parallel_mlp: data-parallel MLP training checked against one rank"};
    app.add_option("--backend", opt.backend,
                   "local (ranks are threads), mpi (under mpirun) or gloo (under braid-launch)")
        ->check(CLI::IsMember({"local", "mpi", "gloo"}));
    app.add_option("--ranks", opt.ranks, "ranks (threads); with mpi: the number of processes")
        ->check(CLI::Range(1, 64));
    app.add_option("--steps", opt.steps, "training steps")->check(CLI::Range(1, 100000));
    app.add_option("--batch", opt.batch, "rows per step, split evenly over the ranks")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--lr", opt.lr, "SGD learning rate");
    app.add_option("--momentum", opt.momentum, "SGD momentum");
    CLI11_PARSE(app, argc, argv);
    opt.ranks_given = app.count("--ranks") > 0;
    try {
        register_all_operators();
        if (opt.backend == "mpi") return run_mpi(opt);
        if (opt.backend == "gloo") return run_gloo(opt);
        if (opt.batch % opt.ranks != 0)
            BRAID_THROW(ValueError, "the batch of {} rows does not split over {} ranks", opt.batch,
                        opt.ranks);
        return run_threads(opt);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "data_parallel_mlp: %s\n", e.what());
        return 2;
    }
}
