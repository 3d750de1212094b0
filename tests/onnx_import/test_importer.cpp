// The ONNX importer's own behaviour, on models built here with ONNX's protobuf classes: shape
// inputs bound at import or read at run time, symbolic dims imported at the fed shapes (the
// embedding API's OnnxVariants), constant folding of shape chains, external data used in place,
// checks made before anything is allocated, and ONNX's wrapping 8-bit arithmetic. (Operator
// coverage is the conformance run's: tests/onnx/onnx_conformance.cpp.)
#include "braid.h"
#include "embed/embed_internal.h"
#include "onnx_import/onnx_import.h"
#include "tests/onnx_import/model_builder.h"
#include "tests/support/error_text.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

using namespace braid;
using braid::testing::error_of;
using braid::testing::int64s;
using braid::testing::iota;
using braid::testing::ModelBuilder;
using braid::testing::TempDir;
namespace fs = std::filesystem;

namespace {

//! A model reshaping x {2,3,4} by the graph input "shape".
ModelBuilder reshape_by_input() {
    ModelBuilder m;
    m.input("x", onnx::TensorProto::FLOAT, {2, 3, 4});
    m.input("shape", onnx::TensorProto::INT64, {3});
    m.node("Reshape", {"x", "shape"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 3);
    return m;
}

} // namespace

TEST(OnnxImport, AShapeInputIsNamedAndCanBeBoundAtImport) {
    auto bytes = reshape_by_input().bytes();
    try {
        onnx_import::import_bytes(bytes);
        FAIL() << "imported a Reshape whose target is a graph input";
    } catch (const onnx_import::ShapeInputError& e) {
        EXPECT_EQ(e.inputs(), std::vector<std::string>{"shape"});
        EXPECT_NE(std::string(e.what()).find("(Reshape, opset 13)"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("--bind"), std::string::npos) << e.what();
    }
    onnx_import::ImportOptions opt;
    opt.input_values["shape"] = int64s({4, 0, -1}); // 0 copies x's dim 1, -1 is inferred
    auto model = onnx_import::import_bytes(bytes, opt);
    ASSERT_EQ(model.inputs.size(), 1u); // the bound input is a constant now
    EXPECT_EQ(model.inputs[0].name, "x");
    auto exec = model.compile();
    Tensor x = iota({2, 3, 4});
    exec->feed("x", x);
    exec->run();
    const Tensor& y = exec->output(0);
    EXPECT_EQ(y.shape(), (TensorShape{4, 3, 2}));
    EXPECT_EQ(std::memcmp(y.contiguous().raw_ptr(), x.raw_ptr(), 24 * sizeof(float)), 0);
}

TEST(OnnxImport, BoundValuesAreCheckedAgainstTheInput) {
    auto bytes = reshape_by_input().bytes();
    onnx_import::ImportOptions opt;
    opt.input_values["shape"] = int64s({4, 6});
    EXPECT_NE(error_of([&] { onnx_import::import_bytes(bytes, opt); }).find("holds 3"),
              std::string::npos);
    opt.input_values.clear();
    opt.input_values["nosuch"] = int64s({1});
    EXPECT_NE(error_of([&] {
                  onnx_import::import_bytes(bytes, opt);
              }).find("\"nosuch\", which is not an input of the model"),
              std::string::npos);
}

TEST(OnnxImport, ShapeChainsOfStaticShapesAreFoldedAtImport) {
    // y = Reshape(x, Concat(Gather(Shape(x), 0), [-1])): x {2,3,4} -> {2,12}, no binding.
    ModelBuilder m;
    m.input("x", onnx::TensorProto::FLOAT, {2, 3, 4});
    auto* zero = m.initializer("zero", onnx::TensorProto::INT64, {1});
    zero->add_int64_data(0);
    auto* minus1 = m.initializer("minus1", onnx::TensorProto::INT64, {1});
    minus1->add_int64_data(-1);
    m.node("Shape", {"x"}, {"s"});
    m.node("Gather", {"s", "zero"}, {"n"});
    auto* cat = m.node("Concat", {"n", "minus1"}, {"target"});
    auto* axis = cat->add_attribute();
    axis->set_name("axis");
    axis->set_type(onnx::AttributeProto::INT);
    axis->set_i(0);
    m.node("Reshape", {"x", "target"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 2);
    auto model = onnx_import::import_bytes(m.bytes());
    ASSERT_TRUE(model.outputs[0].var.node()->shape_known());
    EXPECT_EQ(model.outputs[0].var.shape(), (TensorShape{2, 12}));
}

TEST(OnnxImport, AModelOfANewerIrVersionImportsAndRuns) {
    // Exporters write IR 10 (onnx 1.16 on); the checker linked here knows an older one. A graph
    // of known types and ops imports; a broken one is still refused, naming both versions.
    ModelBuilder m;
    m.model.set_ir_version(10);
    m.input("x", onnx::TensorProto::FLOAT, {2, 3});
    m.node("Relu", {"x"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 2);
    auto model = onnx_import::import_bytes(m.bytes());
    auto exec = model.compile();
    Tensor x = iota({2, 3});
    for (size_t i = 0; i < 6; ++i) x.ptr<float>()[i] -= 2.f;
    exec->feed("x", x);
    exec->run();
    const Tensor& y = exec->output(0);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(y.ptr<float>()[i], std::max(float(i) - 2.f, 0.f));

    m.node("Relu", {"missing"}, {"z"});
    m.output("z", onnx::TensorProto::FLOAT, 2);
    EXPECT_NE(error_of([&] {
                  onnx_import::import_bytes(m.bytes());
              }).find("not a valid ONNX model (IR version 10, checked as"),
              std::string::npos);
}

TEST(OnnxImport, IntegerProductsTooLongForFloat32AreExactInChunks) {
    // ConvInteger over 64 channels x 3x3 (576 terms) and MatMulInteger over K = 600: their int32
    // sums pass 2^24, where float32 would round; braid sums exact chunks in int32.
    // x and a near 255, w and b near 0 with a zero point of 250: every product has one sign.
    auto u8 = [](size_t i, size_t mul, size_t add) { return uint8_t((i * mul + add) % 56); };
    ModelBuilder m;
    m.input("x", onnx::TensorProto::UINT8, {1, 64, 4, 4});
    m.input("a", onnx::TensorProto::UINT8, {3, 600});
    std::string w_raw(2 * 64 * 9, '\0'), b_raw(600 * 4, '\0');
    for (size_t i = 0; i < w_raw.size(); ++i) w_raw[i] = char(u8(i, 53, 7));
    for (size_t i = 0; i < b_raw.size(); ++i) b_raw[i] = char(u8(i, 29, 101));
    m.initializer("w", onnx::TensorProto::UINT8, {2, 64, 3, 3})->set_raw_data(w_raw);
    m.initializer("b", onnx::TensorProto::UINT8, {600, 4})->set_raw_data(b_raw);
    m.initializer("xz", onnx::TensorProto::UINT8, {})->set_raw_data(std::string(1, char(3)));
    m.initializer("wz", onnx::TensorProto::UINT8, {})->set_raw_data(std::string(1, char(250)));
    auto* conv = m.node("ConvInteger", {"x", "w", "xz", "wz"}, {"y"});
    auto* pads = conv->add_attribute();
    pads->set_name("pads");
    pads->set_type(onnx::AttributeProto::INTS);
    for (int i = 0; i < 4; ++i) pads->add_ints(1);
    m.node("MatMulInteger", {"a", "b", "xz", "wz"}, {"p"});
    m.output("y", onnx::TensorProto::INT32, 4);
    m.output("p", onnx::TensorProto::INT32, 2);
    auto model = onnx_import::import_bytes(m.bytes());
    auto exec = model.compile();
    Tensor x(TensorShape{1, 64, 4, 4}, dtype::Uint8()), a(TensorShape{3, 600}, dtype::Uint8());
    for (size_t i = 0; i < 64 * 16; ++i) x.ptr<uint8_t>()[i] = uint8_t(200 + u8(i, 37, 11));
    for (size_t i = 0; i < 1800; ++i) a.ptr<uint8_t>()[i] = uint8_t(200 + u8(i, 91, 13));
    exec->feed("x", x);
    exec->feed("a", a);
    exec->run();
    const Tensor& y = exec->output(0);
    ASSERT_EQ(y.shape(), (TensorShape{1, 2, 4, 4}));
    int64_t largest = 0;
    for (int o = 0; o < 2; ++o)
        for (int r = 0; r < 4; ++r)
            for (int col = 0; col < 4; ++col) {
                int64_t want = 0;
                for (int ch = 0; ch < 64; ++ch)
                    for (int i = 0; i < 3; ++i)
                        for (int j = 0; j < 3; ++j) {
                            int yy = r + i - 1, xx = col + j - 1;
                            if (yy < 0 || yy >= 4 || xx < 0 || xx >= 4) continue;
                            int64_t xv = int64_t(x.ptr<uint8_t>()[(ch * 4 + yy) * 4 + xx]) - 3;
                            int64_t wv = int64_t(u8(((o * 64 + ch) * 3 + i) * 3 + j, 53, 7)) - 250;
                            want += xv * wv;
                        }
                largest = std::max(largest, std::abs(want));
                ASSERT_EQ(y.ptr<int32_t>()[(o * 4 + r) * 4 + col], want)
                    << o << " " << r << " " << col;
            }
    EXPECT_GT(largest, int64_t(1) << 24); // float32 could not have held these sums
    const Tensor& p = exec->output(1);
    ASSERT_EQ(p.shape(), (TensorShape{3, 4}));
    for (int r = 0; r < 3; ++r)
        for (int col = 0; col < 4; ++col) {
            int64_t want = 0;
            for (int k = 0; k < 600; ++k)
                want += (int64_t(a.ptr<uint8_t>()[r * 600 + k]) - 3) *
                        (int64_t(u8(size_t(k * 4 + col), 29, 101)) - 250);
            ASSERT_EQ(p.ptr<int32_t>()[r * 4 + col], want) << r << " " << col;
        }
}

TEST(OnnxImport, AlignedExternalDataIsUsedInPlaceAndTheRestCopied) {
    TempDir dir;
    const size_t n = 2048; // 8 KiB of float32
    std::vector<float> w(n);
    std::iota(w.begin(), w.end(), 1.f);
    for (size_t offset : {size_t(0), size_t(4)}) { // 4: not 64-byte aligned
        {
            std::ofstream f(dir.path / "weights.bin", std::ios::binary);
            std::vector<char> pad(offset, 0);
            f.write(pad.data(), std::streamsize(pad.size()));
            f.write(reinterpret_cast<const char*>(w.data()), std::streamsize(n * sizeof(float)));
        }
        ModelBuilder m;
        m.input("x", onnx::TensorProto::FLOAT, {int64_t(n)});
        auto* t = m.initializer("w", onnx::TensorProto::FLOAT, {int64_t(n)});
        t->set_data_location(onnx::TensorProto::EXTERNAL);
        auto* loc = t->add_external_data();
        loc->set_key("location");
        loc->set_value("weights.bin");
        auto* off = t->add_external_data();
        off->set_key("offset");
        off->set_value(std::to_string(offset));
        m.node("Add", {"x", "w"}, {"y"});
        m.output("y", onnx::TensorProto::FLOAT);
        m.save(dir.path / "model.onnx");
        auto model = onnx_import::import_file((dir.path / "model.onnx").string());
        EXPECT_EQ(model.info.mapped_bytes, offset == 0 ? n * sizeof(float) : 0u);
        auto exec = model.compile();
        Tensor x(TensorShape{n}, dtype::Float32());
        std::fill(x.ptr<float>(), x.ptr<float>() + n, 0.5f);
        exec->feed("x", x);
        exec->run();
        const float* y = exec->output(0).ptr<float>();
        EXPECT_EQ(y[0], 1.5f);
        EXPECT_EQ(y[n - 1], float(n) + 0.5f);
    }
    // A file too short for the tensor is an error naming it, before anything is read.
    std::filesystem::resize_file(dir.path / "weights.bin", 100);
    EXPECT_NE(error_of([&] {
                  onnx_import::import_file((dir.path / "model.onnx").string());
              }).find("too few"),
              std::string::npos);
}

TEST(OnnxImport, ATensorClaimingMoreDataThanItHoldsFailsBeforeAllocating) {
    ModelBuilder m;
    m.input("x", onnx::TensorProto::FLOAT, {1});
    auto* t = m.initializer("w", onnx::TensorProto::FLOAT, {1 << 20, 1 << 20}); // 4 TiB
    t->set_raw_data(std::string(4, '\0'));
    m.node("Add", {"x", "w"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 2);
    std::string msg = error_of([&] { onnx_import::import_bytes(m.bytes()); });
    EXPECT_NE(msg.find("raw_data has 4 bytes"), std::string::npos) << msg;
}

TEST(OnnxImport, EightBitArithmeticWrapsAsInOnnx) {
    ModelBuilder m;
    m.input("a", onnx::TensorProto::UINT8, {3});
    m.input("b", onnx::TensorProto::UINT8, {3});
    m.node("Add", {"a", "b"}, {"y"});
    m.output("y", onnx::TensorProto::UINT8);
    auto model = onnx_import::import_bytes(m.bytes());
    auto exec = model.compile();
    Tensor a(TensorShape{3}, dtype::Uint8()), b(TensorShape{3}, dtype::Uint8());
    uint8_t av[] = {200, 255, 1}, bv[] = {100, 1, 2};
    std::memcpy(a.raw_ptr(), av, 3), std::memcpy(b.raw_ptr(), bv, 3);
    exec->feed("a", a).feed("b", b);
    exec->run();
    const uint8_t* y = exec->output(0).ptr<uint8_t>();
    EXPECT_EQ(int(y[0]), 44); // 300 mod 256
    EXPECT_EQ(int(y[1]), 0);
    EXPECT_EQ(int(y[2]), 3);
}

TEST(OnnxImport, ExclusiveReverseCumSumOfFloatsLeavesEachElementOut) {
    // Running sums from the end that leave each element out, in float32. Taking the element
    // back out of an inclusive sum (y - x) rounds: at x[2] the inclusive sum 1 - 1e8 is
    // already -1e8, and -1e8 - (-1e8) gives 0 where the sum of the elements after it is 1.
    ModelBuilder m;
    m.input("x", onnx::TensorProto::FLOAT, {4});
    m.initializer("axis", onnx::TensorProto::INT64, {})->add_int64_data(0);
    auto* n = m.node("CumSum", {"x", "axis"}, {"y"});
    for (const char* name : {"exclusive", "reverse"}) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(1);
    }
    m.output("y", onnx::TensorProto::FLOAT);
    auto model = onnx_import::import_bytes(m.bytes());
    auto exec = model.compile();
    Tensor x(TensorShape{4}, dtype::Float32());
    const float xv[] = {1e8f, 1.f, -1e8f, 1.f};
    std::memcpy(x.raw_ptr(), xv, sizeof(xv));
    exec->feed("x", x);
    exec->run();
    Tensor out = exec->output(0).contiguous();
    const float* y = out.ptr<float>();
    // y[i] = x[3] + ... + x[i+1], summed in float32 (1 - 1e8 rounds to -1e8).
    EXPECT_EQ(y[0], -1e8f);
    EXPECT_EQ(y[1], -1e8f);
    EXPECT_EQ(y[2], 1.f); // (1 - 1e8) - (-1e8) would be 0
    EXPECT_EQ(y[3], 0.f);
}

TEST(OnnxImport, OneGraphHasTensorOutputsOnly) {
    // A sequence output is gathered by the embedding API (test_sequence_io.cpp); the import of
    // one graph, as braid-convert makes it, refuses it naming the output.
    ModelBuilder m;
    m.input("x", onnx::TensorProto::FLOAT, {2});
    m.node("SequenceConstruct", {"x", "x"}, {"seq"});
    m.sequence_output("seq", onnx::TensorProto::FLOAT);
    std::string msg = error_of([&] { onnx_import::import_bytes(m.bytes()); });
    EXPECT_NE(msg.find("output \"seq\": a sequence or an optional"), std::string::npos) << msg;
}

TEST(OnnxImport, OldGemmOnAnUnshapedIntermediateSkipsTheVersionConverter) {
    // Opset 6 Gemm whose A is an intermediate without a declared shape: ONNX's Gemm 6 -> 7
    // adapter would index A's (empty) shape as a matrix and read past its end (a crash found
    // by fuzzing the importer). The model keeps its own opset and imports.
    ModelBuilder m;
    m.model.mutable_opset_import(0)->set_version(6);
    m.input("x", onnx::TensorProto::FLOAT, {2, 3});
    auto* b = m.initializer("b", onnx::TensorProto::FLOAT, {3, 4});
    for (int i = 0; i < 12; ++i) b->add_float_data(float(i) * 0.5f);
    auto* c = m.initializer("c", onnx::TensorProto::FLOAT, {4});
    for (int i = 0; i < 4; ++i) c->add_float_data(float(i));
    m.node("Relu", {"x"}, {"a"});
    auto* gemm = m.node("Gemm", {"a", "b", "c"}, {"y"});
    auto* bc = gemm->add_attribute();
    bc->set_name("broadcast");
    bc->set_type(onnx::AttributeProto::INT);
    bc->set_i(1);
    m.output("y", onnx::TensorProto::FLOAT, 2);
    auto bytes = m.bytes();
    auto model = onnx_import::import_bytes(bytes);
    auto exec = model.compile();
    Tensor x = iota({2, 3});
    x.ptr<float>()[1] = -1.f; // relu zeroes it
    exec->feed("x", x);
    exec->run();
    const Tensor& y = exec->output(0);
    ASSERT_EQ(y.shape(), (TensorShape{2, 4}));
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) {
            float want = float(j);
            for (int k = 0; k < 3; ++k)
                want += std::max(x.ptr<float>()[i * 3 + k], 0.f) * float(k * 4 + j) * 0.5f;
            EXPECT_FLOAT_EQ(y.ptr<float>()[i * 4 + j], want) << i << "," << j;
        }
}

TEST(OnnxImport, FuzzedOldGemmWithoutShapesDoesNotReachTheVersionConverter) {
    // The input that crashed the ONNX fuzzer (tests/fuzz/fuzz_onnx.cpp): an opset-6 model whose
    // second Gemm reads an intermediate ("3") with no declared shape. ONNX's Gemm 6 -> 7 adapter
    // read past that empty shape and asked for a string of garbage size (AddressSanitizer's
    // allocation-size-too-big). It must import, or fail with a braid error, never crash.
    static const uint8_t bytes[] = {
        0x08, 0x03, 0x12, 0x07, 0x70, 0x79, 0x74, 0x6f, 0x72, 0x63, 0x68, 0x1a, 0x03, 0x30, 0x2e,
        0x33, 0x3a, 0xde, 0x01, 0x0a, 0x45, 0x0a, 0x01, 0x30, 0x0a, 0x01, 0x32, 0x0a, 0x01, 0x32,
        0x12, 0x01, 0x33, 0x22, 0x04, 0x47, 0x65, 0x6d, 0x6d, 0x2a, 0x0f, 0x0a, 0x05, 0x61, 0x6c,
        0x70, 0x68, 0x61, 0x15, 0x00, 0x00, 0x80, 0x3f, 0xa0, 0x01, 0x01, 0x2a, 0x0e, 0x0a, 0x04,
        0x62, 0x65, 0x74, 0x61, 0x15, 0x00, 0x00, 0x80, 0x3f, 0xa0, 0x01, 0x01, 0x2a, 0x10, 0x0a,
        0x09, 0x62, 0x72, 0x6f, 0x61, 0x64, 0x63, 0x61, 0x73, 0x74, 0x18, 0x01, 0xa0, 0x01, 0x02,
        0x0a, 0x33, 0x0a, 0x01, 0x30, 0x0a, 0x01, 0x31, 0x0a, 0x01, 0x33, 0x12, 0x01, 0x34, 0x22,
        0x04, 0x47, 0x65, 0x6d, 0x6d, 0x2a, 0x0f, 0x0a, 0x05, 0x61, 0x6c, 0x70, 0x68, 0x61, 0x15,
        0x00, 0x00, 0x80, 0x3f, 0xa0, 0x01, 0x01, 0x2a, 0x0e, 0x0a, 0x04, 0x62, 0x65, 0x74, 0x61,
        0x15, 0x00, 0x00, 0x80, 0x3f, 0xa0, 0x01, 0x01, 0x12, 0x10, 0x74, 0x6f, 0x72, 0x63, 0x68,
        0x2d, 0x6a, 0x69, 0x74, 0x2d, 0x65, 0x78, 0x70, 0x6f, 0x72, 0x74, 0x5a, 0x13, 0x0a, 0x01,
        0x30, 0x12, 0x0e, 0x0a, 0x0c, 0x08, 0x01, 0x12, 0x08, 0x0a, 0x02, 0x08, 0x02, 0x0a, 0x02,
        0x08, 0x03, 0x5a, 0x13, 0x0a, 0x01, 0x31, 0x12, 0x0e, 0x0a, 0x0c, 0x08, 0x01, 0x12, 0x08,
        0x0a, 0x02, 0x08, 0x03, 0x0a, 0x02, 0x08, 0x04, 0x5a, 0x0f, 0x0a, 0x01, 0x32, 0x12, 0x0a,
        0x0a, 0x08, 0x08, 0x01, 0x12, 0x04, 0x0a, 0x02, 0x08, 0x04, 0x62, 0x13, 0x0a, 0x01, 0x34,
        0x12, 0x0e, 0x0a, 0x0c, 0x08, 0x01, 0x12, 0x08, 0x0a, 0x02, 0x08, 0x02, 0x0a, 0x02, 0x08,
        0x04, 0x42, 0x02, 0x10, 0x06,
    };
    try {
        auto model = onnx_import::import_bytes({bytes, sizeof bytes});
        EXPECT_FALSE(model.outputs.empty());
    } catch (const braid::Error& e) {
        SUCCEED() << e.what();
    }
}

TEST(OnnxImport, TrainingBatchNormOfAVectorIsAnErrorNotAWritePastItsShape) {
    // Found by the ONNX fuzzer: BatchNormalization in training mode on a rank-1 input made the
    // importer set dim 1 of a rank-1 broadcast shape (a write past a vector's end). It must
    // fail with a braid error naming the node and the rank.
    ModelBuilder m;
    m.model.mutable_opset_import(0)->set_version(15); // training_mode came in opset 14
    m.input("x", onnx::TensorProto::FLOAT, {3});
    for (const char* name : {"scale", "bias", "mean", "var"}) {
        auto* t = m.initializer(name, onnx::TensorProto::FLOAT, {3});
        for (int i = 0; i < 3; ++i) t->add_float_data(1.f);
    }
    auto* bn = m.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"});
    auto* mode = bn->add_attribute();
    mode->set_name("training_mode");
    mode->set_type(onnx::AttributeProto::INT);
    mode->set_i(1);
    m.output("y", onnx::TensorProto::FLOAT, 1);
    auto bytes = m.bytes();
    try {
        onnx_import::import_bytes(bytes);
        FAIL() << "a training BatchNormalization of a rank-1 input imported";
    } catch (const braid::Error& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("BatchNormalization"), std::string::npos) << msg;
        EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
    }
}

TEST(OnnxImport, MaxUnpoolWithTooFewStridesOrPadsIsAnError) {
    // Found by the ONNX fuzzer: MaxUnpool read strides[i] and pads[i + n] past the end of
    // shorter lists (a heap read out of bounds). Such lists are an error naming the node.
    for (bool short_pads : {false, true}) {
        ModelBuilder m;
        m.model.mutable_opset_import(0)->set_version(11);
        m.input("x", onnx::TensorProto::FLOAT, {1, 1, 2, 2});
        m.input("i", onnx::TensorProto::INT64, {1, 1, 2, 2});
        auto* n = m.node("MaxUnpool", {"x", "i"}, {"y"});
        auto ints = [&](const char* name, std::vector<int64_t> values) {
            auto* a = n->add_attribute();
            a->set_name(name);
            a->set_type(onnx::AttributeProto::INTS);
            for (auto v : values) a->add_ints(v);
        };
        ints("kernel_shape", {2, 2});
        ints(short_pads ? "pads" : "strides", {2});
        m.output("y", onnx::TensorProto::FLOAT, 4);
        auto bytes = m.bytes();
        try {
            onnx_import::import_bytes(bytes);
            FAIL() << "MaxUnpool with one " << (short_pads ? "pad" : "stride") << " imported";
        } catch (const braid::Error& e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find("MaxUnpool"), std::string::npos) << msg;
            EXPECT_NE(msg.find("kernel_shape and strides need 2 values, pads 4"), std::string::npos)
                << msg;
        }
    }
}

TEST(OnnxImport, OldOpsetModelConvertedInAChildKeepsItsInitializers) {
    // Opset 6 with every shape declared: ONNX's version converter runs (in a child process,
    // base/isolated_call.h) and the initializers it left unchanged come back from the parent.
    ModelBuilder m;
    m.model.mutable_opset_import(0)->set_version(6);
    m.input("x", onnx::TensorProto::FLOAT, {2, 3});
    auto* b = m.initializer("b", onnx::TensorProto::FLOAT, {3, 4});
    for (int i = 0; i < 12; ++i) b->add_float_data(float(i) * 0.25f);
    auto* c = m.initializer("c", onnx::TensorProto::FLOAT, {4});
    for (int i = 0; i < 4; ++i) c->add_float_data(float(i) - 1.f);
    auto* gemm = m.node("Gemm", {"x", "b", "c"}, {"y"});
    auto* bc = gemm->add_attribute();
    bc->set_name("broadcast");
    bc->set_type(onnx::AttributeProto::INT);
    bc->set_i(1);
    m.output("y", onnx::TensorProto::FLOAT, 2);
    auto model = onnx_import::import_bytes(m.bytes());
    auto exec = model.compile();
    Tensor x = iota({2, 3});
    exec->feed("x", x);
    exec->run();
    const Tensor& y = exec->output(0);
    ASSERT_EQ(y.shape(), (TensorShape{2, 4}));
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) {
            float want = float(j) - 1.f;
            for (int k = 0; k < 3; ++k)
                want += x.ptr<float>()[i * 3 + k] * float(k * 4 + j) * 0.25f;
            EXPECT_FLOAT_EQ(y.ptr<float>()[i * 4 + j], want) << i << "," << j;
        }
}

