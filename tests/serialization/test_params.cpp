// The typed params interface operators use: conversions and checks shared by every loader.
#include "braid.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace braid;
using ::testing::HasSubstr;

namespace {

//! Serves a fixed string and int list, like a loaded operator's params.
class FakeReader final : public ParamReader {
public:
    std::string text;
    std::vector<int64_t> ints;
    int64_t number = 0;

    bool has(std::string_view) const override { return true; }
    int64_t read_int(std::string_view) const override { return number; }
    double read_float(std::string_view) const override { return 0; }
    bool read_bool(std::string_view) const override { return false; }
    std::string read_string(std::string_view) const override { return text; }
    std::vector<int64_t> read_ints(std::string_view) const override { return ints; }
    std::vector<double> read_floats(std::string_view) const override { return {}; }
    Tensor read_tensor(std::string_view) const override { return {}; }
    std::shared_ptr<Tensor> read_shared_tensor(std::string_view) const override { return {}; }
    uint32_t version() const override { return 1; }
    const std::string& context() const override { return m_context; }

private:
    std::string m_context = "Test \"t\"";
};

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const SerializationError& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST(OperatorParams, EnumsAreReadByNameAndPlaceholdersNeverMatch) {
    FakeReader r;
    r.text = "FLOOR_DIV";
    EXPECT_EQ(r.read_enum<opr::ElemMode>("mode", opr::elem_mode_name), opr::ElemMode::FLOOR_DIV);
    r.text = "?"; // the name of every value past the last mode
    EXPECT_THAT(error_of([&] { r.read_enum<opr::ElemMode>("mode", opr::elem_mode_name); }),
                HasSubstr("Test \"t\": param \"mode\" has an invalid value \"?\""));
    r.text = "add";
    EXPECT_THAT(error_of([&] { r.read_enum<opr::ElemMode>("mode", opr::elem_mode_name); }),
                HasSubstr("invalid value \"add\""));
}

TEST(OperatorParams, IntegersAreRangeChecked) {
    FakeReader r;
    r.number = 300;
    EXPECT_EQ(r.read_int_as<int>("n"), 300);
    EXPECT_THAT(error_of([&] { r.read_int_as<int8_t>("n"); }), HasSubstr("invalid value \"300\""));
    r.number = -1;
    EXPECT_THAT(error_of([&] { r.read_int_as<uint32_t>("n"); }), HasSubstr("\"-1\""));
    r.ints = {1, int64_t(1) << 40};
    EXPECT_THAT(error_of([&] { r.read_int_list<int>("axes"); }), HasSubstr("\"1099511627776\""));
}

TEST(OperatorParams, ShapesAndDTypesAreChecked) {
    FakeReader r;
    r.ints = {2, 3};
    EXPECT_EQ(r.read_shape("s"), (TensorShape{2, 3}));
    r.ints = {2, -3};
    EXPECT_THAT(error_of([&] { r.read_shape("s"); }), HasSubstr("negative dim -3"));
    r.ints = {1 << 20, 1 << 20, 1 << 20};
    EXPECT_THAT(error_of([&] { r.read_shape("s"); }), HasSubstr("more than 2^56 elements"));
    r.ints = std::vector<int64_t>(8, 1);
    EXPECT_THAT(error_of([&] { r.read_shape("s"); }), HasSubstr("has 8 dims (at most 7)"));
    r.text = "float64";
    EXPECT_THAT(error_of([&] { r.read_dtype("dtype"); }), HasSubstr("invalid value \"float64\""));
    r.text = "float16";
    EXPECT_EQ(r.read_dtype("dtype"), dtype::Float16());
}

TEST(LoadHardening, ShapesWhoseSizeOverflowsAreRefusedAtBuildTime) {
    // A shape var (e.g. a constant in a crafted model) whose dims multiply past 2^64.
    auto g = ComputingGraph::make();
    Tensor dims(TensorShape{4}, dtype::Int32());
    for (size_t i = 0; i < 4; ++i) dims.ptr<int32_t>()[i] = 65536;
    auto shape_var = opr::ImmutableTensor::make(*g, dims);
    auto x = opr::ImmutableTensor::make_scalar(*g, 1.0, dtype::Float32());
    EXPECT_THROW(opr::Broadcast::make(x, shape_var), ShapeError);
}
