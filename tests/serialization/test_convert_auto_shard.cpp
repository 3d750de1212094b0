// braid-convert --auto-shard: every rank's part of a plan in one model file, run by braid-run
// --devices N with the one-device results; a rank loads its own part only, and a sharded file
// loaded without its ranks is refused naming how to run it.
#include "helpers.h"
#include "serialization/npy.h"
#include "serialization/serializer.h"

#include "braid.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace braid;
using namespace braid::test;
using ::testing::HasSubstr;

namespace {

const std::string CONVERT = BRAID_CONVERT_PATH;
const std::string RUN = BRAID_RUN_PATH;
const std::string BLOCK = std::string(BRAID_EXAMPLE_MODELS_DIR) + "/transformer_block.braid";

//! braid-run's output y on a fixed input, written into `out_dir`.
Tensor run_block(const std::string& model, const std::string& input,
                 const std::vector<std::string>& flags, const std::string& out_dir) {
    std::vector<std::string> args = {model, "--input",      "x=" + input, "--iter",
                                     "1",   "--output-dir", out_dir};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = run_tool(RUN, args);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    return read_npy(out_dir + "/y.npy");
}

void expect_close(const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.shape(), want.shape());
    size_t n = got.shape().total_nr_elems();
    for (size_t i = 0; i < n; ++i)
        ASSERT_NEAR(got.ptr<float>()[i], want.ptr<float>()[i],
                    1e-5f + 1e-5f * std::abs(want.ptr<float>()[i]))
            << "element " << i;
}

} // namespace

TEST(BraidConvertAutoShard, ShardedTransformerBlockRunsOnItsRanksWithOneDevicesResult) {
    TempDir dir;
    std::string input = dir.file("x.npy");
    write_npy(input, random_input({128, 256}, 3));
    Tensor want = run_block(BLOCK, input, {}, dir.file("one"));
    for (auto [mesh, ranks] :
         {std::pair{"tp=2", "2"}, std::pair{"dp=2,tp=2", "4"}, std::pair{"3", "3"}}) {
        SCOPED_TRACE(mesh);
        std::string sharded = dir.file(std::string("sharded_") + ranks + ".braid");
        auto c = run_tool(CONVERT, {BLOCK, "--auto-shard", mesh, "--analytic", "-o", sharded});
        ASSERT_EQ(c.status, 0) << c.err;
        EXPECT_THAT(c.out, HasSubstr(std::string("(") + ranks + " ranks)"));
        Tensor got =
            run_block(sharded, input, {"--devices", ranks}, dir.file(std::string("out") + ranks));
        expect_close(got, want);
    }
}

TEST(BraidConvertAutoShard, ARankLoadsItsOwnPartUnderThePlainNames) {
    TempDir dir;
    std::string sharded = dir.file("s.braid");
    ASSERT_EQ(
        run_tool(CONVERT, {BLOCK, "--auto-shard", "tp=2", "--analytic", "-o", sharded}).status, 0);
    auto whole = describe_model(sharded);
    ASSERT_EQ(whole.inputs.size(), 2u); // x@0, x@1
    LoadOptions opt;
    opt.collective.rank = 1;
    opt.collective.world_size = 2;
    auto part = load(sharded, opt);
    ASSERT_EQ(part.inputs.size(), 1u);
    EXPECT_EQ(part.inputs[0].name, "x");
    ASSERT_EQ(part.outputs.size(), 1u);
    EXPECT_EQ(part.outputs[0].name, "y");
    // Rank 1's operators only: about half of the file's.
    EXPECT_LT(part.graph->operators().size(), whole.operators.size() * 3 / 5);
    for (auto& o : part.graph->operators())
        if (auto* in = dynamic_cast<InputNode*>(o.get())) {
            EXPECT_EQ(in->input_name(), "x@1");
        }
}

TEST(BraidConvertAutoShard, AShardedFileLoadedWithoutItsRanksIsRefusedNamingHowToRunIt) {
    TempDir dir;
    std::string sharded = dir.file("s.braid");
    ASSERT_EQ(
        run_tool(CONVERT, {BLOCK, "--auto-shard", "tp=2", "--analytic", "-o", sharded}).status, 0);
    EXPECT_THROW(
        {
            try {
                load(sharded);
            } catch (const SerializationError& e) {
                EXPECT_THAT(e.what(), HasSubstr("a model sharded over 2 ranks (Mesh{tp=2}); load "
                                                "it as one of its ranks: braid-run --devices 2"));
                throw;
            }
        },
        SerializationError);
    auto one = run_tool(RUN, {sharded});
    EXPECT_EQ(one.status, 3);
    EXPECT_THAT(one.err, HasSubstr("run it on 2 ranks"));
    auto three = run_tool(RUN, {sharded, "--devices", "3"});
    EXPECT_EQ(three.status, 3);
    EXPECT_THAT(three.err, HasSubstr("loaded as rank 0 of 3"));
    auto bad = run_tool(CONVERT, {BLOCK, "--auto-shard", "0x2", "-o", dir.file("b.braid")});
    EXPECT_EQ(bad.status, 3);
    EXPECT_THAT(bad.err, HasSubstr("mesh \"0x2\""));
}
