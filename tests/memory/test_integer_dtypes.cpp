// int16, uint16, uint32 and uint64: names, sizes, appended enum values, and conversions that are
// exact between integer types (no detour through double) and saturate at the target's bounds.
#include "memory/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

using namespace braid;

namespace {

template <typename To, typename From> To convert(From v, DType from, DType to) {
    To out{};
    convert_elements(from, &v, to, &out, 1);
    return out;
}

} // namespace

TEST(IntegerDTypes, HaveNamesSizesAndAppendedEnumValues) {
    struct Case {
        DType dt;
        const char* name;
        size_t size;
        int code;
    };
    for (auto c :
         {Case{dtype::Int16(), "int16", 2, 9}, Case{dtype::Uint16(), "uint16", 2, 10},
          Case{dtype::Uint32(), "uint32", 4, 11}, Case{dtype::Uint64(), "uint64", 8, 12}}) {
        EXPECT_STREQ(c.dt.name(), c.name);
        EXPECT_EQ(c.dt.size(), c.size) << c.name;
        EXPECT_EQ(DType::from_name(c.name), c.dt);
        EXPECT_TRUE(c.dt.is_integer()) << c.name;
        EXPECT_FALSE(c.dt.is_float()) << c.name;
        // Stored in model files and the embedding API: appended after float64.
        EXPECT_EQ(int(c.dt.enumv()), c.code) << c.name;
    }
}

TEST(IntegerDTypes, ConvertExactlyBetweenIntegersAndSaturateAtTheBounds) {
    const uint64_t big = (uint64_t(1) << 63) + 3; // above int64, and inexact in double
    EXPECT_EQ(convert<uint64_t>(big, dtype::Uint64(), dtype::Uint64()), big);
    // int64 → uint64 and back: exact where it fits, clamped where not.
    int64_t near_max = std::numeric_limits<int64_t>::max() - 1;
    EXPECT_EQ(convert<uint64_t>(near_max, dtype::Int64(), dtype::Uint64()), uint64_t(near_max));
    EXPECT_EQ(convert<uint64_t>(int64_t(-5), dtype::Int64(), dtype::Uint64()), 0u);
    EXPECT_EQ(convert<int64_t>(big, dtype::Uint64(), dtype::Int64()),
              std::numeric_limits<int64_t>::max());
    EXPECT_EQ(convert<int16_t>(int32_t(40000), dtype::Int32(), dtype::Int16()), 32767);
    EXPECT_EQ(convert<int16_t>(int32_t(-40000), dtype::Int32(), dtype::Int16()), -32768);
    EXPECT_EQ(convert<uint16_t>(int8_t(-1), dtype::Int8(), dtype::Uint16()), 0u);
    EXPECT_EQ(convert<uint32_t>(uint16_t(65535), dtype::Uint16(), dtype::Uint32()), 65535u);
    EXPECT_EQ(convert<uint32_t>(int64_t(1) << 40, dtype::Int64(), dtype::Uint32()),
              std::numeric_limits<uint32_t>::max());
    // To and from floats: uint64 rounds once to the nearest float; floats truncate and clamp.
    EXPECT_EQ(convert<float>(big, dtype::Uint64(), dtype::Float32()), 0x1p63f);
    EXPECT_EQ(
        convert<double>(std::numeric_limits<uint64_t>::max(), dtype::Uint64(), dtype::Float64()),
        0x1p64);
    EXPECT_EQ(convert<uint16_t>(-3.7f, dtype::Float32(), dtype::Uint16()), 0u);
    EXPECT_EQ(convert<int16_t>(-3.7f, dtype::Float32(), dtype::Int16()), -3);
    EXPECT_EQ(convert<uint32_t>(1e10, dtype::Float64(), dtype::Uint32()),
              std::numeric_limits<uint32_t>::max());
    EXPECT_EQ(convert<uint8_t>(uint32_t(7), dtype::Uint32(), dtype::Bool()), 1u);
}
