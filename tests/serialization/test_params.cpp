// The typed params interface operators use: conversions and checks shared by every loader.
#include "braid.h"
#include "graph/param_fields.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>

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
    r.text = "complex64";
    EXPECT_THAT(error_of([&] { r.read_dtype("dtype"); }), HasSubstr("invalid value \"complex64\""));
    r.text = "float16";
    EXPECT_EQ(r.read_dtype("dtype"), dtype::Float16());
    r.text = "float64";
    EXPECT_EQ(r.read_dtype("dtype"), dtype::Float64());
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

namespace {

//! Params kept in maps by name, as a model stores them.
class MapParams final : public ParamWriter, public ParamReader {
public:
    std::map<std::string, int64_t, std::less<>> ints;
    std::map<std::string, double, std::less<>> floats;
    std::map<std::string, std::string, std::less<>> strings;
    std::map<std::string, std::vector<int64_t>, std::less<>> lists;

    void write_int(std::string_view n, int64_t v) override { ints[std::string(n)] = v; }
    void write_float(std::string_view n, double v) override { floats[std::string(n)] = v; }
    void write_bool(std::string_view n, bool v) override { ints[std::string(n)] = v; }
    void write_string(std::string_view n, std::string_view v) override {
        strings[std::string(n)] = std::string(v);
    }
    void write_ints(std::string_view n, const std::vector<int64_t>& v) override {
        lists[std::string(n)] = v;
    }
    void write_floats(std::string_view, const std::vector<double>&) override {}
    void write_tensor(std::string_view, const Tensor&) override {}

    bool has(std::string_view n) const override {
        return ints.count(n) || floats.count(n) || strings.count(n) || lists.count(n);
    }
    int64_t read_int(std::string_view n) const override { return ints.find(n)->second; }
    double read_float(std::string_view n) const override { return floats.find(n)->second; }
    bool read_bool(std::string_view n) const override { return ints.find(n)->second != 0; }
    std::string read_string(std::string_view n) const override { return strings.find(n)->second; }
    std::vector<int64_t> read_ints(std::string_view n) const override {
        return lists.find(n)->second;
    }
    std::vector<double> read_floats(std::string_view) const override { return {}; }
    Tensor read_tensor(std::string_view) const override { return {}; }
    std::shared_ptr<Tensor> read_shared_tensor(std::string_view) const override { return {}; }
    uint32_t version() const override { return 1; }
    const std::string& context() const override { return m_context; }

private:
    std::string m_context = "Test \"t\"";
};

struct InnerParam {
    int stride = 1;
    static constexpr auto fields() {
        return std::tuple{param_field("stride", &InnerParam::stride)};
    }
};

struct OuterParam {
    InnerParam inner;
    uint32_t size = 0;
    double value = 0;
    std::optional<TensorShape> shape;
    static constexpr auto fields() {
        return std::tuple{
            param_field("inner", &OuterParam::inner), param_field("size", &OuterParam::size),
            param_field("value", &OuterParam::value), param_field("shape", &OuterParam::shape)};
    }
};

} // namespace

TEST(OperatorParams, FieldListsRoundTripNestedAndOptionalFields) {
    OuterParam p{{3}, 7, 0.5, TensorShape{2, 3}};
    MapParams m;
    write_param(m, p);
    // The nested Param's fields are flattened; its own name is not stored.
    EXPECT_EQ(m.ints.count("stride"), 1u);
    EXPECT_EQ(m.ints.count("inner"), 0u);
    auto back = read_param<OuterParam>(m);
    EXPECT_TRUE(param_equal(back, p));
    EXPECT_EQ(describe_param(p), "stride=3 size=7 value=0.5 shape={2,3}");

    // An unset optional is not stored and loads unset.
    p.shape.reset();
    MapParams m2;
    write_param(m2, p);
    EXPECT_FALSE(m2.has("shape"));
    EXPECT_FALSE(read_param<OuterParam>(m2).shape.has_value());
    EXPECT_EQ(describe_param(p), "stride=3 size=7 value=0.5");

    // An integer beyond the member's type is refused, naming the field.
    m2.ints["size"] = int64_t(1) << 40;
    EXPECT_THAT(error_of([&] { read_param<OuterParam>(m2); }),
                HasSubstr("param \"size\" has an invalid value \"1099511627776\""));
}

TEST(OperatorParams, FloatFieldsCompareByTheirBits) {
    OuterParam a, b;
    a.value = std::nan(""), b.value = std::nan("");
    EXPECT_TRUE(param_equal(a, b)); // NaN fills deduplicate
    a.value = 0.0, b.value = -0.0;
    EXPECT_FALSE(param_equal(a, b)); // 0.0 and -0.0 stay apart
    Hasher ha, hb;
    hash_param(ha, a);
    hash_param(hb, b);
    EXPECT_NE(ha.digest(), hb.digest());
}
