// Tensor-parallel (Megatron-style) transformer MLP: y = gelu(x W1 + b1) W2 + b2 with W1 and
// b1 split by columns and W2 by rows over the mesh axis "tp", each rank computing its slice
// and one all-reduce joining them. One forward and backward pass of the loss sum(y * g) is
// checked against the same MLP on one device: the output, the input gradient and every
// weight gradient (assembled from the ranks' shards). `--block attention` checks the
// tensor-parallel multi-head attention block instead (Wq, Wk, Wv by columns, whole heads per
// rank; Wo by rows).
//
//     ./build/examples/tensor_parallel_mlp [--ranks 4] [--block mlp|attention]
//         ranks are graphs of this process (parallel::Pmap: backend "local", an in-process
//         group manager, rank r on comp node cpu<r>)
//     mpirun -np 2 ./build/examples/tensor_parallel_mlp --backend mpi
//         one rank per process (parallel::build_spmd_rank, backend "mpi", comm::MpiRendezvous);
//         every process computes the reference and checks its own shards
//
// Exit status: 0 when every value is within 1e-5 of the reference (max |a - b| / max |b|), 1
// when one is not, 2 on an error.
#include "braid.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_rendezvous.h"
#include "parallel/pmap.h"
#include "parallel/sharded_tensor.h"
#include "parallel/tensor_parallel.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <random>

using namespace braid;
using namespace braid::parallel;

namespace {

constexpr double kTolerance = 1e-5;

struct Options {
    std::string backend = "local";
    std::string block = "mlp";
    uint32_t ranks = 4;
    size_t tokens = 16, d_model = 64, d_ff = 256, heads = 4;
};

//! The block's arguments: x and g (the output-gradient weights) replicated, then the
//! weights. MLP: W1/b1 by columns, W2 by rows, b2 replicated. Attention: Wq, Wk, Wv and
//! their biases by columns, Wo by rows, bo replicated.
std::vector<PmapArg> block_args(const Mesh& mesh, const Options& o) {
    size_t t = o.tokens, d = o.d_model, f = o.d_ff;
    auto f32 = dtype::Float32();
    if (o.block == "attention") {
        std::vector<PmapArg> args = {{"x", {t, d}, f32, replicated_spec(mesh, 2)},
                                     {"g", {t, d}, f32, replicated_spec(mesh, 2)}};
        for (const char* n : {"q", "k", "v"}) {
            args.push_back({fmt::format("w{}", n), {d, d}, f32, column_parallel_spec(mesh, "tp")});
            args.push_back({fmt::format("b{}", n), {d}, f32, column_parallel_spec(mesh, "tp", 1)});
        }
        args.push_back({"wo", {d, d}, f32, row_parallel_spec(mesh, "tp")});
        args.push_back({"bo", {d}, f32, replicated_spec(mesh, 1)});
        return args;
    }
    return {{"x", {t, d}, f32, replicated_spec(mesh, 2)},
            {"g", {t, d}, f32, replicated_spec(mesh, 2)},
            {"w1", {d, f}, f32, column_parallel_spec(mesh, "tp", 2)},
            {"b1", {f}, f32, column_parallel_spec(mesh, "tp", 1)},
            {"w2", {f, d}, f32, row_parallel_spec(mesh, "tp", 2)},
            {"b2", {d}, f32, replicated_spec(mesh, 1)}};
}

//! The results' layouts: y and dx replicated, the weight gradients like their weights.
std::vector<ShardingSpec> result_specs(const std::vector<PmapArg>& args) {
    std::vector<ShardingSpec> specs = {args[0].spec, args[0].spec};
    for (size_t i = 2; i < args.size(); ++i) specs.push_back(args[i].spec);
    return specs;
}

//! y, then the gradients of sum(y * g) w.r.t. x and every weight.
SymbolVarArray with_grads(SymbolVar y, const SymbolVarArray& in) {
    SymbolVarArray wrt = {in[0]};
    wrt.insert(wrt.end(), in.begin() + 2, in.end());
    auto grads = grad(opr::reduce_sum(y * in[1]), wrt);
    SymbolVarArray outs = {y};
    outs.insert(outs.end(), grads.begin(), grads.end());
    return outs;
}

//! One rank's computation: the tensor-parallel block and its gradients; the input gradient
//! is each rank's part, summed over tp.
SymbolVarArray rank_block(const Options& o, SpmdContext& ctx, const SymbolVarArray& in) {
    SymbolVar y;
    if (o.block == "attention") {
        TensorParallelAttention w{in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9]};
        y = tensor_parallel_attention(in[0], w, o.heads, /*causal=*/true, ctx.groups(), "tp");
    } else {
        y = tensor_parallel_mlp(in[0], {in[2], in[3], in[4], in[5]}, ctx.groups(), "tp");
    }
    auto outs = with_grads(y, in);
    outs[1] = ctx.psum(outs[1], "tp");
    return outs;
}

