// float64: its name and size, and conversions to and from every dtype, each rounding once.
#include "base/error.h"
#include "memory/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace braid;

namespace {

//! One element of `dst_dt` converted from the double `v` by convert_elements (the bulk path).
template <typename T> T convert_one(double v, DType dst_dt) {
    T out{};
    convert_elements(dtype::Float64(), &v, dst_dt, &out, 1);
    return out;
}

//! `v` of `src_dt` converted to double by convert_elements.
template <typename T> double to_f64(T v, DType src_dt) {
    double out = -1;
    convert_elements(src_dt, &v, dtype::Float64(), &out, 1);
    return out;
}

} // namespace

TEST(Float64DType, HasNameSizeAndAppendedEnumValue) {
    EXPECT_EQ(dtype::Float64().size(), 8u);
    EXPECT_STREQ(dtype::Float64().name(), "float64");
    EXPECT_EQ(DType::from_name("float64"), dtype::Float64());
    EXPECT_TRUE(dtype::Float64().is_float());
    EXPECT_FALSE(dtype::Float64().is_integer());
    // Stored in model files and the embedding API: appended, the older values unchanged.
    EXPECT_EQ(int(DTypeEnum::FLOAT64), 8);
    EXPECT_EQ(int(DTypeEnum::BOOL), 7);
    EXPECT_EQ(int(DTypeEnum::FLOAT32), 0);
}

TEST(Float64DType, ToFloat32RoundsOnceToNearestEven) {
    // 1 + 2^-24 is the tie between 1 and 1 + 2^-23: even wins; anything above it rounds up.
    EXPECT_EQ(convert_one<float>(1.0 + 0x1p-24, dtype::Float32()), 1.0f);
    EXPECT_EQ(convert_one<float>(1.0 + 0x1p-24 + 0x1p-52, dtype::Float32()), 1.0f + 0x1p-23f);
    EXPECT_EQ(convert_one<float>(0.1, dtype::Float32()), 0.1f);
    EXPECT_EQ(convert_one<float>(1e300, dtype::Float32()), std::numeric_limits<float>::infinity());
    EXPECT_EQ(convert_one<float>(0x1p-149, dtype::Float32()), 0x1p-149f); // smallest subnormal
    EXPECT_TRUE(std::isnan(convert_one<float>(std::nan(""), dtype::Float32())));
    float f;
    store_from_double(dtype::Float32(), &f, 0, 1.0 + 0x1p-24 + 0x1p-52);
    EXPECT_EQ(f, 1.0f + 0x1p-23f);
}

TEST(Float64DType, ToFloat16RoundsOnceNotThroughFloat32) {
    // 1 + 2^-11 + 2^-40 is just above the tie between 1 and 1 + 2^-10: it rounds up. Through
    // float32 it would first become the tie 1 + 2^-11 and then round down to 1.
    EXPECT_EQ(convert_one<uint16_t>(1.0 + 0x1p-11 + 0x1p-40, dtype::Float16()), 0x3c01);
    EXPECT_EQ(convert_one<uint16_t>(1.0 + 0x1p-11, dtype::Float16()), 0x3c00);
    // Subnormal range: 2^-25 + 2^-60 is just above half of the smallest subnormal 2^-24.
    EXPECT_EQ(convert_one<uint16_t>(0x1p-25 + 0x1p-60, dtype::Float16()), 0x0001);
    EXPECT_EQ(convert_one<uint16_t>(0x1p-25, dtype::Float16()), 0x0000);
    EXPECT_EQ(convert_one<uint16_t>(-(0x1p-25 + 0x1p-60), dtype::Float16()), 0x8001);
    EXPECT_EQ(convert_one<uint16_t>(3 * 0x1p-25, dtype::Float16()), 0x0002); // tie to even
    EXPECT_EQ(convert_one<uint16_t>(65504.0, dtype::Float16()), 0x7bff);
    EXPECT_EQ(convert_one<uint16_t>(65520.0, dtype::Float16()), 0x7c00); // overflows
    EXPECT_EQ(convert_one<uint16_t>(-1e300, dtype::Float16()), 0xfc00);
}

