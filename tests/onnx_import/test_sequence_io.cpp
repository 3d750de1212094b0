// ONNX sequence and optional values at a model's edge, through the embedding API (C++ and C):
// sequence inputs imported per length and element shapes, sequence outputs gathered from their
// elements, optional inputs bound to no value, optional outputs without one; loops unrolled at
// import where braid's Loop cannot carry their values; outputs the graph leaves strided read
// dense; and braid-run's sequence and optional inputs.
#include "braid.h"
#include "braid/braid_c.h"
#include "embed/embed_internal.h"
#include "onnx_import/onnx_import.h"
#include "serialization/npy.h"
#include "tests/onnx_import/model_builder.h"
#include "tests/support/error_text.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace braid;
using braid::testing::error_of;
using braid::testing::iota;
using braid::testing::ModelBuilder;
using braid::testing::TempDir;

namespace {

embed::TensorView view(const Tensor& t) {
    auto dims = t.shape().dims();
    return {t.raw_ptr(), embed::to_embed(t.dtype()), std::vector<int64_t>(dims.begin(), dims.end()),
            t.nr_bytes()};
}

std::vector<float> floats(const embed::TensorView& v) {
    const float* p = static_cast<const float*>(v.data);
    return {p, p + v.bytes / sizeof(float)};
}

//! out = SequenceInsert(s, x) (a sequence output), cat = ConcatFromSequence(out, axis 0).
ModelBuilder insert_and_concat() {
    ModelBuilder m;
    m.sequence_input("s", onnx::TensorProto::FLOAT);
    m.input("x", onnx::TensorProto::FLOAT, {2});
    m.node("SequenceInsert", {"s", "x"}, {"out"});
    auto* cat = m.node("ConcatFromSequence", {"out"}, {"cat"});
    ModelBuilder::attr(cat, "axis", int64_t(0));
    m.sequence_output("out", onnx::TensorProto::FLOAT);
    m.output("cat", onnx::TensorProto::FLOAT);
    return m;
}

} // namespace

TEST(OnnxSequenceIO, ASequenceInputAndOutputRunPerLength) {
    TempDir dir;
    insert_and_concat().save(dir.path / "m.onnx");
    auto model = embed::Model::load((dir.path / "m.onnx").string());
    ASSERT_EQ(model->inputs().size(), 2u);
    EXPECT_EQ(model->inputs()[0].kind, embed::ValueKind::SEQUENCE);
    EXPECT_TRUE(model->inputs()[0].any_shape);
    EXPECT_EQ(model->inputs()[1].kind, embed::ValueKind::TENSOR);
    EXPECT_EQ(model->outputs()[0].kind, embed::ValueKind::SEQUENCE);
    EXPECT_EQ(model->outputs()[1].kind, embed::ValueKind::TENSOR);

    auto ctx = model->create_context();
    Tensor a = iota({2}, 1.f), b = iota({3}, 10.f), x = iota({2}, 100.f);
    ctx->set_input("x", x.raw_ptr(), embed::DType::FLOAT32, {2});
    ctx->set_sequence_input("s", {view(a), view(b)});
    ctx->run();
    auto out = ctx->sequence_output("out");
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(floats(out[0]), (std::vector<float>{1, 2}));
    EXPECT_EQ(floats(out[1]), (std::vector<float>{10, 11, 12}));
    EXPECT_EQ(floats(out[2]), (std::vector<float>{100, 101}));
    EXPECT_EQ(floats(ctx->output("cat")), (std::vector<float>{1, 2, 10, 11, 12, 100, 101}));

    // Another length is another import; the first comes back from the cache.
    ctx->set_sequence_input("s", {});
    ctx->run();
    out = ctx->sequence_output("out");
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(floats(out[0]), (std::vector<float>{100, 101}));
    ctx->set_sequence_input("s", {view(a), view(b)});
    ctx->run();
    EXPECT_EQ(ctx->sequence_output("out").size(), 3u);
    EXPECT_EQ(model->impl().variants->size(), 2u);

    // Misuse names the input or output and the way to do it.
    std::string msg =
        error_of([&] { ctx->set_input("s", a.raw_ptr(), embed::DType::FLOAT32, {2}); });
    EXPECT_NE(msg.find("input \"s\" is a sequence; bind it with set_sequence_input()"),
              std::string::npos)
        << msg;
    Tensor ints(TensorShape{2}, dtype::Int32());
    msg = error_of([&] { ctx->set_sequence_input("s", {view(a), view(ints)}); });
    EXPECT_NE(msg.find("input \"s\", element 1: dtype int32 given; the model expects float32"),
              std::string::npos)
        << msg;
    msg = error_of([&] { ctx->output("out"); });
    EXPECT_NE(msg.find("output \"out\" is a sequence; read it with sequence_output()"),
              std::string::npos)
        << msg;
    msg = error_of([&] { ctx->set_input_none("s"); });
    EXPECT_NE(msg.find("not an optional"), std::string::npos) << msg;
}

