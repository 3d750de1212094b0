// Broken model files: each is a SerializationError that says what is wrong, never a crash.
#include "helpers.h"
#include "model_patch.h"
#include "tools/example_models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace braid;
using namespace braid::test;
using ::testing::HasSubstr;

namespace {

std::vector<uint8_t> tiny_model() {
    auto g = ComputingGraph::make();
    std::vector<uint8_t> bytes;
    DumpOptions opt;
    opt.input_shapes["x"] = {-1, 8};
    dump(examples::build_mlp(*g, 2, 8, 4, 3), bytes, opt);
    return bytes;
}

//! The message of the SerializationError that loading `bytes` throws ("" when it loads).
std::string load_error(const std::vector<uint8_t>& bytes, bool integrity = true) {
    LoadOptions opt;
    opt.verify_integrity = integrity;
    try {
        load(bytes, opt);
    } catch (const SerializationError& e) {
        return e.what();
    } catch (const MemoryBudgetError& e) { // a corrupted dim can make a var absurdly large
        return e.what();
    }
    return "";
}

} // namespace

TEST(SerializationCorruption, EmptyFileIsNotAModel) {
    EXPECT_THAT(load_error({}), HasSubstr("<buffer>: empty file (0 bytes): not a braid model"));
    TempDir dir;
    write_file(dir.file("empty.braid"), {});
    try {
        load(dir.file("empty.braid"));
        FAIL() << "an empty file loaded";
    } catch (const SerializationError& e) {
        EXPECT_THAT(e.what(), HasSubstr("empty.braid: empty file (0 bytes)"));
    }
}

TEST(SerializationCorruption, MissingFileSaysSo) {
    try {
        load("/nonexistent/dir/model.braid");
        FAIL();
    } catch (const SerializationError& e) {
        EXPECT_THAT(e.what(), HasSubstr("/nonexistent/dir/model.braid: cannot open"));
    }
}

TEST(SerializationCorruption, WrongIdentifierIsNotAModel) {
    auto bytes = tiny_model();
    std::memcpy(bytes.data() + 4, "ONNX", 4);
    EXPECT_THAT(load_error(bytes),
                HasSubstr("wrong file identifier \"ONNX\" (expected \"BRDM\"): not a braid model"));
    std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'};
    EXPECT_THAT(load_error(text), HasSubstr("wrong file identifier \"o wo\""));
}

TEST(SerializationCorruption, TruncatedFileSaysTruncatedAtEveryLength) {
    auto bytes = tiny_model();
    for (size_t len = 1; len < bytes.size(); ++len) {
        std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + long(len));
        std::string err = load_error(cut);
        ASSERT_FALSE(err.empty()) << "a model truncated to " << len << " bytes loaded";
        EXPECT_TRUE(err.find("truncated") != std::string::npos) << len << ": " << err;
    }
    std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 1);
    EXPECT_THAT(load_error(cut), HasSubstr(fmt::format("truncated: the file has {} bytes, its "
                                                       "header says {}",
                                                       bytes.size() - 1, bytes.size())));
}

TEST(SerializationCorruption, TrailingBytesAreRejected) {
    auto bytes = tiny_model();
    bytes.push_back(0);
    EXPECT_THAT(load_error(bytes), HasSubstr("1 unexpected bytes after the model's end"));
}

TEST(SerializationCorruption, EveryFlippedByteIsCaught) {
    auto bytes = tiny_model();
    size_t checksum_errors = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        auto bad = bytes;
        bad[i] ^= 0x20;
        std::string err = load_error(bad);
        ASSERT_FALSE(err.empty()) << "flipping byte " << i << " went unnoticed";
        checksum_errors += err.find("checksum mismatch") != std::string::npos;
    }
    EXPECT_GT(checksum_errors, bytes.size() / 2);
    // A flipped byte in a parameter tensor: the documented message.
    auto bad = bytes;
    bad[bad.size() - 3] ^= 1;
    EXPECT_THAT(load_error(bad), HasSubstr("checksum mismatch (stored "));
    EXPECT_THAT(load_error(bad), HasSubstr("): the file is corrupt or was modified"));
}

