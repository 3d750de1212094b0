#include "parallel/pmap.h"

#include "base/error.h"
#include "operators/io.h"
#include "parallel/sharded_tensor.h"

#include <fmt/format.h>

namespace braid::parallel {

SymbolVar SpmdContext::psum(SymbolVar x, const std::string& axis) {
    return redistribute(x, Partial{ReduceOp::SUM}, Replicate{}, m_groups, axis);
}

SymbolVar SpmdContext::pmax(SymbolVar x, const std::string& axis) {
    return redistribute(x, Partial{ReduceOp::MAX}, Replicate{}, m_groups, axis);
}

SymbolVar SpmdContext::pmin(SymbolVar x, const std::string& axis) {
    return redistribute(x, Partial{ReduceOp::MIN}, Replicate{}, m_groups, axis);
}

SymbolVar SpmdContext::all_gather(SymbolVar x, const std::string& axis, int dim) {
    return redistribute(x, Shard{dim}, Replicate{}, m_groups, axis);
}

SymbolVar SpmdContext::psum_scatter(SymbolVar x, const std::string& axis, int dim) {
    return redistribute(x, Partial{ReduceOp::SUM}, Shard{dim}, m_groups, axis);
}

SymbolVar SpmdContext::all_to_all(SymbolVar x, const std::string& axis, int split_dim,
                                  int concat_dim) {
    // The local x is this rank's slice along concat_dim of a value that ends up sliced along
    // split_dim instead: Shard(concat_dim) -> Shard(split_dim).
    return redistribute(x, Shard{concat_dim}, Shard{split_dim}, m_groups, axis);
}

TensorShape global_shape_of(const TensorShape& piece, const ShardingSpec& spec) {
    size_t kept = 0;
    for (auto& d : spec.sharding) kept += d.unstacked ? 0 : 1;
    if (kept != piece.ndim())
        BRAID_THROW(ValueError,
                    "global_shape_of: a piece of shape {} has {} dims, but {} keeps {} of its "
                    "{} dims",
                    piece.to_string(), piece.ndim(), spec.to_string(), kept, spec.sharding.size());
    std::vector<size_t> dims;
    size_t next = 0;
    for (auto& d : spec.sharding) {
        if (d.unstacked) {
            dims.push_back(d.unstacked->size);
            continue;
        }
        size_t n = piece[next++];
        if (d.chunked)
            for (uint32_t c : d.chunked->chunks) n *= c;
        dims.push_back(n);
    }
    return TensorShape(dims);
}

SpmdRank build_spmd_rank(const SpmdFunction& fn, const Mesh& mesh, const std::vector<PmapArg>& args,
                         uint32_t rank, const SpmdOptions& options) {
    if (!options.client)
        BRAID_THROW(ValueError, "build_spmd_rank: rank {}: no group client in the options", rank);
    if (!mesh.contains(rank))
        BRAID_THROW(ValueError, "build_spmd_rank: rank {} is not in {}", rank, mesh.to_string());
    SpmdRank r;
    r.rank = rank;
    GraphOptions opt;
    opt.default_comp_node =
        options.comp_node ? options.comp_node(rank) : fmt::format("cpu{}", rank);
    r.graph = ComputingGraph::make(opt);
    for (auto& arg : args) {
        arg.spec.check_mesh(mesh);
        arg.spec.validate(arg.global_shape);
        r.inputs.push_back(opr::Input::make(*r.graph, arg.name, arg.dtype,
                                            arg.spec.shard_shape(arg.global_shape)));
    }
    MeshGroups groups(mesh, rank, options.client, options.backend, options.key_prefix);
    SpmdContext ctx(*r.graph, groups);
    r.outputs = fn(ctx, r.inputs);
    return r;
}

Pmap::Pmap(SpmdFunction fn, Mesh mesh, std::vector<PmapArg> args,
           std::vector<ShardingSpec> out_specs, SpmdOptions options)
    : m_mesh(std::move(mesh)), m_args(std::move(args)), m_out_specs(std::move(out_specs)),
      m_options(std::move(options)) {
    if (!m_options.client) m_options.client = std::make_shared<comm::InProcessGroupClient>();
    for (auto& spec : m_out_specs) spec.check_mesh(m_mesh);
    // Building and compiling never runs a collective, so the ranks are built one after the
    // other on this thread.
    for (uint32_t rank : m_mesh.devices()) {
        m_ranks.push_back(build_spmd_rank(fn, m_mesh, m_args, rank, m_options));
        auto& r = m_ranks.back();
        if (r.outputs.size() != m_out_specs.size())
            BRAID_THROW(ValueError,
                        "Pmap: rank {}: the function returned {} results, but {} result specs "
                        "were given",
                        rank, r.outputs.size(), m_out_specs.size());
        for (size_t i = 0; i < r.outputs.size(); ++i) {
            if (!r.outputs[i].node()->shape_known())
                BRAID_THROW(ValueError, "Pmap: rank {}: result {} has no static shape", rank, i);
            global_shape_of(r.outputs[i].node()->shape(), m_out_specs[i]);
        }
        std::vector<OutputSpec> outs(r.outputs.begin(), r.outputs.end());
        m_execs.push_back(r.graph->compile(outs));
    }
}

Pmap::~Pmap() = default;

std::vector<Tensor> Pmap::operator()(const std::vector<Tensor>& global_args) {
    if (global_args.size() != m_args.size())
        BRAID_THROW(ValueError, "Pmap: {} arguments given, {} expected", global_args.size(),
                    m_args.size());
    std::vector<ShardedTensor> pieces;
    for (size_t i = 0; i < m_args.size(); ++i) {
        const auto& a = m_args[i];
        if (global_args[i].shape() != a.global_shape || global_args[i].dtype() != a.dtype)
            BRAID_THROW(ValueError, "Pmap: argument \"{}\" is {} {}, expected {} {}", a.name,
                        global_args[i].dtype().name(), global_args[i].shape().to_string(),
                        a.dtype.name(), a.global_shape.to_string());
        pieces.push_back(ShardedTensor::split(global_args[i], a.spec));
    }
    // Every rank's executable runs on its own comp node: execute() returns at once, so the
    // ranks run concurrently and meet in their collectives; then each is waited for.
    std::vector<std::exception_ptr> errors(m_execs.size());
    for (size_t p = 0; p < m_execs.size(); ++p) {
        try {
            for (size_t i = 0; i < m_args.size(); ++i)
                m_execs[p]->feed(m_args[i].name, pieces[i].shards[p]);
            m_execs[p]->execute();
        } catch (...) {
            errors[p] = std::current_exception();
        }
    }
    for (size_t p = 0; p < m_execs.size(); ++p) {
        if (errors[p]) continue;
        try {
            m_execs[p]->wait();
        } catch (...) {
            errors[p] = std::current_exception();
        }
    }
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    std::vector<Tensor> results;
    for (size_t i = 0; i < m_out_specs.size(); ++i) {
        ShardedTensor out;
        out.spec = m_out_specs[i];
        for (auto& exec : m_execs) out.shards.push_back(exec->output(i).copy());
        out.global_shape = global_shape_of(out.shards[0].shape(), out.spec);
        results.push_back(out.assemble());
    }
    return results;
}

DistributedPlan Pmap::plan() const {
    std::vector<const Executable*> execs;
    for (auto& e : m_execs) execs.push_back(e.get());
    auto plan = plan_ranks(execs);
    // plan_ranks numbers the executables 0..N-1 (device order); name them by their ranks.
    const auto& devices = m_mesh.devices();
    for (auto& r : plan.ranks) {
        r.rank = devices[r.rank];
        for (auto& c : r.collectives)
            for (auto& g : c.group_ranks) g = devices[g];
    }
    return plan;
}

} // namespace braid::parallel
