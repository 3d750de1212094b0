// SPMD replication (JAX's pmap over a Mesh): one C++ function builds the per-device
// computation, and pmap builds it once per rank, each rank in its own graph.
//
// The function receives a SpmdContext and its arguments as this rank's pieces: an argument
// of global shape S laid out by ShardingSpec P is an Input of shape P.shard_shape(S), named
// as the argument (fed with ShardedTensor::split(value, P).shard_of(mesh, rank)). Collectives
// name mesh axes instead of groups: ctx.psum(x, "tp") sums x over this rank's sub-group of the
// axis "tp" (the ranks that differ from it only along "tp"), through the MeshGroups of the
// rank, so a 2x4 mesh's psum over its first axis runs as 4 groups of 2. Every rank runs the
// same function, so every rank inserts its collectives over each axis in the same order and
// their keys match; a function that inserts collectives depending on the rank breaks that
// and its peers wait until their deadline.
//
// Two ways to run it:
//   - build_spmd_rank(): this process's rank only (under mpirun, backend "mpi", rank =
//     the MPI rank, the group client of an MpiRendezvous); the caller compiles and feeds it;
//   - Pmap: every rank of the mesh as a graph of this process, each on its own comp node (a
//     collective blocks its comp node's queue until its peers arrive), with an in-process
//     group manager and the local backend; operator() splits global values by the argument
//     specs, runs every rank and assembles the results by the result specs.
// Collective waits end at their deadline (BRAID_COMM_TIMEOUT, or the run's).
#pragma once

#include "graph/executable.h"
#include "parallel/mesh.h"
#include "parallel/rank_plan.h"
#include "parallel/redistribute.h"
#include "parallel/sharding_spec.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace braid::parallel {

//! One argument of a pmapped function: its name (the Input's), global shape, dtype and layout.
struct PmapArg {
    std::string name;
    TensorShape global_shape;
    DType dtype = dtype::Float32();
    ShardingSpec spec;
};

/*!
 * One rank's view while its per-device computation is built: its graph, its coordinates on
 * the mesh and collectives by mesh axis name. Not thread-safe; one per rank, alive while the
 * function builds (the graph keeps what it needs).
 */
class SpmdContext {
public:
    SpmdContext(ComputingGraph& graph, MeshGroups& groups) : m_graph(graph), m_groups(groups) {}

    ComputingGraph& graph() { return m_graph; }
    const Mesh& mesh() const { return m_groups.mesh(); }
    uint32_t rank() const { return m_groups.rank(); }
    //! This rank's coordinate along `axis` (JAX's axis_index).
    uint32_t axis_index(const std::string& axis) const { return m_groups.coord(axis); }
    uint32_t axis_size(const std::string& axis) const { return mesh().axis_size(axis); }
    MeshGroups& groups() { return m_groups; }

    //! The sum / max / min of x over this rank's sub-group of `axis`.
    SymbolVar psum(SymbolVar x, const std::string& axis);
    SymbolVar pmax(SymbolVar x, const std::string& axis);
    SymbolVar pmin(SymbolVar x, const std::string& axis);
    //! The pieces of the sub-group of `axis` concatenated along `dim` in axis order (JAX's
    //! all_gather with tiled=True).
    SymbolVar all_gather(SymbolVar x, const std::string& axis, int dim = 0);
    //! psum, then this rank's slice of `dim` (JAX's psum_scatter with tiled=True).
    SymbolVar psum_scatter(SymbolVar x, const std::string& axis, int dim = 0);
    //! x split along `split_dim` over the axis, its pieces exchanged and concatenated along
    //! `concat_dim` (JAX's all_to_all with tiled=True).
    SymbolVar all_to_all(SymbolVar x, const std::string& axis, int split_dim, int concat_dim);

private:
    ComputingGraph& m_graph;
    MeshGroups& m_groups;
};

//! Builds one rank's computation: its outputs from its argument pieces, in the order of the
//! PmapArgs.
using SpmdFunction = std::function<SymbolVarArray(SpmdContext& ctx, const SymbolVarArray& args)>;

//! Where and how the ranks communicate.
struct SpmdOptions {
    std::string backend = "local";
    //! Keys of the collectives are "<key_prefix>/<axis>[...]:<n>"; two pmaps that share a
    //! group manager need different prefixes.
    std::string key_prefix = "pmap";
    //! The group manager's client; null: Pmap makes an in-process one (build_spmd_rank needs
    //! one).
    std::shared_ptr<comm::GroupClient> client;
    //! The comp node of a rank's graph; null: "cpu<rank>".
    std::function<std::string(uint32_t rank)> comp_node;
};

//! One rank's graph as built: its inputs (named as the PmapArgs) and the function's outputs.
struct SpmdRank {
    uint32_t rank = 0;
    std::shared_ptr<ComputingGraph> graph;
    SymbolVarArray inputs;
    SymbolVarArray outputs;
};

/*!
 * Builds rank `rank`'s graph: an Input per argument of its piece's shape, then `fn`. Throws
 * ValueError when a spec does not fit its argument's shape or the mesh, or when `rank` is not
 * in the mesh or options.client is null.
 */
SpmdRank build_spmd_rank(const SpmdFunction& fn, const Mesh& mesh, const std::vector<PmapArg>& args,
                         uint32_t rank, const SpmdOptions& options);

//! The global shape of a value whose every piece has shape `piece` under `spec`: Chunked dims
//! multiplied by their chunk count, Unstacked dims inserted. Throws ValueError when the
//! piece's rank does not fit the spec.
TensorShape global_shape_of(const TensorShape& piece, const ShardingSpec& spec);

/*!
 * A function replicated over every rank of a mesh, as graphs of this process (see the file
 * comment). Building compiles every rank's graph; nothing runs until operator(). Not
 * thread-safe: call from one thread. Keeps its graphs and group client alive.
 */
class Pmap {
public:
    /*!
     * `out_specs` are the layouts of the function's results (one per result). Throws
     * ValueError for specs that do not fit the mesh or their values, or a function that
     * returns a number of results other than out_specs.size().
     */
    Pmap(SpmdFunction fn, Mesh mesh, std::vector<PmapArg> args, std::vector<ShardingSpec> out_specs,
         SpmdOptions options = {});
    ~Pmap();

    /*!
     * Runs every rank once on `global_args` (split by their specs) and returns the results,
     * assembled by their specs (replicas must agree). Throws ValueError for a wrong number,
     * shape or dtype of arguments, and the first rank's error (in rank order) when a rank
     * fails.
     */
    std::vector<Tensor> operator()(const std::vector<Tensor>& global_args);

    const Mesh& mesh() const { return m_mesh; }
    //! Rank r's graph, inputs and outputs.
    const SpmdRank& rank(uint32_t r) const { return m_ranks.at(r); }
    //! Rank r's compiled executable.
    const Executable& executable(uint32_t r) const { return *m_execs.at(r); }
    //! The static per-rank plan of every rank (see rank_plan.h), before or after running.
    DistributedPlan plan() const;

private:
    Mesh m_mesh;
    std::vector<PmapArg> m_args;
    std::vector<ShardingSpec> m_out_specs;
    SpmdOptions m_options;
    std::vector<SpmdRank> m_ranks; //!< in rank order (mesh.devices() sorted)
    std::vector<std::unique_ptr<Executable>> m_execs;
};

} // namespace braid::parallel
