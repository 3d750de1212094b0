// Sharded host tensors: split by a spec gives every device the slice its index selects,
// assemble gives the tensor back, and mismatched pieces are refused.
#include "parallel/sharded_tensor.h"

#include "base/error.h"
#include "checker.h"
#include "parallel/mesh.h"

#include <gtest/gtest.h>

using namespace braid;
using namespace braid::parallel;
using braid::test::random_tensor;

namespace {

//! A float32 tensor whose element i is i.
Tensor iota(const TensorShape& shape) {
    Tensor t(shape, dtype::Float32());
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t.ptr<float>()[i] = float(i);
    return t;
}

//! Element-by-element copy of global[index], by plain loops over the row-major positions.
std::vector<float> reference_piece(const Tensor& global, const ShardIndex& index) {
    std::vector<float> out;
    const TensorShape& shape = global.shape();
    size_t total = shape.total_nr_elems();
    for (size_t flat = 0; flat < total; ++flat) {
        size_t rest = flat;
        bool inside = true;
        for (size_t d = shape.ndim(); d-- > 0;) {
            size_t pos = rest % shape[d];
            rest /= shape[d];
            inside &= pos >= index[d].begin && pos < index[d].end;
        }
        if (inside) out.push_back(global.ptr<float>()[flat]);
    }
    return out;
}

std::vector<float> values(const Tensor& t) {
    std::vector<float> out;
    for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) out.push_back(float(t.at(i)));
    return out;
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

struct SplitCase {
    TensorShape shape;
    ShardingSpec spec;
};

std::vector<SplitCase> split_cases() {
    return {
        {{4, 8}, ShardingSpec({Chunked(2), Chunked(2)}, {ShardedAxis(0), ShardedAxis(1)})},
        {{4, 8}, ShardingSpec({Chunked(2), NoSharding{}}, {ShardedAxis(0)})},
        {{4, 8}, ShardingSpec({Unstacked(4), NoSharding{}}, {ShardedAxis(0)})},
        {{2, 8}, ShardingSpec({Unstacked(2), NoSharding{}}, {ShardedAxis(0), Replicated(3)})},
        {{}, ShardingSpec({}, {Replicated(3)})},
        {{4, 6}, ShardingSpec({Chunked(2), Chunked(2)}, {ShardedAxis(1), ShardedAxis(0)})},
        {{6, 4}, ShardingSpec({Chunked(3), NoSharding{}}, {Replicated(1), ShardedAxis(0)})},
        {{4, 6}, ShardingSpec({NoSharding{}, Chunked(3)}, {ShardedAxis(0), Replicated(1)})},
        {{8, 3}, ShardingSpec({Chunked({2, 2}), NoSharding{}}, {ShardedAxis(1), ShardedAxis(0)})},
        {{12}, ShardingSpec({Chunked({2, 3})}, {ShardedAxis(1), Replicated(2), ShardedAxis(0)})},
        {{2, 4, 6},
         ShardingSpec({Unstacked(2), NoSharding{}, Chunked(3)}, {ShardedAxis(1), ShardedAxis(0)})},
        {{3, 2, 5}, ShardingSpec({NoSharding{}, Unstacked(2), NoSharding{}}, {ShardedAxis(0)})},
    };
}

} // namespace

TEST(ShardedTensor, SplitGivesEveryDeviceTheSliceItsIndexSelects) {
    for (const auto& c : split_cases()) {
        SCOPED_TRACE(c.spec.to_string() + " of " + c.shape.to_string());
        Tensor global = iota(c.shape);
        auto sharded = ShardedTensor::split(global, c.spec);
        auto indices = c.spec.indices(c.shape);
        ASSERT_EQ(sharded.shards.size(), indices.size());
        for (size_t d = 0; d < indices.size(); ++d) {
            EXPECT_EQ(sharded.shards[d].shape(), c.spec.shard_shape(c.shape)) << "device " << d;
            EXPECT_TRUE(sharded.shards[d].layout().is_contiguous()) << "device " << d;
            EXPECT_EQ(values(sharded.shards[d]), reference_piece(global, indices[d]))
                << "device " << d;
        }
    }
}

