// float64 through the embedding API: the C++ DType and the C braid_dtype both carry it (value 8,
// appended), and a float64 model binds, runs and returns doubles through either API; the public
// dtype converter.
#include "braid.h"
#include "braid/braid_c.h"
#include "braid/embed.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace braid;
namespace em = braid::embed;
using ::testing::HasSubstr;

namespace {

static_assert(int(em::DType::FLOAT64) == 8 && int(BRAID_FLOAT64) == 8,
              "float64 is appended to the public dtype enums");
static_assert(int(em::DType::BOOL) == 7 && int(BRAID_BOOL) == 7, "older values do not move");

//! y = x * 3 + 1e-12 with a float64 input x {2} and an output "narrow" = float32(x).
std::vector<uint8_t> float64_model() {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float64(), {2});
    std::vector<uint8_t> bytes;
    dump({(x * 3.0 + 1e-12).rename("y"), x.astype(dtype::Float32()).rename("narrow")}, bytes);
    return bytes;
}

} // namespace

TEST(EmbedFloat64, CppApiReportsBindsAndReturnsFloat64) {
    auto bytes = float64_model();
    auto model = em::Model::load_buffer(bytes.data(), bytes.size(), true);
    ASSERT_EQ(model->inputs().size(), 1u);
    EXPECT_EQ(model->inputs()[0].dtype, em::DType::FLOAT64);
    EXPECT_EQ(model->outputs()[0].dtype, em::DType::FLOAT64);
    EXPECT_EQ(model->outputs()[1].dtype, em::DType::FLOAT32);
    EXPECT_EQ(em::dtype_size(em::DType::FLOAT64), 8u);

    auto ctx = model->create_context();
    std::vector<double> x = {1.0 + 1e-15, -0.1};
    ctx->set_input("x", x.data(), em::DType::FLOAT64, {2});
    ctx->run();
    auto y = ctx->output("y");
    EXPECT_EQ(y.dtype, em::DType::FLOAT64);
    ASSERT_EQ(y.bytes, 16u);
    const double* yd = static_cast<const double*>(y.data);
    EXPECT_EQ(yd[0], x[0] * 3.0 + 1e-12);
    EXPECT_EQ(yd[1], x[1] * 3.0 + 1e-12);
    // A float32 buffer for the float64 input is refused, naming both dtypes.
    std::vector<float> xf = {1.f, 2.f};
    try {
        ctx->set_input("x", xf.data(), em::DType::FLOAT32, {2});
        FAIL() << "float32 data accepted for a float64 input";
    } catch (const em::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("dtype float32 given; the model expects float64"));
    }
}

TEST(EmbedFloat64, CApiReportsBindsAndReturnsFloat64) {
    auto bytes = float64_model();
    braid_model* model = nullptr;
    ASSERT_EQ(braid_status_code(braid_model_load_buffer(bytes.data(), bytes.size(), 1, &model)),
              BRAID_OK);
    const char* name = nullptr;
    braid_dtype dt = BRAID_FLOAT32;
    int64_t shape[4];
    size_t ndim = 0;
    ASSERT_EQ(braid_model_input_info(model, 0, &name, &dt, shape, 4, &ndim), nullptr);
    EXPECT_STREQ(name, "x");
    EXPECT_EQ(dt, BRAID_FLOAT64);
    ASSERT_EQ(braid_model_output_info(model, 1, &name, &dt, shape, 4, &ndim), nullptr);
    EXPECT_EQ(dt, BRAID_FLOAT32);

    braid_context* ctx = nullptr;
    ASSERT_EQ(braid_context_create(model, &ctx), nullptr);
    double x[2] = {0.25 + 1e-14, 7.0};
    int64_t xs[1] = {2};
    ASSERT_EQ(braid_context_set_input(ctx, "x", BRAID_FLOAT64, xs, 1, x), nullptr);
    ASSERT_EQ(braid_context_run(ctx, nullptr), nullptr);
    const void* data = nullptr;
    size_t nbytes = 0;
    ASSERT_EQ(braid_context_output(ctx, "y", &data, &nbytes), nullptr);
    ASSERT_EQ(nbytes, 2 * sizeof(double));
    double y[2];
    std::memcpy(y, data, sizeof y);
    EXPECT_EQ(y[0], x[0] * 3.0 + 1e-12);
    EXPECT_EQ(y[1], x[1] * 3.0 + 1e-12);
    ASSERT_EQ(braid_context_output(ctx, "narrow", &data, &nbytes), nullptr);
    ASSERT_EQ(nbytes, 2 * sizeof(float));
    float n[2];
    std::memcpy(n, data, sizeof n);
    EXPECT_EQ(n[0], float(x[0]));

    // Value 13, after uint64, is no dtype.
    braid_status* bad = braid_context_set_input(ctx, "x", (braid_dtype)13, xs, 1, x);
    EXPECT_EQ(braid_status_code(bad), BRAID_INVALID_ARGUMENT);
    EXPECT_THAT(braid_status_message(bad), HasSubstr("dtype value 13"));
    braid_status_free(bad);
    EXPECT_EQ(braid_context_destroy(ctx), nullptr);
    EXPECT_EQ(braid_model_release(model), nullptr);
}

// embed::convert_elements is braid's own converter: float64 rounds to float16 once (through
// float32 it would round twice), bfloat16 and float16 widen exactly, a bad dtype is an Error.
TEST(EmbedConvert, Float64RoundsToHalfOnceAndHalvesWidenExactly) {
    // 1 + 2^-11 + 2^-40: just above the midpoint of 1 and the next float16 (1 + 2^-10), so it
    // rounds up; through float32 the 2^-40 is lost, the midpoint ties to even and gives 1.
    double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
    uint16_t h = 0;
    em::convert_elements(em::DType::FLOAT64, &x, em::DType::FLOAT16, &h, 1);
    EXPECT_EQ(h, 0x3c01);

    std::vector<uint16_t> halves = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00};
    std::vector<float> widened(halves.size());
    em::convert_elements(em::DType::FLOAT16, halves.data(), em::DType::FLOAT32, widened.data(),
                         halves.size());
    EXPECT_EQ(widened, (std::vector<float>{1.f, -2.f, 65504.f, std::ldexp(1.f, -24),
                                           std::numeric_limits<float>::infinity()}));
    uint16_t b = 0x3fc0; // bfloat16 1.5
    float f = 0;
    em::convert_elements(em::DType::BFLOAT16, &b, em::DType::FLOAT32, &f, 1);
    EXPECT_EQ(f, 1.5f);

    try {
        em::convert_elements(em::DType(42), &x, em::DType::FLOAT32, &f, 1);
        FAIL() << "a dtype value out of range converted";
    } catch (const em::Error& e) {
        EXPECT_EQ(e.code(), em::Code::INVALID_ARGUMENT);
        EXPECT_THAT(e.what(), HasSubstr("42"));
    }
}