TEST(OnnxSequenceIO, AnOptionalInputMayHoldNoValue) {
    // has = OptionalHasElement(o); y = Identity(o), an optional output.
    ModelBuilder m;
    m.set_opset(16);
    m.optional_input("o", onnx::TensorProto::FLOAT, {2});
    m.node("OptionalHasElement", {"o"}, {"has"});
    m.node("Identity", {"o"}, {"y"});
    m.output("has", onnx::TensorProto::BOOL, 0);
    m.optional_output("y", onnx::TensorProto::FLOAT);
    TempDir dir;
    m.save(dir.path / "m.onnx");
    auto model = embed::Model::load((dir.path / "m.onnx").string());
    EXPECT_EQ(model->inputs()[0].kind, embed::ValueKind::OPTIONAL);
    EXPECT_EQ(model->outputs()[1].kind, embed::ValueKind::OPTIONAL);
    auto ctx = model->create_context();

    Tensor o = iota({2}, 5.f);
    ctx->set_input("o", o.raw_ptr(), embed::DType::FLOAT32, {2});
    ctx->run();
    EXPECT_TRUE(*static_cast<const bool*>(ctx->output("has").data));
    ASSERT_TRUE(ctx->has_output("y"));
    EXPECT_EQ(floats(ctx->output("y")), (std::vector<float>{5, 6}));

    ctx->set_input_none("o");
    ctx->run();
    EXPECT_FALSE(*static_cast<const bool*>(ctx->output("has").data));
    EXPECT_FALSE(ctx->has_output("y"));
    std::string msg = error_of([&] { ctx->output("y"); });
    EXPECT_NE(msg.find("output \"y\": the optional has no value in the last run"),
              std::string::npos)
        << msg;
}