TEST(SerializationCorruption, FutureMajorVersionIsRefused) {
    auto bytes = tiny_model();
    auto* header = flatbuffers::GetMutableRoot<fbs::ModelHeader>(bytes.data());
    header->mutate_format_major(MODEL_FORMAT_MAJOR + 1);
    header->mutate_format_minor(3);
    EXPECT_THAT(load_error(bytes),
                HasSubstr(fmt::format("format version {}.3 is newer than this build reads ({}.x)",
                                      MODEL_FORMAT_MAJOR + 1, MODEL_FORMAT_MAJOR)));
    // A newer minor version of the same major loads.
    auto minor = tiny_model();
    flatbuffers::GetMutableRoot<fbs::ModelHeader>(minor.data())
        ->mutate_format_minor(MODEL_FORMAT_MINOR + 1);
    reseal(minor);
    EXPECT_EQ(load_error(minor), "");
}

TEST(SerializationCorruption, UnknownOperatorTypeIsNamed) {
    auto bytes = tiny_model();
    rename_operator_type(bytes, "MatMul", "MatMux");
    EXPECT_THAT(load_error(bytes), HasSubstr("unknown operator type \"MatMux\""));
    // braid-inspect still reads it.
    auto desc = describe_model(bytes);
    EXPECT_EQ(desc.operators.size(), 10u);
    EXPECT_EQ(desc.operators[5].type_name, "MatMux");
}

TEST(SerializationCorruption, SealedButInconsistentContentIsCaught) {
    auto base = tiny_model();
    {
        auto bytes = base;
        auto* o = mutable_model(bytes)->mutable_operators()->GetMutableObject(5);
        o->mutable_inputs()->Mutate(0, 999);
        reseal(bytes);
        EXPECT_THAT(load_error(bytes), HasSubstr("input var index 999 out of range"));
    }
    {
        auto bytes = base;
        mutable_model(bytes)->mutable_operators()->GetMutableObject(0)->mutate_type_id(1);
        reseal(bytes);
        EXPECT_THAT(load_error(bytes), HasSubstr("does not match the type name"));
    }
    {
        auto bytes = base;
        mutable_model(bytes)->mutable_operators()->GetMutableObject(2)->mutate_version(99);
        reseal(bytes);
        EXPECT_THAT(load_error(bytes), HasSubstr("params version 99 is not supported"));
    }
    {
        auto bytes = base; // an operator reading a var produced later
        auto* oprs = mutable_model(bytes)->mutable_operators();
        auto* o = oprs->GetMutableObject(5);
        o->mutable_inputs()->Mutate(0, uint32_t(mutable_model(bytes)->vars()->size() - 1));
        reseal(bytes);
        EXPECT_THAT(load_error(bytes), HasSubstr("is not produced by an earlier operator"));
    }
    {
        auto bytes = base;
        auto* t = mutable_model(bytes)->mutable_tensors()->GetMutableObject(0);
        t->mutate_size(t->size() + 4);
        reseal(bytes);
        EXPECT_THAT(load_error(bytes), HasSubstr("needs 128 bytes, the file records 132"));
    }
    {
        // Fields equal to their default are not stored: edit a var whose dtype is not float32.
        auto g = ComputingGraph::make();
        std::vector<uint8_t> bytes;
        dump(examples::build_every_operator(*g), bytes);
        auto* vars = mutable_model(bytes)->mutable_vars();
        bool edited = false;
        for (flatbuffers::uoffset_t i = 0; i < vars->size() && !edited; ++i)
            edited = vars->GetMutableObject(i)->mutate_dtype(fbs::DType(77));
        ASSERT_TRUE(edited);
        reseal(bytes);
        EXPECT_THAT(load_error(bytes), HasSubstr("invalid dtype code 77"));
    }
    {
        auto bytes = base;
        auto* t = mutable_model(bytes)->mutable_tensors()->GetMutableObject(1);
        ASSERT_TRUE(t->mutate_offset(uint64_t(1) << 40));
        reseal(bytes);
        EXPECT_THAT(load_error(bytes), HasSubstr("lie past the data section's end"));
    }
    {
        auto bytes = base;
        auto* p = mutable_model(bytes)
                      ->mutable_operators()
                      ->GetMutableObject(2)
                      ->mutable_params()
                      ->GetMutableObject(0);
        p->mutate_kind(fbs::ParamKind::INT);
        reseal(bytes);
        EXPECT_THAT(load_error(bytes), HasSubstr("is a int, expected a"));
    }
}

TEST(SerializationCorruption, WithoutIntegrityChecksTheStructureIsStillVerified) {
    auto bytes = tiny_model();
    for (size_t i = 8; i < bytes.size(); i += 3) {
        auto bad = bytes;
        bad[i] ^= 0xff;
        load_error(bad, false); // must not crash; it may load (e.g. a changed weight)
    }
}