TEST(OnnxImport, AnOperatorSetOfAnotherDomainThatNoNodeUsesIsAccepted) {
    // Exporters declare ai.onnx.ml by default; a model that uses none of its ops imports.
    ModelBuilder m;
    auto* ml = m.model.add_opset_import();
    ml->set_domain("ai.onnx.ml");
    ml->set_version(3);
    m.input("x", onnx::TensorProto::FLOAT, {2, 3});
    m.node("Relu", {"x"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 2);
    auto model = onnx_import::import_bytes(m.bytes());
    auto exec = model.compile();
    Tensor x = iota({2, 3});
    x.ptr<float>()[0] = -2.f;
    exec->feed("x", x);
    exec->run();
    EXPECT_EQ(exec->output(0).ptr<float>()[0], 0.f);
    EXPECT_EQ(exec->output(0).ptr<float>()[1], x.ptr<float>()[1]);
}

TEST(OnnxImport, ANodeOfAnUnsupportedDomainIsRefusedNamingNodeOpDomainAndVersion) {
    ModelBuilder m;
    auto* ms = m.model.add_opset_import();
    ms->set_domain("com.microsoft");
    ms->set_version(1);
    m.input("x", onnx::TensorProto::FLOAT, {2, 3});
    auto* n = m.node("FusedGelu", {"x"}, {"y"});
    n->set_domain("com.microsoft");
    m.output("y", onnx::TensorProto::FLOAT, 2);
    std::string msg = error_of([&] { onnx_import::import_bytes(m.bytes()); });
    EXPECT_NE(msg.find("FusedGelu_1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("FusedGelu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("operator set domain \"com.microsoft\" (version 1) is not supported"),
              std::string::npos)
        << msg;
}

TEST(OnnxImport, BraidRunImportsAModelWithSymbolicDimsAtTheShapeItIsFed) {
    // An image model {1,3,h,w} whose first op is a 3x3 window: imported with its symbolic
    // dims at the placeholder size 1, the window does not fit; braid-run imports it at the
    // shape given by --input, and it runs.
    ModelBuilder m;
    auto* x = m.g->add_input();
    x->set_name("x");
    auto* tt = x->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(1);
    tt->mutable_shape()->add_dim()->set_dim_value(3);
    tt->mutable_shape()->add_dim()->set_dim_param("h");
    tt->mutable_shape()->add_dim()->set_dim_param("w");
    auto* pool = m.node("AveragePool", {"x"}, {"y"});
    auto* k = pool->add_attribute();
    k->set_name("kernel_shape");
    k->set_type(onnx::AttributeProto::INTS);
    k->add_ints(3);
    k->add_ints(3);
    m.output("y", onnx::TensorProto::FLOAT, 4);
    fs::path dir = fs::temp_directory_path() / ("braid_symbolic_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    m.save(dir / "pool.onnx");
    auto run = [&](const std::string& args) {
        return braid::testing::run_braid_run(dir / "pool.onnx", args);
    };
    auto [fed_status, fed] = run("--input x=random:1x3x8x10");
    EXPECT_EQ(fed_status, 0) << fed;
    EXPECT_NE(fed.find("output y: float32 {1,3,6,8}"), std::string::npos) << fed;
    // Without a fed shape the random input takes the placeholder size 1 of each symbolic dim,
    // which the window does not fit: an error of the file, naming the node.
    auto [default_status, plain] = run("");
    EXPECT_EQ(default_status, 3) << plain;
    EXPECT_NE(plain.find("AveragePool"), std::string::npos) << plain;
    fs::remove_all(dir);
}

TEST(OnnxImport, ARunTimeErrorNamesTheOnnxNodeItCameFrom) {
    // x {n,6} reshaped to {3,4}: imported at n = 2 it fits; fed n = 1 the Reshape cannot, and
    // the error raised while running names the ONNX node, its op type and opset, not only the
    // braid operator it became.
    ModelBuilder m;
    auto* x = m.g->add_input();
    x->set_name("x");
    auto* tt = x->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("n");
    tt->mutable_shape()->add_dim()->set_dim_value(6);
    auto* target = m.initializer("target", onnx::TensorProto::INT64, {2});
    target->add_int64_data(3);
    target->add_int64_data(4);
    m.node("Reshape", {"x", "target"}, {"y"})->set_name("flatten_head");
    m.output("y", onnx::TensorProto::FLOAT, 2);
    onnx_import::ImportOptions opt;
    opt.input_shapes["x"] = TensorShape{2, 6};
    auto model = onnx_import::import_bytes(m.bytes(), opt);
    auto exec = model.compile();
    exec->feed("x", iota({2, 6}));
    exec->run();
    EXPECT_EQ(exec->output(0).shape(), (TensorShape{3, 4}));
    std::string msg = error_of([&] {
        exec->feed("x", iota({1, 6}));
        exec->run();
    });
    EXPECT_NE(msg.find("from ONNX node \"flatten_head\" (Reshape, opset 13)"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("{1,6}"), std::string::npos) << msg;
}

namespace {

//! An If branch graph: no inputs, `nodes` built by `build`, one float output `out`.
template <typename F>
onnx::GraphProto branch(const std::string& name, const std::string& out, F&& build) {
    ModelBuilder b;
    b.g->set_name(name);
    build(b);
    b.output(out, onnx::TensorProto::FLOAT, 2);
    return *b.g;
}

void set_graph(onnx::NodeProto* n, const std::string& attr, const onnx::GraphProto& g) {
    auto* a = n->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = g;
}

//! y = If(ReduceSum(x) > 0): then x * two (an initializer of the outer graph), else `else_op`(x).
ModelBuilder if_on_data(const std::string& else_op = "Neg") {
    ModelBuilder m;
    m.input("x", onnx::TensorProto::FLOAT, {2, 3});
    auto* two = m.initializer("two", onnx::TensorProto::FLOAT, {});
    two->add_float_data(2.f);
    auto* zero = m.initializer("zero", onnx::TensorProto::FLOAT, {});
    zero->add_float_data(0.f);
    auto* sum = m.node("ReduceSum", {"x"}, {"s"});
    auto* keep = sum->add_attribute();
    keep->set_name("keepdims");
    keep->set_type(onnx::AttributeProto::INT);
    keep->set_i(0);
    m.node("Greater", {"s", "zero"}, {"positive"});
    auto* n = m.node("If", {"positive"}, {"y"});
    n->set_name("pick");
    set_graph(n, "then_branch", branch("then", "t", [](ModelBuilder& b) {
                  b.node("Mul", {"x", "two"}, {"t"});
              }));
    set_graph(n, "else_branch", branch("else", "e", [&](ModelBuilder& b) {
                  if (else_op == "Reshape") {
                      auto* shape = b.initializer("bad_shape", onnx::TensorProto::INT64, {2});
                      shape->add_int64_data(4);
                      shape->add_int64_data(4);
                      b.node("Reshape", {"x", "bad_shape"}, {"e"});
                  } else {
                      b.node(else_op, {"x"}, {"e"});
                  }
              }));
    m.output("y", onnx::TensorProto::FLOAT, 2);
    return m;
}

} // namespace

TEST(OnnxImport, AnIfOnDataRunsTheBranchItsConditionTakes) {
    auto model = onnx_import::import_bytes(if_on_data().bytes());
    auto exec = model.compile();
    for (float sign : {1.f, -1.f}) {
        Tensor x = iota({2, 3});
        for (size_t i = 0; i < 6; ++i) x.ptr<float>()[i] = sign * (float(i) + 1.f);
        exec->feed("x", x);
        exec->run();
        const Tensor& y = exec->output(0);
        ASSERT_EQ(y.shape(), (TensorShape{2, 3}));
        for (size_t i = 0; i < 6; ++i)
            EXPECT_EQ(y.ptr<float>()[i], sign > 0 ? 2.f * (float(i) + 1.f) : float(i) + 1.f);
    }
}

TEST(OnnxImport, AnIfWhoseConditionIsKnownAtImportKeepsOnlyTheTakenBranch) {
    // The condition is a Constant: the else branch, which uses an op braid lacks, is never
    // imported, and no If operator is left in the graph.
    ModelBuilder m = if_on_data("Multinomial");
    auto* cond = m.g->mutable_node(1);
    cond->Clear();
    cond->set_op_type("Constant");
    cond->add_output("positive");
    auto* v = cond->add_attribute();
    v->set_name("value");
    v->set_type(onnx::AttributeProto::TENSOR);
    v->mutable_t()->set_data_type(onnx::TensorProto::BOOL);
    v->mutable_t()->add_int32_data(1);
    auto model = onnx_import::import_bytes(m.bytes());
    for (auto& opr : model.graph->operators()) EXPECT_STRNE(opr->type_name(), "If");
    auto exec = model.compile();
    exec->feed("x", iota({2, 3}));
    exec->run();
    EXPECT_EQ(exec->output(0).ptr<float>()[5], 10.f);
}

TEST(OnnxImport, AnIfBranchThatCannotBeBuiltAtTheImportShapesFailsOnlyWhenTaken) {
    // The else branch reshapes x {2,3} to {4,4}: the model imports and runs while the then
    // branch is taken; taking the else branch is an error naming the If node, the branch and
    // the Reshape node.
    auto model = onnx_import::import_bytes(if_on_data("Reshape").bytes());
    auto exec = model.compile();
    exec->feed("x", iota({2, 3}, 1.f));
    exec->run();
    EXPECT_EQ(exec->output(0).ptr<float>()[0], 2.f);
    Tensor negative = iota({2, 3}, -10.f);
    std::string msg = error_of([&] {
        exec->feed("x", negative);
        exec->run();
    });
    EXPECT_NE(msg.find("node \"pick\" (If, opset 13), else_branch"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(Reshape, opset 13)"), std::string::npos) << msg;
}

TEST(OnnxImport, AnImportedIfRoundTripsThroughBraidsFormat) {
    auto model = onnx_import::import_bytes(if_on_data().bytes());
    std::vector<uint8_t> bytes;
    dump({model.outputs[0].var}, bytes);
    auto loaded = load(bytes);
    auto exec = loaded.compile();
    exec->feed("x", iota({2, 3}, -7.f));
    exec->run();
    EXPECT_EQ(exec->output(0).ptr<float>()[1], 6.f);
}

TEST(OnnxImport, AShapeArgumentInsideABranchNamesTheGraphInputToBind) {
    // The then branch reshapes x by the graph input "shape": import asks for "shape" to be
    // bound (not for the branch's own name of it), and runs once it is.
    ModelBuilder m;
    m.input("x", onnx::TensorProto::FLOAT, {2, 3});
    m.input("p", onnx::TensorProto::BOOL, {});
    m.input("shape", onnx::TensorProto::INT64, {2});
    m.node("Neg", {"shape"}, {"negated"});
    m.node("Neg", {"negated"}, {"target"});
    auto* n = m.node("If", {"p"}, {"y"});
    set_graph(n, "then_branch", branch("then", "t", [](ModelBuilder& b) {
                  b.node("Reshape", {"x", "target"}, {"t"});
              }));
    set_graph(n, "else_branch",
              branch("else", "e", [](ModelBuilder& b) { b.node("Neg", {"x"}, {"e"}); }));
    m.output("y", onnx::TensorProto::FLOAT, 2);
    try {
        onnx_import::import_bytes(m.bytes());
        FAIL() << "imported a Reshape whose target is a graph input";
    } catch (const onnx_import::ShapeInputError& e) {
        EXPECT_EQ(e.inputs(), std::vector<std::string>{"shape"}) << e.what();
        EXPECT_NE(std::string(e.what()).find("then_branch"), std::string::npos) << e.what();
    }
    onnx_import::ImportOptions opt;
    opt.input_values["shape"] = int64s({3, 2});
    auto model = onnx_import::import_bytes(m.bytes(), opt);
    auto exec = model.compile();
    Tensor p(TensorShape{}, dtype::Bool());
    *p.ptr<bool>() = true;
    exec->feed("x", iota({2, 3})).feed("p", p);
    exec->run();
    EXPECT_EQ(exec->output(0).shape(), (TensorShape{3, 2}));
}

TEST(OnnxImport, ALoopCarriesValuesScansAndStopsOnItsCondition) {
    // s = 0; for i < M while s < limit: s += x (x read from the outer graph); scan s.
    ModelBuilder m;
    m.input("x", onnx::TensorProto::FLOAT, {2});
    m.input("M", onnx::TensorProto::INT64, {});
    m.input("limit", onnx::TensorProto::FLOAT, {});
    auto* s0 = m.initializer("s0", onnx::TensorProto::FLOAT, {2});
    s0->add_float_data(0.f);
    s0->add_float_data(0.f);
    auto* n = m.node("Loop", {"M", "", "s0"}, {"s_final", "s_scan"});
    ModelBuilder b;
    b.g->set_name("body");
    b.input("i", onnx::TensorProto::INT64, {});
    b.input("c", onnx::TensorProto::BOOL, {});
    b.input("s", onnx::TensorProto::FLOAT, {2});
    b.node("Add", {"s", "x"}, {"s_next"});
    b.node("ReduceMax", {"s_next"}, {"top"})->add_attribute()->CopyFrom([] {
        onnx::AttributeProto keep;
        keep.set_name("keepdims");
        keep.set_type(onnx::AttributeProto::INT);
        keep.set_i(0);
        return keep;
    }());
    b.node("Less", {"top", "limit"}, {"go"});
    b.output("go", onnx::TensorProto::BOOL, 0);
    b.output("s_next", onnx::TensorProto::FLOAT, 1);
    b.output("s_next", onnx::TensorProto::FLOAT, 1);
    set_graph(n, "body", *b.g);
    m.output("s_final", onnx::TensorProto::FLOAT, 1);
    m.output("s_scan", onnx::TensorProto::FLOAT, 2);
    auto model = onnx_import::import_bytes(m.bytes());
    auto exec = model.compile();
    Tensor x(TensorShape{2}, dtype::Float32()), trips(TensorShape{}, dtype::Int64()),
        limit(TensorShape{}, dtype::Float32());
    x.ptr<float>()[0] = 1.f;
    x.ptr<float>()[1] = 3.f;
    for (auto [mv, lv, iterations] : {std::tuple{5, 100.f, 5}, std::tuple{5, 7.f, 3}}) {
        *trips.ptr<int64_t>() = mv;
        *limit.ptr<float>() = lv;
        exec->feed("x", x).feed("M", trips).feed("limit", limit);
        exec->run();
        EXPECT_EQ(exec->output(0).ptr<float>()[1], 3.f * float(iterations));
        ASSERT_EQ(exec->output(1).shape(), (TensorShape{size_t(iterations), 2}));
        EXPECT_EQ(exec->output(1).ptr<float>()[2 * iterations - 2], float(iterations));
    }
}

namespace {

//! A model averaging x {n,2,h,w} over 3x3 windows, then scaling by a weight: its import at the
//! placeholder size 1 of h and w fails (the window does not fit).
ModelBuilder pool_model() {
    ModelBuilder m;
    m.symbolic_input("x", onnx::TensorProto::FLOAT, {-1, 2, -1, -1});
    auto* pool = m.node("AveragePool", {"x"}, {"p"});
    pool->set_name("pool");
    auto* k = pool->add_attribute();
    k->set_name("kernel_shape");
    k->set_type(onnx::AttributeProto::INTS);
    k->add_ints(3);
    k->add_ints(3);
    auto* w = m.initializer("w", onnx::TensorProto::FLOAT, {2, 1, 1});
    w->add_float_data(2.f);
    w->add_float_data(-0.5f);
    m.node("Mul", {"p", "w"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 4);
    return m;
}

//! Runs `ctx` on x and returns output 0 as a braid tensor (a copy).
Tensor run_embedded(embed::Context& ctx, const Tensor& x, const std::string& name = "x") {
    auto dims = x.shape().dims();
    ctx.set_input(name, x.raw_ptr(), embed::to_embed(x.dtype()),
                  std::vector<int64_t>(dims.begin(), dims.end()));
    ctx.run();
    return ctx.impl().output_tensor(0).copy();
}

} // namespace

TEST(OnnxRunTimeShapes, ANewFedShapeGivesWhatAFreshImportAtThatShapeGives) {
    // Three image sizes and three batch sizes through one loaded model and one context: each
    // result equals (bitwise) a fresh import at that shape, and the import at load time, on
    // placeholder sizes the window does not fit, does not fail the load.
    TempDir dir;
    pool_model().save(dir.path / "pool.onnx");
    std::string path = (dir.path / "pool.onnx").string();
    auto model = embed::Model::load(path);
    ASSERT_EQ(model->inputs().size(), 1u);
    EXPECT_EQ(model->inputs()[0].shape, (std::vector<int64_t>{-1, 2, -1, -1}));
    auto ctx = model->create_context();
    for (TensorShape shape :
         {TensorShape{1, 2, 5, 5}, TensorShape{1, 2, 4, 7}, TensorShape{1, 2, 9, 3},
          TensorShape{3, 2, 5, 5}, TensorShape{7, 2, 4, 7}, TensorShape{1, 2, 5, 5}}) {
        Tensor x = iota(shape, -3.f);
        Tensor got = run_embedded(*ctx, x);
        onnx_import::ImportOptions opt;
        opt.input_shapes["x"] = shape;
        auto fresh = onnx_import::import_file(path, opt);
        auto exec = fresh.compile();
        exec->feed("x", x);
        exec->run();
        const Tensor& want = exec->output(0);
        ASSERT_EQ(got.shape(), want.shape()) << shape.to_string();
        EXPECT_EQ(got.shape(), (TensorShape{shape[0], 2, shape[2] - 2, shape[3] - 2}));
        EXPECT_EQ(std::memcmp(got.raw_ptr(), want.contiguous().raw_ptr(), got.nr_bytes()), 0)
            << shape.to_string();
    }
    // One import per distinct shape (the sixth shape is the first again); the weights are
    // shared between them.
    EXPECT_EQ(model->impl().variants->size(), 5u);
    EXPECT_EQ(model->weight_bytes(), 2 * sizeof(float));
    // A shape the model does not admit is refused naming the input; one its ops do not fit
    // names the ONNX node.
    std::string msg = error_of([&] { run_embedded(*ctx, iota({1, 3, 5, 5})); });
    EXPECT_NE(msg.find("input \"x\": shape {1,3,5,5} given; the model expects {-1,2,-1,-1}"),
              std::string::npos)
        << msg;
    msg = error_of([&] { run_embedded(*ctx, iota({1, 2, 2, 5})); });
    EXPECT_NE(msg.find("\"pool\" (AveragePool, opset 13)"), std::string::npos) << msg;
}

TEST(OnnxRunTimeShapes, ANewShapeIsImportedFromTheFirstImportsUpgradedModel) {
    // An opset-11 model with a symbolic batch dim: its first import checks it and upgrades it
    // with ONNX's version converter (in a child process); imports at other fed shapes start
    // from that upgraded model, neither converting again nor reading the file (removed here).
    TempDir dir;
    ModelBuilder m;
    m.set_opset(11);
    m.symbolic_input("x", onnx::TensorProto::FLOAT, {-1, 3});
    auto* w = m.initializer("w", onnx::TensorProto::FLOAT, {3});
    for (float v : {0.5f, -1.f, 2.f}) w->add_float_data(v);
    m.node("Mul", {"x", "w"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 2);
    std::string path = (dir.path / "old.onnx").string();
    m.save(path);
    auto check = [](const Tensor& x, const Tensor& y) {
        ASSERT_EQ(y.shape(), x.shape());
        const float* px = x.ptr<float>();
        const float* py = y.contiguous().ptr<float>();
        const float w[] = {0.5f, -1.f, 2.f};
        for (size_t i = 0; i < x.shape().total_nr_elems(); ++i)
            EXPECT_EQ(py[i], px[i] * w[i % 3]) << i;
    };
    onnx_import::ImportOptions opt;
    opt.initializers = std::make_shared<std::map<std::string, Tensor>>();
    opt.prepared = std::make_shared<onnx_import::PreparedModel>();
    opt.input_shapes["x"] = TensorShape{2, 3};
    onnx_import::import_file(path, opt);
    ASSERT_TRUE(opt.prepared->model);
    EXPECT_EQ(opt.prepared->opset, 13);
    EXPECT_EQ(opt.prepared->model->graph().initializer(0).raw_data().size(), 0u);

    auto model = embed::Model::load(path);
    auto ctx = model->create_context();
    Tensor x = iota({2, 3}, -2.f);
    check(x, run_embedded(*ctx, x));
    fs::remove(path);
    opt.input_shapes["x"] = TensorShape{4, 3};
    auto exec = onnx_import::import_file(path, opt).compile();
    x = iota({4, 3}, -5.f);
    exec->feed("x", x);
    exec->run();
    check(x, exec->output(0));
    x = iota({5, 3}, -7.f);
    check(x, run_embedded(*ctx, x));
}

TEST(OnnxRunTimeShapes, TheKeptModelHoldsNoConstantValuesAndAFailedImportKeepsItToo) {
    // The weights are a Constant node's value. The first import fails (x {2,4} does not
    // broadcast with w {3}), yet keeps the model for later imports: without the Constant's
    // tensor, whose value joins the shared initializers. An import at a shape that fits then
    // starts from it, the file removed.
    TempDir dir;
    ModelBuilder m;
    m.symbolic_input("x", onnx::TensorProto::FLOAT, {-1, -1});
    auto* c = m.node("Constant", {}, {"w"});
    auto* v = c->add_attribute();
    v->set_name("value");
    v->set_type(onnx::AttributeProto::TENSOR);
    v->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    v->mutable_t()->add_dims(3);
    for (float f : {0.5f, -1.f, 2.f}) v->mutable_t()->add_float_data(f);
    // A larger Constant in raw bytes, as exporters write weights: the kept model must free
    // its buffer, not only clear it (protobuf keeps a cleared field's buffers for reuse).
    auto* big = m.node("Constant", {}, {"big"})->add_attribute();
    big->set_name("value");
    big->set_type(onnx::AttributeProto::TENSOR);
    big->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    big->mutable_t()->add_dims(16384);
    big->mutable_t()->set_raw_data(std::string(16384 * sizeof(float), '\0'));
    m.node("Mul", {"x", "w"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 2);
    std::string path = (dir.path / "constant.onnx").string();
    m.save(path);
    onnx_import::ImportOptions opt;
    opt.initializers = std::make_shared<std::map<std::string, Tensor>>();
    opt.prepared = std::make_shared<onnx_import::PreparedModel>();
    opt.input_shapes["x"] = TensorShape{2, 4};
    EXPECT_THROW(onnx_import::import_file(path, opt), onnx_import::NodeError);
    ASSERT_TRUE(opt.prepared->model) << "a failed import keeps the model too";
    const auto& kept = opt.prepared->model->graph().node(0);
    EXPECT_EQ(kept.op_type(), "Constant");
    EXPECT_EQ(kept.attribute_size(), 0) << "the kept model holds no tensor data";
    EXPECT_LT(opt.prepared->model->SpaceUsedLong(), 16384u)
        << "the kept model's memory, cleared objects and buffers included";
    ASSERT_EQ(opt.initializers->count("w"), 1u);
    EXPECT_EQ(opt.initializers->at("w").shape(), TensorShape{3});

    fs::remove(path);
    opt.input_shapes["x"] = TensorShape{2, 3};
    auto exec = onnx_import::import_file(path, opt).compile();
    Tensor x = iota({2, 3}, -2.f);
    exec->feed("x", x);
    exec->run();
    const float w[] = {0.5f, -1.f, 2.f};
    for (size_t i = 0; i < 6; ++i)
        EXPECT_EQ(exec->output(0).ptr<float>()[i], x.ptr<float>()[i] * w[i % 3]) << i;
}

TEST(OnnxRunTimeShapes, AShapeInputIsReadWhenTheModelRuns) {
    // The Reshape target is an ordinary input: fed at run time, each distinct value gives its
    // graph, nothing is bound at load.
    TempDir dir;
    reshape_by_input().save(dir.path / "reshape.onnx");
    auto model = embed::Model::load((dir.path / "reshape.onnx").string());
    ASSERT_EQ(model->inputs().size(), 2u);
    EXPECT_EQ(model->inputs()[1].name, "shape");
    auto ctx = model->create_context();
    Tensor x = iota({2, 3, 4});
    auto dims = x.shape().dims();
    ctx->set_input("x", x.raw_ptr(), embed::DType::FLOAT32,
                   std::vector<int64_t>(dims.begin(), dims.end()));
    // The output's shape is known before running, from the fed value.
    Tensor target = int64s({4, 0, -1});
    ctx->set_input("shape", target.raw_ptr(), embed::DType::INT64, {3});
    EXPECT_EQ(ctx->output_shape("y"), (std::vector<int64_t>{4, 3, 2}));
    for (auto [value, want] : {std::pair{std::vector<int64_t>{4, 0, -1}, TensorShape{4, 3, 2}},
                               std::pair{std::vector<int64_t>{1, 24, 1}, TensorShape{1, 24, 1}},
                               std::pair{std::vector<int64_t>{4, 0, -1}, TensorShape{4, 3, 2}}}) {
        // The same buffer, new contents: the value is read at each run.
        std::copy(value.begin(), value.end(), target.ptr<int64_t>());
        ctx->run();
        auto y = ctx->output("y");
        auto want_dims = want.dims();
        ASSERT_EQ(y.shape, (std::vector<int64_t>(want_dims.begin(), want_dims.end())));
        EXPECT_EQ(std::memcmp(y.data, x.raw_ptr(), 24 * sizeof(float)), 0);
    }
    EXPECT_EQ(model->impl().variants->shape_inputs(), std::vector<std::string>{"shape"});
    EXPECT_EQ(model->impl().variants->size(), 2u);
    // A value the Reshape cannot take is an error naming the node and the values.
    std::copy_n(std::vector<int64_t>{5, 5, 1}.begin(), 3, target.ptr<int64_t>());
    std::string msg = error_of([&] { ctx->run(); });
    EXPECT_NE(msg.find("(Reshape, opset 13)"), std::string::npos) << msg;
}

TEST(OnnxImport, TfIdfVectorizerWeighsCountsByMode) {
    // Counts of unigrams 1, 3 and bigrams (1, 2), (2, 1) over two rows: {2, 1, 2, 1} and
    // {1, 0, 0, 0}; IDF keeps the weight where a count is above 0, TFIDF multiplies by it.
    ModelBuilder m;
    m.input("x", onnx::TensorProto::INT64, {2, 5});
    for (const char* mode : {"IDF", "TFIDF"}) {
        auto* n = m.node("TfIdfVectorizer", {"x"}, {std::string("y_") + mode});
        auto ints = [&](const char* name, std::vector<int64_t> v) {
            auto* a = n->add_attribute();
            a->set_name(name);
            a->set_type(onnx::AttributeProto::INTS);
            for (auto i : v) a->add_ints(i);
        };
        auto scalar = [&](const char* name, int64_t v) {
            auto* a = n->add_attribute();
            a->set_name(name);
            a->set_type(onnx::AttributeProto::INT);
            a->set_i(v);
        };
        scalar("min_gram_length", 1);
        scalar("max_gram_length", 2);
        scalar("max_skip_count", 0);
        ints("pool_int64s", {1, 3, 1, 2, 2, 1});
        ints("ngram_counts", {0, 2});
        ints("ngram_indexes", {0, 1, 2, 3});
        auto* md = n->add_attribute();
        md->set_name("mode");
        md->set_type(onnx::AttributeProto::STRING);
        md->set_s(mode);
        auto* w = n->add_attribute();
        w->set_name("weights");
        w->set_type(onnx::AttributeProto::FLOATS);
        for (float f : {0.5f, 2.f, 1.f, 3.f}) w->add_floats(f);
        m.output(std::string("y_") + mode, onnx::TensorProto::FLOAT, 2);
    }
    auto model = onnx_import::import_bytes(m.bytes());
    auto exec = model.compile();
    Tensor x(TensorShape{2, 5}, dtype::Int64());
    int64_t v[] = {1, 2, 1, 2, 3, 1, 9, 2, 0, 0};
    std::copy(v, v + 10, x.ptr<int64_t>());
    exec->feed("x", x).run();
    auto values = [&](size_t i) {
        Tensor t = exec->output(i).contiguous();
        return std::vector<float>(t.ptr<float>(), t.ptr<float>() + 8);
    };
    EXPECT_EQ(values(0), (std::vector<float>{0.5f, 2, 1, 3, 0.5f, 0, 0, 0}));
    EXPECT_EQ(values(1), (std::vector<float>{1, 2, 2, 3, 0.5f, 0, 0, 0}));
}

// ---------------------------------------------------------------- operator sets after 17
// The ONNX checker braid links knows operator sets up to 17; newer models are checked by braid.

TEST(OnnxImport, Opset18SplitsByNumOutputsAndReducesOverAxesGivenAsAnInput) {
    ModelBuilder m;
    m.set_opset(18);
    m.input("x", onnx::TensorProto::FLOAT, {2, 7});
    // Split-18: 7 into 3 parts is 3, 3 and 1.
    ModelBuilder::attr(m.node("Split", {"x"}, {"a", "b", "c"}), "axis", int64_t(1));
    ModelBuilder::attr(m.g->mutable_node(0), "num_outputs", int64_t(3));
    // ReduceMean-18 reads its axes from input 1.
    m.int64_initializer("axes", {1});
    ModelBuilder::attr(m.node("ReduceMean", {"x", "axes"}, {"mean"}), "keepdims", int64_t(0));
    for (auto* name : {"a", "b", "c"}) m.output(name, onnx::TensorProto::FLOAT, 2);
    m.output("mean", onnx::TensorProto::FLOAT, 1);
    auto exec = onnx_import::import_bytes(m.bytes()).compile();
    exec->feed("x", iota({2, 7})).run();
    EXPECT_EQ(exec->output(0).shape(), (TensorShape{2, 3}));
    EXPECT_EQ(exec->output(1).shape(), (TensorShape{2, 3}));
    EXPECT_EQ(exec->output(2).shape(), (TensorShape{2, 1}));
    Tensor c = exec->output(2).contiguous();
    EXPECT_EQ(c.ptr<float>()[0], 6.f);
    EXPECT_EQ(c.ptr<float>()[1], 13.f);
    Tensor mean = exec->output(3).contiguous();
    EXPECT_EQ(mean.shape(), (TensorShape{2}));
    EXPECT_FLOAT_EQ(mean.ptr<float>()[0], 3.f);
    EXPECT_FLOAT_EQ(mean.ptr<float>()[1], 10.f);
}

TEST(OnnxImport, Opset18ResizesTheGivenAxesKeepingTheAspectRatio) {
    // sizes {6, 4} for axes {2, 3} of a 2x4 image, not_smaller: the common scale is
    // max(6/2, 4/4) = 3, so the image becomes 6x12, each pixel repeated 3x3 (nearest).
    ModelBuilder m;
    m.set_opset(18);
    m.input("x", onnx::TensorProto::FLOAT, {1, 1, 2, 4});
    m.int64_initializer("sizes", {6, 4});
    auto* r = m.node("Resize", {"x", "", "", "sizes"}, {"y"});
    ModelBuilder::attr(r, "axes", std::vector<int64_t>{2, 3});
    ModelBuilder::attr(r, "keep_aspect_ratio_policy", std::string("not_smaller"));
    m.output("y", onnx::TensorProto::FLOAT, 4);
    auto exec = onnx_import::import_bytes(m.bytes()).compile();
    exec->feed("x", iota({1, 1, 2, 4})).run();
    Tensor y = exec->output(0).contiguous();
    ASSERT_EQ(y.shape(), (TensorShape{1, 1, 6, 12}));
    for (size_t i = 0; i < 6; ++i)
        for (size_t j = 0; j < 12; ++j)
            ASSERT_EQ(y.ptr<float>()[i * 12 + j], float(i / 3 * 4 + j / 3)) << i << "," << j;
}

TEST(OnnxImport, Opset20ReadsDftsAxisFromAnInputAndImportsGeluAndMish) {
    ModelBuilder m;
    m.set_opset(20);
    m.input("s", onnx::TensorProto::FLOAT, {1, 4, 1});
    m.input("x", onnx::TensorProto::FLOAT, {4});
    m.int64_initializer("axis", {1});
    m.node("DFT", {"s", "", "axis"}, {"f"});
    ModelBuilder::attr(m.node("Gelu", {"x"}, {"g"}), "approximate", std::string("tanh"));
    m.node("Mish", {"x"}, {"mish"});
    m.node("Softplus", {"x"}, {"sp"});
    m.output("f", onnx::TensorProto::FLOAT, 3);
    for (auto* name : {"g", "mish", "sp"}) m.output(name, onnx::TensorProto::FLOAT, 1);
    auto exec = onnx_import::import_bytes(m.bytes()).compile();
    Tensor x(TensorShape{4}, dtype::Float32());
    float xv[] = {-1.f, 0.5f, 1.f, 100.f};
    std::copy(xv, xv + 4, x.ptr<float>());
    exec->feed("s", iota({1, 4, 1}, 1.f)).feed("x", x).run();
    // DFT of 1, 2, 3, 4: 10, -2+2i, -2, -2-2i.
    Tensor f = exec->output(0).contiguous();
    ASSERT_EQ(f.shape(), (TensorShape{1, 4, 2}));
    float want[] = {10, 0, -2, 2, -2, 0, -2, -2};
    for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(f.ptr<float>()[i], want[i], 1e-5) << i;
    Tensor g = exec->output(1).contiguous(), mish = exec->output(2).contiguous(),
           sp = exec->output(3).contiguous();
    for (size_t i = 0; i < 4; ++i) {
        double v = xv[i];
        double gelu = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        double softplus = v > 30 ? v : std::log1p(std::exp(v));
        EXPECT_NEAR(g.ptr<float>()[i], gelu, 1e-5 * std::max(1.0, std::abs(gelu))) << v;
        EXPECT_NEAR(mish.ptr<float>()[i], v * std::tanh(softplus), 1e-5 * std::max(1.0, v)) << v;
        // A large x gives x, not log1p(inf).
        EXPECT_NEAR(sp.ptr<float>()[i], softplus, 1e-5 * std::max(1.0, v)) << v;
    }
}

TEST(OnnxImport, AnAttributeNewerThanTheConvertersKnowIsRefusedNamingTheNode) {
    // AveragePool-19 added dilations, which braid's converter does not read for averages.
    ModelBuilder m;
    m.set_opset(19);
    m.input("x", onnx::TensorProto::FLOAT, {1, 1, 5, 5});
    auto* pool = m.node("AveragePool", {"x"}, {"y"});
    ModelBuilder::attr(pool, "kernel_shape", std::vector<int64_t>{2, 2});
    ModelBuilder::attr(pool, "dilations", std::vector<int64_t>{2, 2});
    m.output("y", onnx::TensorProto::FLOAT, 4);
    std::string msg = error_of([&] { onnx_import::import_bytes(m.bytes()); });
    EXPECT_NE(msg.find("node \"AveragePool_1\" (AveragePool, opset 19)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("attribute \"dilations\" (added after opset 17)"), std::string::npos) << msg;
}

TEST(OnnxImport, AnOperatorSetNewerThanBraidImportsIsRefusedSayingWhichItKnows) {
    ModelBuilder m;
    m.set_opset(22);
    m.input("x", onnx::TensorProto::FLOAT, {2});
    m.node("Relu", {"x"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 1);
    std::string msg = error_of([&] { onnx_import::import_bytes(m.bytes()); });
    EXPECT_NE(msg.find("operator set ai.onnx version 22 is newer than braid imports (up to 21)"),
              std::string::npos)
        << msg;
}

TEST(OnnxImport, Opset8ScanRunsEachBatchEntryAndHonoursItsDirection) {
    // Running sums of each batch entry's rows, read backwards (directions = [1]); the state and
    // the scan values carry the batch axis 0.
    ModelBuilder m;
    m.set_opset(8);
    m.input("state", onnx::TensorProto::FLOAT, {2, 2});
    m.input("x", onnx::TensorProto::FLOAT, {2, 3, 2});
    auto* scan = m.node("Scan", {"", "state", "x"}, {"final", "sums"});
    ModelBuilder::attr(scan, "num_scan_inputs", int64_t(1));
    ModelBuilder::attr(scan, "directions", std::vector<int64_t>{1});
    auto* body_attr = scan->add_attribute();
    body_attr->set_name("body");
    body_attr->set_type(onnx::AttributeProto::GRAPH);
    auto* body = body_attr->mutable_g();
    body->set_name("body");
    ModelBuilder::set_type(body->add_input(), "s", onnx::TensorProto::FLOAT, {2});
    ModelBuilder::set_type(body->add_input(), "row", onnx::TensorProto::FLOAT, {2});
    auto* add = body->add_node();
    add->set_op_type("Add");
    add->add_input("s");
    add->add_input("row");
    add->add_output("sum");
    auto* copy = body->add_node();
    copy->set_op_type("Identity");
    copy->add_input("sum");
    copy->add_output("sum_out");
    ModelBuilder::set_type(body->add_output(), "sum", onnx::TensorProto::FLOAT, {2});
    ModelBuilder::set_type(body->add_output(), "sum_out", onnx::TensorProto::FLOAT, {2});
    m.output("final", onnx::TensorProto::FLOAT, 2);
    m.output("sums", onnx::TensorProto::FLOAT, 3);
    auto exec = onnx_import::import_bytes(m.bytes()).compile();
    exec->feed("state", iota({2, 2}, 100.f)).feed("x", iota({2, 3, 2})).run();
    Tensor final_state = exec->output(0).contiguous(), sums = exec->output(1).contiguous();
    ASSERT_EQ(sums.shape(), (TensorShape{2, 3, 2}));
    for (size_t b = 0; b < 2; ++b)
        for (size_t c = 0; c < 2; ++c) {
            float acc = 100.f + float(b * 2 + c);
            for (size_t step = 0; step < 3; ++step) {
                size_t row = 2 - step; // backwards
                acc += float(b * 6 + row * 2 + c);
                EXPECT_EQ(sums.ptr<float>()[b * 6 + step * 2 + c], acc) << b << "," << step;
            }
            EXPECT_EQ(final_state.ptr<float>()[b * 2 + c], acc);
        }
}