std::vector<Tensor> random_values(const std::vector<PmapArg>& args) {
    std::mt19937 rng(2024);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<Tensor> values;
    for (auto& a : args) {
        Tensor t(a.global_shape, a.dtype);
        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) t.ptr<float>()[i] = u(rng);
        values.push_back(t);
    }
    return values;
}

//! The block on one device from plain operators.
std::vector<Tensor> reference(const Options& o, const std::vector<PmapArg>& args,
                              const std::vector<Tensor>& values) {
    auto g = ComputingGraph::make();
    SymbolVarArray in;
    for (auto& a : args) in.push_back(opr::Input::make(*g, a.name, a.dtype, a.global_shape));
    SymbolVar y;
    if (o.block == "attention") {
        long heads = long(o.heads), d_head = long(o.d_model / o.heads);
        auto split_heads = [&](SymbolVar t) {
            return opr::dimshuffle(t.reshape(std::vector<long>{1, -1, heads, d_head}),
                                   {0, 2, 1, 3});
        };
        auto q = split_heads(opr::matmul(in[0], in[2]) + in[3]);
        auto k = split_heads(opr::matmul(in[0], in[4]) + in[5]);
        auto v = split_heads(opr::matmul(in[0], in[6]) + in[7]);
        auto ctx = opr::scaled_dot_product_attention(q, k, v, /*causal=*/true)[0];
        auto merged =
            opr::dimshuffle(ctx, {0, 2, 1, 3}).reshape(std::vector<long>{-1, long(o.d_model)});
        y = opr::matmul(merged, in[8]) + in[9];
    } else {
        y = opr::matmul(opr::gelu(opr::matmul(in[0], in[2]) + in[3]), in[4]) + in[5];
    }
    auto outs = with_grads(y, in);
    auto exec = g->compile(std::vector<OutputSpec>(outs.begin(), outs.end()));
    for (size_t i = 0; i < args.size(); ++i) exec->feed(args[i].name, values[i]);
    exec->run();
    std::vector<Tensor> result;
    for (size_t i = 0; i < outs.size(); ++i) result.push_back(exec->output(i).copy());
    return result;
}

//! max |t|.
double max_abs(const Tensor& t) {
    double m = 0;
    for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
        m = std::max(m, double(std::abs(t.ptr<float>()[i])));
    return m;
}

//! max |a - b| / `scale` (max |b| when not given).
double relative_difference(const Tensor& a, const Tensor& b, double scale = -1) {
    if (a.shape() != b.shape())
        BRAID_THROW(ShapeError, "result of shape {}, the reference's is {}", a.shape().to_string(),
                    b.shape().to_string());
    double diff = 0;
    for (size_t i = 0; i < a.shape().total_nr_elems(); ++i)
        diff = std::max(diff, double(std::abs(a.ptr<float>()[i] - b.ptr<float>()[i])));
    if (scale < 0) scale = max_abs(b);
    return scale > 0 ? diff / scale : diff;
}

//! "y", then "d<name>" of x and every weight.
std::vector<std::string> result_names(const std::vector<PmapArg>& args) {
    std::vector<std::string> names = {"y", "dx"};
    for (size_t i = 2; i < args.size(); ++i) names.push_back("d" + args[i].name);
    return names;
}

bool report(const std::vector<Tensor>& got, const std::vector<Tensor>& expected,
            const std::vector<std::string>& names, const std::string& who) {
    bool ok = true;
    for (size_t i = 0; i < got.size(); ++i) {
        // d loss / d bk is zero in exact arithmetic (softmax ignores a shift that every key of a
        // query shares): both sides are rounding noise, measured against the scale of the key
        // projection's other gradient, d loss / d wk.
        double scale = -1;
        if (names[i] == "dbk")
            for (size_t j = 0; j < names.size(); ++j)
                if (names[j] == "dwk") scale = max_abs(expected[j]);
        double d = relative_difference(got[i], expected[i], scale);
        ok &= d <= kTolerance;
        std::printf("%s%-4s %-12s relative difference %.3g (%s %.0e)\n", who.c_str(),
                    names[i].c_str(), got[i].shape().to_string().c_str(), d,
                    d <= kTolerance ? "within" : "NOT within", kTolerance);
    }
    return ok;
}

