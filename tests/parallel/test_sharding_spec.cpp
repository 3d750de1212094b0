// ShardingSpec: the indices() test vectors, 2-D meshes, Chunked over several mesh
// axes, the pmap and xmap constructors, and every kind of invalid spec.
#include "parallel/sharding_spec.h"

#include "base/error.h"
#include "parallel/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <gtest/gtest.h>

using namespace braid;
using namespace braid::parallel;

namespace {

//! indices() in device order, written as in the issue: "[0:2,:] [2:4,:]".
std::string indices_text(const ShardingSpec& spec, const TensorShape& shape) {
    std::vector<std::string> parts;
    for (const auto& index : spec.indices(shape)) parts.push_back(format_index(index));
    return fmt::format("{}", fmt::join(parts, " "));
}

template <typename Fn> std::string value_error(Fn&& fn) {
    try {
        fn();
    } catch (const ValueError& e) {
        return e.what();
    }
    return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

} // namespace

TEST(ShardingSpec, TwoChunkedDimsOverTwoMeshAxesGiveFourBlocks) {
    ShardingSpec spec({Chunked(2), Chunked(2)}, {ShardedAxis(0), ShardedAxis(1)});
    EXPECT_EQ(indices_text(spec, {4, 8}), "[0:2,0:4] [0:2,4:8] [2:4,0:4] [2:4,4:8]");
    // The same, structurally.
    auto idx = spec.indices({4, 8});
    ASSERT_EQ(idx.size(), 4u);
    EXPECT_EQ(idx[2], (ShardIndex{DimIndex::slice(2, 4), DimIndex::slice(0, 4)}));
    EXPECT_EQ(spec.mesh_shape(), (std::vector<uint32_t>{2, 2}));
    EXPECT_EQ(spec.shard_shape({4, 8}), TensorShape({2, 4}));
}

TEST(ShardingSpec, ChunkedFirstDimKeepsTheSecondWhole) {
    ShardingSpec spec({Chunked(2), NoSharding{}}, {ShardedAxis(0)});
    EXPECT_EQ(indices_text(spec, {4, 8}), "[0:2,:] [2:4,:]");
    EXPECT_EQ(spec.indices({4, 8})[1], (ShardIndex{DimIndex::slice(2, 4), DimIndex::full(8)}));
}

TEST(ShardingSpec, UnstackedDimGivesEachDeviceAnIntegerIndex) {
    ShardingSpec spec({Unstacked(4), NoSharding{}}, {ShardedAxis(0)});
    EXPECT_EQ(indices_text(spec, {4, 8}), "(0,:) (1,:) (2,:) (3,:)");
    EXPECT_EQ(spec.indices({4, 8})[3], (ShardIndex{DimIndex::index(3), DimIndex::full(8)}));
    EXPECT_EQ(spec.shard_shape({4, 8}), TensorShape({8}));
}

TEST(ShardingSpec, ReplicatedMeshAxisRepeatsTheSameIndex) {
    ShardingSpec spec({Unstacked(2), NoSharding{}}, {ShardedAxis(0), Replicated(3)});
    EXPECT_EQ(indices_text(spec, {2, 8}), "(0,:) (0,:) (0,:) (1,:) (1,:) (1,:)");
    EXPECT_EQ(spec.mesh_shape(), (std::vector<uint32_t>{2, 3}));
}

TEST(ShardingSpec, ScalarReplicatedThreeTimesHasThreeEmptyIndices) {
    ShardingSpec spec({}, {Replicated(3)});
    EXPECT_EQ(indices_text(spec, TensorShape{}), "() () ()");
    EXPECT_EQ(spec.nr_devices(), 3u);
}

TEST(ShardingSpec, TwoByTwoMeshWithSwappedAxesWalksTheSecondDimFirst) {
    ShardingSpec spec({Chunked(2), Chunked(2)}, {ShardedAxis(1), ShardedAxis(0)});
    EXPECT_EQ(indices_text(spec, {4, 6}), "[0:2,0:3] [2:4,0:3] [0:2,3:6] [2:4,3:6]");
}

TEST(ShardingSpec, TwoByTwoMeshWithAReplicatedAxisRepeatsAlongIt) {
    ShardingSpec inner({Chunked(2), NoSharding{}}, {Replicated(2), ShardedAxis(0)});
    EXPECT_EQ(indices_text(inner, {4, 3}), "[0:2,:] [2:4,:] [0:2,:] [2:4,:]");
    ShardingSpec outer({Chunked(2), NoSharding{}}, {ShardedAxis(0), Replicated(2)});
    EXPECT_EQ(indices_text(outer, {4, 3}), "[0:2,:] [0:2,:] [2:4,:] [2:4,:]");
}

TEST(ShardingSpec, OneByThreeAndThreeByOneMeshesSplitIntoThree) {
    ShardingSpec row({Chunked(3), NoSharding{}}, {Replicated(1), ShardedAxis(0)});
    EXPECT_EQ(row.mesh_shape(), (std::vector<uint32_t>{1, 3}));
    EXPECT_EQ(indices_text(row, {6, 4}), "[0:2,:] [2:4,:] [4:6,:]");
    ShardingSpec column({NoSharding{}, Chunked(3)}, {ShardedAxis(0), Replicated(1)});
    EXPECT_EQ(column.mesh_shape(), (std::vector<uint32_t>{3, 1}));
    EXPECT_EQ(indices_text(column, {4, 6}), "[:,0:2] [:,2:4] [:,4:6]");
    ShardingSpec row_of_one({Chunked(1), NoSharding{}}, {ShardedAxis(0), Replicated(3)});
    EXPECT_EQ(indices_text(row_of_one, {2, 2}), "[0:2,:] [0:2,:] [0:2,:]");
}

TEST(ShardingSpec, ChunkedOverSeveralMeshAxesHasTheFirstChunkAxisMajor) {
    ShardingSpec in_order({Chunked({2, 2}), NoSharding{}}, {ShardedAxis(0), ShardedAxis(1)});
    EXPECT_EQ(indices_text(in_order, {8, 3}), "[0:2,:] [2:4,:] [4:6,:] [6:8,:]");
    ShardingSpec swapped({Chunked({2, 2}), NoSharding{}}, {ShardedAxis(1), ShardedAxis(0)});
    EXPECT_EQ(indices_text(swapped, {8, 3}), "[0:2,:] [4:6,:] [2:4,:] [6:8,:]");
    // Chunks of 2 x 3 over a 3 x 2 x 2 mesh whose middle axis replicates.
    ShardingSpec mixed({Chunked({2, 3})}, {ShardedAxis(1), Replicated(2), ShardedAxis(0)});
    EXPECT_EQ(mixed.mesh_shape(), (std::vector<uint32_t>{3, 2, 2}));
    EXPECT_EQ(indices_text(mixed, {12}),
              "[0:2] [6:8] [0:2] [6:8] [2:4] [8:10] [2:4] [8:10] [4:6] [10:12] [4:6] [10:12]");
}

TEST(ShardingSpec, UnstackedAndChunkedDimsNumberTheirShardedAxesInDimOrder) {
    ShardingSpec spec({Unstacked(2), NoSharding{}, Chunked(3)}, {ShardedAxis(1), ShardedAxis(0)});
    EXPECT_EQ(indices_text(spec, {2, 4, 6}),
              "(0,:,0:2) (1,:,0:2) (0,:,2:4) (1,:,2:4) (0,:,4:6) (1,:,4:6)");
    EXPECT_EQ(spec.shard_shape({2, 4, 6}), TensorShape({4, 2}));
}

TEST(ShardingSpec, PmapConstructorUnstacksTheMappedAxis) {
    EXPECT_EQ(pmap_sharding_spec(4, 1, 0),
              ShardingSpec({Unstacked(4), NoSharding{}}, {ShardedAxis(0)}));
    EXPECT_EQ(pmap_sharding_spec(2, 1, 0, 3),
              ShardingSpec({Unstacked(2), NoSharding{}}, {ShardedAxis(0), Replicated(3)}));
    EXPECT_EQ(pmap_sharding_spec(3, 2, 1),
              ShardingSpec({NoSharding{}, Unstacked(3), NoSharding{}}, {ShardedAxis(0)}));
    EXPECT_EQ(pmap_sharding_spec(3, 1, std::nullopt),
              ShardingSpec({NoSharding{}}, {Replicated(3)}));
    EXPECT_EQ(indices_text(pmap_sharding_spec(2, 1, 0, 3), {2, 8}),
              "(0,:) (0,:) (0,:) (1,:) (1,:) (1,:)");
    auto msg = value_error([] { pmap_sharding_spec(2, 1, 2); });
    EXPECT_CONTAINS(msg, "map axis 2 for a value of 1 dims; expected 0..1");
}

TEST(ShardingSpec, XmapConstructorChunksNamedDimsOverTheirMeshAxes) {
    Mesh mesh({2, 2, 3}, {"x", "y", "z"});
    EXPECT_EQ(
        xmap_sharding_spec(mesh, 2, {{"x", 0}, {"y", 1}}),
        ShardingSpec({Chunked(2), Chunked(2)}, {ShardedAxis(0), ShardedAxis(1), Replicated(3)}));
    // Two mesh axes on one dim: chunked in the order given; sharded axes in dim order.
    EXPECT_EQ(xmap_sharding_spec(mesh, 2, {{"z", 1}, {"y", 0}, {"x", 0}}),
              ShardingSpec({Chunked({2, 2}), Chunked(3)},
                           {ShardedAxis(1), ShardedAxis(0), ShardedAxis(2)}));
    EXPECT_EQ(
        indices_text(xmap_sharding_spec(Mesh({2, 2}, {"x", "y"}), 2, {{"x", 0}, {"y", 1}}), {4, 8}),
        "[0:2,0:4] [0:2,4:8] [2:4,0:4] [2:4,4:8]");
    auto msg = value_error([&] { xmap_sharding_spec(mesh, 2, {{"x", 0}, {"x", 1}}); });
    EXPECT_CONTAINS(msg, "mesh axis \"x\" is mapped twice");
    msg = value_error([&] { xmap_sharding_spec(mesh, 2, {{"w", 0}}); });
    EXPECT_CONTAINS(msg, "no axis named \"w\"");
    msg = value_error([&] { xmap_sharding_spec(mesh, 2, {{"y", 2}}); });
    EXPECT_CONTAINS(msg, "mesh axis \"y\" maps to dim 2 of a 2-dim value; expected 0..1");
}

TEST(ShardingSpec, UnevenChunksAreAValueErrorNamingTheDimAndSizes) {
    ShardingSpec spec({NoSharding{}, Chunked({2, 2})}, {ShardedAxis(0), ShardedAxis(1)});
    auto msg = value_error([&] { spec.indices({4, 6}); });
    EXPECT_CONTAINS(msg, "dim 1 of shape {4,6} is 6");
    EXPECT_CONTAINS(msg, "cannot cut into 4 equal chunks; expected a multiple of 4");
}

TEST(ShardingSpec, ShardedAxisUsedTwiceIsAValueError) {
    ShardingSpec spec({Chunked(2), Chunked(2)}, {ShardedAxis(0), ShardedAxis(0)});
    auto msg = value_error([&] { spec.validate(); });
    EXPECT_CONTAINS(msg, "sharded axis 0 is used twice, by mesh axes 0 and 1");
    EXPECT_EQ(value_error([&] { spec.indices({4, 4}); }), msg);
}

TEST(ShardingSpec, ShardedAxisNeverUsedIsAValueError) {
    ShardingSpec spec({Chunked(2), Chunked(2)}, {ShardedAxis(1)});
    auto msg = value_error([&] { spec.indices({4, 4}); });
    EXPECT_CONTAINS(msg, "sharded axis 0 is never used by the mesh mapping");
    EXPECT_CONTAINS(msg, "each of the 2 sharded axes on exactly one mesh axis");
    ShardingSpec beyond({Chunked(2)}, {ShardedAxis(1)});
    msg = value_error([&] { beyond.mesh_shape(); });
    EXPECT_CONTAINS(msg, "mesh axis 0 is ShardedAxis(1), but the sharding has 1 sharded axes");
}

TEST(ShardingSpec, ChunkedAndUnstackedOnOneDimIsAValueError) {
    DimSharding both = Chunked(2);
    both.unstacked = Unstacked(4);
    ShardingSpec spec({both, NoSharding{}}, {ShardedAxis(0), ShardedAxis(1)});
    auto msg = value_error([&] { spec.indices({4, 4}); });
    EXPECT_CONTAINS(msg, "dim 0 is both Chunked([2]) and Unstacked(4)");
}

TEST(ShardingSpec, UnstackedOnADimOfAnotherSizeIsAValueError) {
    ShardingSpec spec({Unstacked(3), NoSharding{}}, {ShardedAxis(0)});
    auto msg = value_error([&] { spec.indices({4, 8}); });
    EXPECT_CONTAINS(msg, "dim 0 of shape {4,8} is 4; Unstacked(3) expects 3");
}

TEST(ShardingSpec, OtherInvalidSpecsAreValueErrors) {
    ShardingSpec spec({Chunked(2), NoSharding{}}, {ShardedAxis(0)});
    auto msg = value_error([&] { spec.indices({4}); });
    EXPECT_CONTAINS(msg, "the array shape {4} has 1 dims; the sharding has 2 entries");
    msg = value_error([] { ShardingSpec({Chunked({2, 0})}, {ShardedAxis(0)}).validate(); });
    EXPECT_CONTAINS(msg, "dim 0 has a chunk count of 0 at position 1");
    msg = value_error([] { ShardingSpec({}, {Replicated(0)}).validate(); });
    EXPECT_CONTAINS(msg, "mesh axis 0 is Replicated(0)");
    msg = value_error([] { ShardingSpec({Unstacked(0)}, {ShardedAxis(0)}).validate(); });
    EXPECT_CONTAINS(msg, "dim 0 is Unstacked(0)");
    msg = value_error(
        [&] { ShardingSpec({Chunked(2)}, {ShardedAxis(0)}).check_mesh(Mesh({3}, {"x"})); });
    EXPECT_CONTAINS(msg, "describes a mesh of shape [2]; Mesh{x=3} has shape [3]");
}

TEST(ShardingSpec, DescribesItself) {
    ShardingSpec spec({Unstacked(2), NoSharding{}, Chunked({2, 3})},
                      {ShardedAxis(2), Replicated(2), ShardedAxis(0), ShardedAxis(1)});
    EXPECT_EQ(spec.to_string(), "ShardingSpec([Unstacked(2), NoSharding, Chunked([2, 3])], "
                                "[ShardedAxis(2), Replicated(2), ShardedAxis(0), ShardedAxis(1)])");
    EXPECT_EQ(spec.mesh_shape(), (std::vector<uint32_t>{3, 2, 2, 2}));
}