TEST(Float64DType, ToBFloat16RoundsOnceNotThroughFloat32) {
    EXPECT_EQ(convert_one<uint16_t>(1.0 + 0x1p-8 + 0x1p-40, dtype::BFloat16()), 0x3f81);
    EXPECT_EQ(convert_one<uint16_t>(1.0 + 0x1p-8, dtype::BFloat16()), 0x3f80);
    // bfloat16 subnormals are spaced 2^-133; float32 ones 2^-149.
    EXPECT_EQ(convert_one<uint16_t>(0x1p-134 + 0x1p-170, dtype::BFloat16()), 0x0001);
    EXPECT_EQ(convert_one<uint16_t>(0x1p-134, dtype::BFloat16()), 0x0000);
    EXPECT_EQ(convert_one<uint16_t>(1e-300, dtype::BFloat16()), 0x0000);
    EXPECT_EQ(convert_one<uint16_t>(1e300, dtype::BFloat16()), 0x7f80);
    uint16_t nan_bits = convert_one<uint16_t>(std::nan(""), dtype::BFloat16());
    EXPECT_TRUE(std::isnan(bf16_to_float(nan_bits)));
}

TEST(Float64DType, ToIntegersTruncatesAndSaturates) {
    EXPECT_EQ(convert_one<int8_t>(2.9, dtype::Int8()), 2);
    EXPECT_EQ(convert_one<int8_t>(-2.9, dtype::Int8()), -2);
    EXPECT_EQ(convert_one<int8_t>(300.0, dtype::Int8()), 127);
    EXPECT_EQ(convert_one<uint8_t>(-5.0, dtype::Uint8()), 0);
    EXPECT_EQ(convert_one<uint8_t>(255.99, dtype::Uint8()), 255);
    EXPECT_EQ(convert_one<int32_t>(3e9, dtype::Int32()), std::numeric_limits<int32_t>::max());
    EXPECT_EQ(convert_one<int32_t>(-2147483648.5, dtype::Int32()), -2147483647 - 1);
    EXPECT_EQ(convert_one<int32_t>(std::nan(""), dtype::Int32()), 0);
    EXPECT_EQ(convert_one<int64_t>(1e20, dtype::Int64()), std::numeric_limits<int64_t>::max());
    EXPECT_EQ(convert_one<int64_t>(-0x1p63, dtype::Int64()), std::numeric_limits<int64_t>::min());
    // 2^55 + 8: exact in double and in int64.
    EXPECT_EQ(convert_one<int64_t>(0x1p55 + 8, dtype::Int64()), int64_t(36028797018963976));
    EXPECT_EQ(convert_one<int64_t>(-123456789012.75, dtype::Int64()), int64_t(-123456789012));
}

TEST(Float64DType, ToBoolIsNonzero) {
    EXPECT_EQ(convert_one<uint8_t>(0.0, dtype::Bool()), 0);
    EXPECT_EQ(convert_one<uint8_t>(-0.0, dtype::Bool()), 0);
    EXPECT_EQ(convert_one<uint8_t>(1e-300, dtype::Bool()), 1);
    EXPECT_EQ(convert_one<uint8_t>(std::nan(""), dtype::Bool()), 1);
}