TEST(OnnxSequenceIO, TheCApiBindsAndReadsSequences) {
    TempDir dir;
    insert_and_concat().save(dir.path / "m.onnx");
    std::string path = (dir.path / "m.onnx").string();
    braid_model* model = nullptr;
    ASSERT_EQ(braid_model_load_file(path.c_str(), &model), nullptr);
    braid_value_kind kind = BRAID_TENSOR;
    ASSERT_EQ(braid_model_input_kind(model, 0, &kind), nullptr);
    EXPECT_EQ(kind, BRAID_SEQUENCE);
    ASSERT_EQ(braid_model_output_kind(model, 1, &kind), nullptr);
    EXPECT_EQ(kind, BRAID_TENSOR);
    braid_context* ctx = nullptr;
    ASSERT_EQ(braid_context_create(model, &ctx), nullptr);

    const float a[] = {1, 2}, b[] = {3, 4, 5}, x[] = {7, 8};
    const int64_t a_dims[] = {2}, b_dims[] = {3}, x_dims[] = {2};
    const braid_dtype dtypes[] = {BRAID_FLOAT32, BRAID_FLOAT32};
    const int64_t* shapes[] = {a_dims, b_dims};
    const size_t ndims[] = {1, 1};
    const void* data[] = {a, b};
    ASSERT_EQ(braid_context_set_sequence_input(ctx, "s", 2, dtypes, shapes, ndims, data), nullptr);
    ASSERT_EQ(braid_context_set_input(ctx, "x", BRAID_FLOAT32, x_dims, 1, x), nullptr);
    ASSERT_EQ(braid_context_run(ctx, nullptr), nullptr);
    size_t n = 0;
    ASSERT_EQ(braid_context_sequence_length(ctx, "out", &n), nullptr);
    ASSERT_EQ(n, 3u);
    const void* p = nullptr;
    size_t bytes = 0, ndim = 0;
    int64_t shape[4];
    braid_dtype dtype = BRAID_INT8;
    ASSERT_EQ(braid_context_sequence_element(ctx, "out", 1, &p, &bytes, &dtype, shape, 4, &ndim),
              nullptr);
    EXPECT_EQ(dtype, BRAID_FLOAT32);
    ASSERT_EQ(ndim, 1u);
    EXPECT_EQ(shape[0], 3);
    ASSERT_EQ(bytes, sizeof b);
    EXPECT_EQ(std::memcmp(p, b, sizeof b), 0);
    int has = 0;
    ASSERT_EQ(braid_context_has_output(ctx, "out", &has), nullptr);
    EXPECT_EQ(has, 1);
    // An element out of range is an error naming the output and the length.
    braid_status* st =
        braid_context_sequence_element(ctx, "out", 3, &p, nullptr, nullptr, nullptr, 0, nullptr);
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(braid_status_code(st), BRAID_INVALID_ARGUMENT);
    EXPECT_NE(std::string(braid_status_message(st)).find("the sequence has 3"), std::string::npos)
        << braid_status_message(st);
    braid_status_free(st);
    EXPECT_EQ(braid_context_destroy(ctx), nullptr);
    EXPECT_EQ(braid_model_release(model), nullptr);
}

TEST(OnnxSequenceIO, AnOutputTheGraphLeavesStridedIsReadDense) {
    // Split along axis 1 gives views into x; the embedding API hands out dense row-major data.
    ModelBuilder m;
    m.input("x", onnx::TensorProto::FLOAT, {2, 4});
    auto* split = m.node("Split", {"x"}, {"left", "right"});
    ModelBuilder::attr(split, "axis", int64_t(1));
    m.output("left", onnx::TensorProto::FLOAT, 2);
    m.output("right", onnx::TensorProto::FLOAT, 2);
    TempDir dir;
    m.save(dir.path / "m.onnx");
    auto model = embed::Model::load((dir.path / "m.onnx").string());
    auto ctx = model->create_context();
    Tensor x = iota({2, 4});
    ctx->set_input("x", x.raw_ptr(), embed::DType::FLOAT32, {2, 4});
    ctx->run();
    EXPECT_EQ(floats(ctx->output("right")), (std::vector<float>{2, 3, 6, 7}));
    EXPECT_EQ(floats(ctx->output("left")), (std::vector<float>{0, 1, 4, 5}));
    braid_model* cm = nullptr;
    std::string path = (dir.path / "m.onnx").string();
    ASSERT_EQ(braid_model_load_file(path.c_str(), &cm), nullptr);
    braid_context* cc = nullptr;
    ASSERT_EQ(braid_context_create(cm, &cc), nullptr);
    const int64_t dims[] = {2, 4};
    ASSERT_EQ(braid_context_set_input(cc, "x", BRAID_FLOAT32, dims, 2, x.raw_ptr()), nullptr);
    ASSERT_EQ(braid_context_run(cc, nullptr), nullptr);
    const void* p = nullptr;
    ASSERT_EQ(braid_context_output(cc, "right", &p, nullptr), nullptr);
    const float* r = static_cast<const float*>(p);
    EXPECT_EQ(std::vector<float>(r, r + 4), (std::vector<float>{2, 3, 6, 7}));
    EXPECT_EQ(braid_context_destroy(cc), nullptr);
    EXPECT_EQ(braid_model_release(cm), nullptr);
}

