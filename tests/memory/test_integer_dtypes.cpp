// int16, uint16, uint32 and uint64: names, sizes, appended enum values, and conversions that are
// exact between integer types (no detour through double) and saturate at the target's bounds.
#include "memory/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

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

// The typed loops among float32, int8, uint8 and int32 (quantized models convert whole
// activations between them) give what the element-by-element rule gives: a float truncates
// toward zero and saturates, NaN becomes 0, an int32 becomes the nearest float (ties to even).
TEST(IntegerDTypes, QuantizationConversionsFollowTheElementRule) {
    const std::vector<float> floats = {0.f,
                                       -0.f,
                                       0.5f,
                                       -0.5f,
                                       1.5f,
                                       -1.5f,
                                       2.49f,
                                       127.9f,
                                       128.f,
                                       -128.6f,
                                       -129.f,
                                       254.99f,
                                       255.f,
                                       256.f,
                                       1e10f,
                                       -1e10f,
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       std::numeric_limits<float>::quiet_NaN(),
                                       2147483520.f,
                                       2147483648.f,
                                       -2147483648.f,
                                       -2147483904.f,
                                       16777217.f};
    const std::vector<int32_t> ints = {0,
                                       1,
                                       -1,
                                       127,
                                       128,
                                       -128,
                                       -129,
                                       255,
                                       256,
                                       16777217,
                                       16777219,
                                       -16777219,
                                       std::numeric_limits<int32_t>::max(),
                                       std::numeric_limits<int32_t>::min()};
    const std::vector<DType> kinds = {dtype::Float32(), dtype::Int8(), dtype::Uint8(),
                                      dtype::Int32()};
    for (DType from : kinds) {
        // The sources: the float values, or the int32 values saturated into `from`.
        std::vector<uint8_t> src;
        size_t n = from == dtype::Float32() ? floats.size() : ints.size();
        src.resize(n * from.size());
        for (size_t i = 0; i < n; ++i) {
            if (from == dtype::Float32())
                store_from_double(from, src.data(), i, floats[i]);
            else
                store_from_double(from, src.data(), i, double(ints[i]));
        }
        for (DType to : kinds) {
            std::vector<uint8_t> got(n * to.size()), want(n * to.size());
            convert_elements(from, src.data(), to, got.data(), n);
            for (size_t i = 0; i < n; ++i)
                store_from_double(to, want.data(), i, load_as_double(from, src.data(), i));
            EXPECT_EQ(got, want) << from.name() << " -> " << to.name();
        }
    }
}