TEST(Float64DType, FromNarrowerTypesIsExact) {
    EXPECT_EQ(to_f64(0.1f, dtype::Float32()), double(0.1f));
    EXPECT_EQ(to_f64(0x1p-149f, dtype::Float32()), 0x1p-149);
    EXPECT_EQ(to_f64(-std::numeric_limits<float>::max(), dtype::Float32()),
              -double(std::numeric_limits<float>::max()));
    EXPECT_EQ(to_f64(uint16_t(0x3c01), dtype::Float16()), 1.0 + 0x1p-10);
    EXPECT_EQ(to_f64(uint16_t(0x0001), dtype::Float16()), 0x1p-24);
    EXPECT_EQ(to_f64(uint16_t(0x3f81), dtype::BFloat16()), 1.0 + 0x1p-7);
    EXPECT_EQ(to_f64(int8_t(-128), dtype::Int8()), -128.0);
    EXPECT_EQ(to_f64(uint8_t(255), dtype::Uint8()), 255.0);
    EXPECT_EQ(to_f64(int32_t(-2147483647 - 1), dtype::Int32()), -2147483648.0);
    EXPECT_EQ(to_f64(int64_t(1) << 53, dtype::Int64()), 0x1p53);
    EXPECT_EQ(to_f64(uint8_t(1), dtype::Bool()), 1.0);
    EXPECT_EQ(to_f64(uint8_t(0), dtype::Bool()), 0.0);
    EXPECT_TRUE(std::isnan(to_f64(std::numeric_limits<float>::quiet_NaN(), dtype::Float32())));
    EXPECT_EQ(to_f64(-std::numeric_limits<float>::infinity(), dtype::Float32()),
              -std::numeric_limits<double>::infinity());
}

TEST(Float64DType, FromInt64RoundsOnceToNearestEven) {
    // Beyond 2^53 doubles are 2 apart: 2^53 + 1 is a tie (to even: 2^53), 2^53 + 3 too (to
    // 2^53 + 4), and 2^62 + 2^9 + 1 lies above the tie between 2^62 and 2^62 + 2^10.
    EXPECT_EQ(to_f64(int64_t(9007199254740993), dtype::Int64()), 9007199254740992.0);
    EXPECT_EQ(to_f64(int64_t(9007199254740995), dtype::Int64()), 9007199254740996.0);
    EXPECT_EQ(to_f64((int64_t(1) << 62) + (1 << 9) + 1, dtype::Int64()), 0x1p62 + 0x1p10);
    EXPECT_EQ(to_f64(-((int64_t(1) << 62) + (1 << 9) + 1), dtype::Int64()), -(0x1p62 + 0x1p10));
    EXPECT_EQ(to_f64(std::numeric_limits<int64_t>::max(), dtype::Int64()), 0x1p63);
    EXPECT_EQ(to_f64(std::numeric_limits<int64_t>::min(), dtype::Int64()), -0x1p63);
    EXPECT_EQ(load_as_double(dtype::Float64(), std::vector<double>{1.5, -2.25}.data(), 1), -2.25);
}

TEST(Float64DType, BulkConversionsMatchElementwiseOnes) {
    // The fast float32 <-> float64 loops and the generic path agree, and a float32 value
    // survives the trip through float64 bit for bit.
    std::vector<float> src = {0.f, -0.f, 1.f, 0.1f, -3.4e38f, 1e-45f, 1e-38f, 65504.f};
    std::vector<double> wide(src.size());
    std::vector<float> back(src.size());
    convert_elements(dtype::Float32(), src.data(), dtype::Float64(), wide.data(), src.size());
    convert_elements(dtype::Float64(), wide.data(), dtype::Float32(), back.data(), src.size());
    for (size_t i = 0; i < src.size(); ++i) {
        EXPECT_EQ(wide[i], load_as_double(dtype::Float32(), src.data(), i)) << i;
        EXPECT_EQ(std::memcmp(&back[i], &src[i], 4), 0) << i;
    }
    // A tensor of float64 copies and reads back its doubles.
    Tensor t(TensorShape{3}, dtype::Float64());
    t.ptr<double>()[0] = 1.0 + 1e-15;
    t.ptr<double>()[1] = -1e-300;
    t.ptr<double>()[2] = 0.1;
    Tensor c = t.copy();
    EXPECT_EQ(t.nr_bytes(), 24u);
    EXPECT_EQ(c.at(0), 1.0 + 1e-15);
    EXPECT_EQ(c.at(1), -1e-300);
    EXPECT_EQ(c.at(2), 0.1);
}