TEST(OnnxSequenceIO, ALoopWhoseCarriedValueGrowsIsUnrolledPerTripCount) {
    // y = Loop(M, x): the body doubles x's length each iteration (Concat(x, x)), so one body
    // cannot serve every iteration; the loop is unrolled at import, its trip count read when
    // the model runs.
    ModelBuilder m;
    m.input("M", onnx::TensorProto::INT64, {});
    m.input("x", onnx::TensorProto::FLOAT, {1});
    auto* loop = m.node("Loop", {"M", "", "x"}, {"y"});
    auto* a = loop->add_attribute();
    a->set_name("body");
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* body = a->mutable_g();
    body->set_name("body");
    ModelBuilder::set_type(body->add_input(), "i", onnx::TensorProto::INT64, {});
    ModelBuilder::set_type(body->add_input(), "c", onnx::TensorProto::BOOL, {});
    ModelBuilder::set_type(body->add_input(), "v", onnx::TensorProto::FLOAT, {-1});
    auto* id = body->add_node();
    id->set_op_type("Identity");
    id->add_input("c");
    id->add_output("c_out");
    auto* cat = body->add_node();
    cat->set_op_type("Concat");
    cat->add_input("v");
    cat->add_input("v");
    cat->add_output("v_out");
    ModelBuilder::attr(cat, "axis", int64_t(0));
    ModelBuilder::set_type(body->add_output(), "c_out", onnx::TensorProto::BOOL, {});
    body->add_output()->set_name("v_out");
    body->mutable_output(1)->mutable_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::FLOAT);
    m.output("y", onnx::TensorProto::FLOAT);
    TempDir dir;
    m.save(dir.path / "m.onnx");
    auto model = embed::Model::load((dir.path / "m.onnx").string());
    auto ctx = model->create_context();
    Tensor x = iota({1}, 3.f);
    int64_t trips = 3;
    ctx->set_input("x", x.raw_ptr(), embed::DType::FLOAT32, {1});
    ctx->set_input("M", &trips, embed::DType::INT64, {});
    ctx->run();
    EXPECT_EQ(floats(ctx->output("y")), std::vector<float>(8, 3.f));
    trips = 1;
    ctx->run();
    EXPECT_EQ(floats(ctx->output("y")), std::vector<float>(2, 3.f));
    EXPECT_EQ(model->impl().variants->shape_inputs(), std::vector<std::string>{"M"});
}

TEST(OnnxSequenceIO, BraidRunTakesASequenceFromFilesAndAnOptionalAsNone) {
    TempDir dir;
    insert_and_concat().save(dir.path / "m.onnx");
    Tensor a = iota({2}, 1.f), b = iota({3}, 10.f), x = iota({2}, 100.f);
    write_npy((dir.path / "a.npy").string(), a);
    write_npy((dir.path / "b.npy").string(), b);
    write_npy((dir.path / "x.npy").string(), x);
    auto run = [&](const std::string& args) {
        return braid::testing::run_braid_run(dir.path / "m.onnx", args);
    };
    std::string d = dir.path.string();
    auto [status, out] = run("--input s=" + d + "/a.npy," + d + "/b.npy --input x=" + d + "/x.npy");
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find("sequence of 2 float32"), std::string::npos) << out;
    EXPECT_NE(out.find("output out[2]: float32 {2}"), std::string::npos) << out;
    EXPECT_NE(out.find("output cat: float32 {7}"), std::string::npos) << out;
    // A sequence input needs its files; none is for optionals.
    auto [missing_status, missing] = run("--input x=" + d + "/x.npy");
    EXPECT_EQ(missing_status, 2) << missing;
    EXPECT_NE(missing.find("input \"s\": a sequence: give its elements with --input s=A.npy"),
              std::string::npos)
        << missing;
    auto [none_status, none] = run("--input s=none --input x=" + d + "/x.npy");
    EXPECT_EQ(none_status, 2) << none;
    EXPECT_NE(none.find("not an optional"), std::string::npos) << none;
}