TEST(ShardedTensor, AssembleAfterSplitGivesTheTensorBack) {
    std::mt19937 rng(7);
    for (const auto& c : split_cases()) {
        SCOPED_TRACE(c.spec.to_string() + " of " + c.shape.to_string());
        Tensor global = random_tensor(c.shape, dtype::Float32(), rng);
        Tensor back = ShardedTensor::split(global, c.spec).assemble();
        ASSERT_EQ(back.shape(), global.shape());
        EXPECT_EQ(values(back), values(global));
    }
}

TEST(ShardedTensor, ReplicatedPiecesAreAssembledFromFreshCopiesToo) {
    // Pieces that are separate tensors (as they come back from separate ranks) assemble the
    // same as the ones split shares between replicas.
    ShardingSpec spec({Chunked(2), NoSharding{}}, {ShardedAxis(0), Replicated(2)});
    Tensor global = iota({4, 3});
    auto sharded = ShardedTensor::split(global, spec);
    for (auto& piece : sharded.shards) piece = piece.copy();
    EXPECT_EQ(values(sharded.assemble()), values(global));
}

TEST(ShardedTensor, PiecesOfAMeshAreFoundByRank) {
    Mesh mesh({2, 2}, {"x", "y"}, {3, 2, 1, 0});
    ShardingSpec spec({Chunked(2), Chunked(2)}, {ShardedAxis(0), ShardedAxis(1)});
    auto sharded = ShardedTensor::split(iota({2, 2}), spec);
    EXPECT_EQ(values(sharded.shard_of(mesh, 3)), std::vector<float>{0});
    EXPECT_EQ(values(sharded.shard_of(mesh, 0)), std::vector<float>{3});
    auto msg = value_error([&] { sharded.shard_of(Mesh({4}, {"x"}), 0); });
    EXPECT_CONTAINS(msg, "describes a mesh of shape [2, 2]");
}

TEST(ShardedTensor, AssembleRefusesPiecesThatDoNotFit) {
    ShardingSpec spec({Chunked(2), NoSharding{}}, {ShardedAxis(0), Replicated(2)});
    auto sharded = ShardedTensor::split(iota({4, 3}), spec);

    auto missing = sharded;
    missing.shards.pop_back();
    EXPECT_CONTAINS(value_error([&] { missing.assemble(); }), "3 pieces for");

    auto reshaped = sharded;
    reshaped.shards[2] = iota({3, 2});
    auto msg = value_error([&] { reshaped.assemble(); });
    EXPECT_CONTAINS(msg, "the piece of device 2 has shape {3,2}");
    EXPECT_CONTAINS(msg, "expects {2,3}");

    auto retyped = sharded;
    retyped.shards[1] = Tensor(TensorShape{2, 3}, dtype::Int32());
    EXPECT_CONTAINS(value_error([&] { retyped.assemble(); }), "the piece of device 1 is int32");

    auto diverged = sharded;
    diverged.shards[1] = sharded.shards[1].copy();
    diverged.shards[1].ptr<float>()[4] = -1.f;
    msg = value_error([&] { diverged.assemble(); });
    EXPECT_CONTAINS(msg, "devices 0 and 1 both hold [0:2,:] but differ at element 4 (4 vs -1)");
    // Without the replica check the first device of each index wins.
    EXPECT_EQ(values(diverged.assemble(/*check_replicas=*/false)), values(iota({4, 3})));
}

TEST(ShardedTensor, SplitRefusesASpecThatDoesNotFitTheTensor) {
    ShardingSpec spec({Chunked(3), NoSharding{}}, {ShardedAxis(0)});
    auto msg = value_error([&] { ShardedTensor::split(iota({4, 2}), spec); });
    EXPECT_CONTAINS(msg, "dim 0 of shape {4,2} is 4");
    msg = value_error([&] { ShardedTensor::split(Tensor(), spec); });
    EXPECT_CONTAINS(msg, "empty tensor");
}
