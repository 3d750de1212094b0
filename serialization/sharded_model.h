// Sharded model files: an automatic sharding plan (parallel/auto_shard.h) lowered for every rank
// of its mesh into one model file, which each rank loads as its own part.
//
// The file holds one graph with every rank's computation side by side: rank r's inputs and
// outputs are named "<name>@<r>", its operators run on comp node cpu<r>, and its collectives
// carry the keys, group sizes and ranks of its sub-groups of the mesh. The metadata says how
// many ranks it holds (SHARDED_RANKS_KEY) and on which mesh. Every rank is fed the whole inputs
// and slices its share itself; every output is replicated, so each rank's outputs are the
// model's whole outputs.
//
// Loading (serialization/serializer.h's load()) with a collective binding's rank r builds rank
// r's part only (the operators its outputs need), under the plain names; the binding's world
// size, when given, must be the number of ranks, and the collectives keep their recorded
// groups (the binding's backend, server and group client still apply). Loading it without a
// rank is an error naming the ways to run it: braid-run --devices N, mpirun -np N,
// braid-launch -n N.
#pragma once

#include "parallel/auto_shard.h"
#include "serialization/serializer.h"

#include <string>
#include <vector>

namespace braid {

//! Metadata key of a sharded model: the number of ranks it holds.
constexpr const char* SHARDED_RANKS_KEY = "braid.sharded_ranks";
//! Metadata key of a sharded model: its mesh ("Mesh{dp=2,tp=2}").
constexpr const char* SHARDED_MESH_KEY = "braid.sharded_mesh";

//! "<name>@<rank>".
std::string sharded_io_name(const std::string& name, uint32_t rank);

//! Writes `plan` lowered for every rank of its mesh into `buffer` (see the file comment).
void dump_sharded(const parallel::AutoSharder& planner, const parallel::ShardPlan& plan,
                  std::vector<uint8_t>& buffer, DumpOptions options = {});
//! The same into the file at `path` (replaced); throws SerializationError when it cannot be
//! written.
void dump_sharded(const parallel::AutoSharder& planner, const parallel::ShardPlan& plan,
                  const std::string& path, DumpOptions options = {});

} // namespace braid