int run_threads(const Options& o) {
    Mesh mesh({o.ranks}, {"tp"});
    auto args = block_args(mesh, o);
    Pmap block([&](SpmdContext& ctx, const SymbolVarArray& in) { return rank_block(o, ctx, in); },
               mesh, args, result_specs(args));
    auto values = random_values(args);
    auto got = block(values);
    if (o.block == "attention")
        std::printf("tensor-parallel attention, %zu tokens, d_model %zu, %zu causal heads, on %u "
                    "ranks as threads (backend local)\n",
                    o.tokens, o.d_model, o.heads, o.ranks);
    else
        std::printf("tensor-parallel MLP %zu x %zu -> %zu -> %zu on %u ranks as threads (backend "
                    "local)\n",
                    o.tokens, o.d_model, o.d_ff, o.d_model, o.ranks);
    std::printf("%s", block.plan().to_string().c_str());
    return report(got, reference(o, args, values), result_names(args), "") ? 0 : 1;
}

int run_mpi(Options o) {
    comm::mpi_ensure_initialized();
    auto rendezvous = std::make_unique<comm::MpiRendezvous>();
    o.ranks = uint32_t(rendezvous->world_size());
    uint32_t rank = uint32_t(rendezvous->world_rank());
    Mesh mesh({o.ranks}, {"tp"});
    auto args = block_args(mesh, o);
    SpmdOptions so;
    so.backend = "mpi";
    so.client = rendezvous->client();
    so.comp_node = [](uint32_t) { return std::string("cpu0"); };
    auto r = build_spmd_rank(
        [&](SpmdContext& ctx, const SymbolVarArray& in) { return rank_block(o, ctx, in); }, mesh,
        args, rank, so);
    auto exec = r.graph->compile(std::vector<OutputSpec>(r.outputs.begin(), r.outputs.end()));
    auto values = random_values(args);
    for (size_t i = 0; i < args.size(); ++i)
        exec->feed(args[i].name,
                   ShardedTensor::split(values[i], args[i].spec).shard_of(mesh, rank));
    exec->run();
    // This rank's pieces of the reference's results.
    auto expected = reference(o, args, values);
    auto specs = result_specs(args);
    std::vector<Tensor> got, mine;
    for (size_t i = 0; i < expected.size(); ++i) {
        got.push_back(exec->output(i).copy());
        mine.push_back(ShardedTensor::split(expected[i], specs[i]).shard_of(mesh, rank));
    }
    int failed = 0, any_failed = 0;
    for (uint32_t p = 0; p < o.ranks; ++p) {
        BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (p == rank)
            failed = report(got, mine, result_names(args), fmt::format("rank {}: ", rank)) ? 0 : 1;
        std::fflush(stdout);
    }
    BRAID_MPI_CHECK(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    exec.reset();
    comm::CommunicatorCache::instance().clear();
    BRAID_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    rendezvous.reset();
    return any_failed;
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"tensor_parallel_mlp: a Megatron-style MLP checked against one device"};
    app.add_option("--backend", o.backend, "local (ranks are threads) or mpi (under mpirun)")
        ->check(CLI::IsMember({"local", "mpi"}));
    app.add_option("--block", o.block, "mlp or attention")
        ->check(CLI::IsMember({"mlp", "attention"}));
    app.add_option("--heads", o.heads, "attention heads in all, split over the ranks")
        ->check(CLI::Range(1, 1 << 12));
    app.add_option("--ranks", o.ranks, "ranks (threads); with mpi: the processes of mpirun")
        ->check(CLI::Range(1, 64));
    app.add_option("--tokens", o.tokens, "rows of x")->check(CLI::Range(1, 1 << 16));
    app.add_option("--d-model", o.d_model, "width of x and y")->check(CLI::Range(1, 1 << 16));
    app.add_option("--d-ff", o.d_ff, "hidden width, split over the ranks")
        ->check(CLI::Range(1, 1 << 16));
    CLI11_PARSE(app, argc, argv);
    try {
        register_all_operators();
        return o.backend == "mpi" ? run_mpi(o) : run_threads(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tensor_parallel_mlp: %s\n", e.what());
        return 2;
    }
}
