// Context parallelism: the pre-norm transformer block of examples/models/transformer_block.braid
// (sequence 128, d_model 256, 4 causal heads) with its sequence split over N ranks in the
// load-balanced (zigzag) layout and ring attention across them. Every rank gathers the whole
// output, which must equal the single-rank block's (max |a - b| / max |b| <= 1e-5).
//
//     ./build/examples/context_parallel_block [--ranks 2] [--rotation ring|all_gather]
//         ranks are graphs of this process (rank r on comp node cpu<r>, backend "local")
//     mpirun -np 2 ./build/examples/context_parallel_block --backend mpi
//         one rank per process (backend "mpi", comm::MpiRendezvous); each process checks
//     ./build/examples/context_parallel_block --ranks 2 --dump cp_block.braid
//         writes rank 0's model for 2 ranks, which runs as
//         braid-run cp_block.braid --devices 2        (threads)
//         mpirun -np 2 braid-run cp_block.braid --backend mpi
//
// Exit status: 0 when every rank's output matches, 1 when one does not, 2 on an error.
#include "braid.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_rendezvous.h"
#include "tools/example_models.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

using namespace braid;

namespace {

constexpr double kTolerance = 1e-5;
constexpr size_t kSeq = 128, kModel = 256;

struct Options {
    uint32_t ranks = 2;
    std::string backend = "local";
    std::string rotation = "ring";
    std::string dump_path;
};

opr::RingRotation rotation_of(const Options& o) {
    return o.rotation == "all_gather" ? opr::RingRotation::ALL_GATHER : opr::RingRotation::RING;
}

Tensor input_value() {
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    Tensor x({kSeq, kModel}, dtype::Float32());
    for (size_t i = 0; i < x.shape().total_nr_elems(); ++i) x.ptr<float>()[i] = u(rng);
    return x;
}

//! y of one rank's context-parallel graph (or, with plan == nullptr, of the single-rank block).
Tensor run_block(const examples::ContextParallelPlan* plan, const Tensor& x) {
    GraphOptions go;
    if (plan) go.default_comp_node = fmt::format("cpu{}", plan->rank);
    auto g = ComputingGraph::make(go);
    auto y = examples::build_transformer_block(*g, kSeq, kModel, 4, 1024, plan)[0];
    auto exec = g->compile({y});
    exec->feed("x", x);
    exec->run();
    return exec->output(0).copy();
}

//! max |a - b| / max |b|.
double relative_diff(const Tensor& a, const Tensor& b) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < b.shape().total_nr_elems(); ++i) {
        diff = std::max(diff, double(std::fabs(a.ptr<float>()[i] - b.ptr<float>()[i])));
        scale = std::max(scale, double(std::fabs(b.ptr<float>()[i])));
    }
    return diff / scale;
}

int check(const std::vector<Tensor>& ys, const std::vector<uint32_t>& ranks, const Tensor& ref) {
    int status = 0;
    for (size_t i = 0; i < ys.size(); ++i) {
        double d = relative_diff(ys[i], ref);
        std::printf("rank %u: output y %s, max relative difference from one rank %.2e\n", ranks[i],
                    ys[i].shape().to_string().c_str(), d);
        if (!(d <= kTolerance)) status = 1;
    }
    std::printf("%s\n", status ? "MISMATCH" : "OK");
    return status;
}

int run_threads(const Options& o) {
    Tensor x = input_value();
    auto client = std::make_shared<comm::InProcessGroupClient>();
    std::vector<Tensor> ys(o.ranks);
    std::vector<std::string> errors(o.ranks);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < o.ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                examples::ContextParallelPlan plan{o.ranks, r, client, "local", rotation_of(o)};
                ys[r] = run_block(&plan, x);
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (uint32_t r = 0; r < o.ranks; ++r)
        if (!errors[r].empty()) {
            std::fprintf(stderr, "rank %u: %s\n", r, errors[r].c_str());
            return 2;
        }
    std::printf("context-parallel transformer block, sequence %zu over %u ranks as threads (%s "
                "rotation)\n",
                kSeq, o.ranks, o.rotation.c_str());
    std::vector<uint32_t> ranks(o.ranks);
    for (uint32_t r = 0; r < o.ranks; ++r) ranks[r] = r;
    return check(ys, ranks, run_block(nullptr, x));
}

int run_mpi(const Options& o) {
    auto rendezvous = std::make_unique<comm::MpiRendezvous>();
    uint32_t rank = uint32_t(comm::mpi_world_rank()), size = uint32_t(comm::mpi_world_size());
    Tensor x = input_value();
    examples::ContextParallelPlan plan{size, rank, rendezvous->client(), "mpi", rotation_of(o)};
    Tensor y = run_block(&plan, x);
    if (rank == 0)
        std::printf("context-parallel transformer block, sequence %zu over %u processes (%s "
                    "rotation)\n",
                    kSeq, size, o.rotation.c_str());
    return check({y}, {rank}, run_block(nullptr, x));
}

int dump_model(const Options& o) {
    auto g = ComputingGraph::make();
    examples::ContextParallelPlan plan{o.ranks, 0, std::make_shared<comm::InProcessGroupClient>(),
                                       "local", rotation_of(o)};
    auto outs = examples::build_transformer_block(*g, kSeq, kModel, 4, 1024, &plan);
    DumpOptions opt;
    opt.metadata = {{"example", "context_parallel_block"},
                    {"ranks", std::to_string(o.ranks)},
                    {"rotation", o.rotation}};
    dump(outs, o.dump_path, opt);
    std::printf("wrote %s: the block for %u ranks (run it with braid-run --devices %u, or under "
                "mpirun -np %u with --backend mpi)\n",
                o.dump_path.c_str(), o.ranks, o.ranks, o.ranks);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"Context-parallel transformer block checked against one rank"};
    app.add_option("--ranks", o.ranks, "Ranks as threads, or of the dumped model")
        ->check(CLI::Range(1u, 64u));
    app.add_option("--backend", o.backend, "local (ranks are threads) or mpi (under mpirun)")
        ->check(CLI::IsMember({"local", "mpi"}));
    app.add_option("--rotation", o.rotation, "How key/value blocks travel")
        ->check(CLI::IsMember({"ring", "all_gather"}));
    app.add_option("--dump", o.dump_path, "Write rank 0's model for --ranks ranks and exit");
    CLI11_PARSE(app, argc, argv);
    register_all_operators();
    try {
        if (kSeq % (2 * (o.backend == "mpi" ? 1 : o.ranks)) != 0) {
            std::fprintf(stderr, "the sequence of %zu does not split into 2 x %u chunks\n", kSeq,
                         o.ranks);
            return 2;
        }
        if (!o.dump_path.empty()) return dump_model(o);
        return o.backend == "mpi" ? run_mpi(o) : run_threads(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
}
