// DType, TensorShape, TensorLayout, Storage and Tensor.
#include "base/error.h"
#include "base/thread_pool.h"
#include "memory/tensor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>

using namespace braid;

TEST(DType, NamesSizesAndParsing) {
    EXPECT_EQ(dtype::Float32().size(), 4u);
    EXPECT_EQ(dtype::BFloat16().size(), 2u);
    EXPECT_EQ(dtype::Int64().size(), 8u);
    EXPECT_EQ(dtype::Bool().size(), 1u);
    EXPECT_STREQ(dtype::Float16().name(), "float16");
    EXPECT_EQ(DType::from_name("uint8"), dtype::Uint8());
    EXPECT_THROW(DType::from_name("float64"), DTypeError);
    EXPECT_FALSE(DType().valid());
}

TEST(DType, HalfConversionRoundsToNearestEven) {
    EXPECT_EQ(float_to_half(1.0f), 0x3c00);
    EXPECT_EQ(float_to_half(-2.0f), 0xc000);
    EXPECT_EQ(float_to_half(65504.f), 0x7bff);
    EXPECT_EQ(float_to_half(65520.f), 0x7c00);                // overflow to infinity
    EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);     // tie -> even
    EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);     // tie -> even (up)
    EXPECT_EQ(float_to_half(5.960464477539063e-08f), 0x0001); // smallest subnormal
    EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
    for (uint32_t h = 0; h < 0x7c00; h += 7) // round trip of every 7th finite half
        EXPECT_EQ(float_to_half(half_to_float(uint16_t(h))), h);
}

TEST(DType, BFloat16ConversionRoundsToNearestEven) {
    EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
    EXPECT_FLOAT_EQ(bf16_to_float(float_to_bf16(3.140625f)), 3.140625f);
    uint32_t bits = 0x3f808000; // exactly halfway between 0x3f80 and 0x3f81 -> even
    float f;
    std::memcpy(&f, &bits, 4);
    EXPECT_EQ(float_to_bf16(f), 0x3f80);
    bits = 0x3f818000;
    std::memcpy(&f, &bits, 4);
    EXPECT_EQ(float_to_bf16(f), 0x3f82);
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(DType, ConversionsSaturateAndTruncate) {
    uint8_t u8[3];
    float src[3] = {-5.f, 300.f, 7.9f};
    convert_elements(dtype::Float32(), src, dtype::Uint8(), u8, 3);
    EXPECT_EQ(u8[0], 0);
    EXPECT_EQ(u8[1], 255);
    EXPECT_EQ(u8[2], 7);
    int32_t i32[2] = {-3, 4};
    uint8_t b[2];
    convert_elements(dtype::Int32(), i32, dtype::Bool(), b, 2);
    EXPECT_EQ(b[0], 1);
    EXPECT_EQ(load_as_double(dtype::Int8(), "\xff", 0), -1.0);
}

TEST(TensorShape, ElementsEqualityPrinting) {
    TensorShape s{2, 3, 4};
    EXPECT_EQ(s.total_nr_elems(), 24u);
    EXPECT_EQ(s.to_string(), "{2,3,4}");
    EXPECT_EQ(TensorShape{}.total_nr_elems(), 1u);
    EXPECT_EQ(TensorShape{}.to_string(), "{}");
    EXPECT_TRUE((TensorShape{0, 5}).is_empty());
    EXPECT_NE(s, (TensorShape{2, 3}));
    EXPECT_THROW(TensorShape({1, 1, 1, 1, 1, 1, 1, 1}), ShapeError);
    TensorShape out;
    TensorShape a{3, 1}, b{4};
    const TensorShape* both[] = {&a, &b};
    ASSERT_TRUE(broadcast_shapes(both, 2, out));
    EXPECT_EQ(out, (TensorShape{3, 4}));
    TensorShape c{3};
    const TensorShape* bad[] = {&b, &c};
    EXPECT_FALSE(broadcast_shapes(bad, 2, out));
}

TEST(TensorLayout, StridesContiguityBroadcast) {
    TensorLayout l({2, 3, 4}, dtype::Float32());
    EXPECT_EQ(l.stride[0], 12);
    EXPECT_EQ(l.stride[2], 1);
    EXPECT_TRUE(l.is_contiguous());
    EXPECT_EQ(l.span_bytes(), 96u);
    auto b = TensorLayout({3, 1}, dtype::Float32()).broadcast({2, 3, 5});
    EXPECT_EQ(b.stride[0], 0);
    EXPECT_EQ(b.stride[2], 0);
    EXPECT_FALSE(b.is_contiguous());
    EXPECT_THROW(l.broadcast({2, 3, 5}), ShapeError);
}

TEST(Tensor, ViewsShareStorageAndCopiesDoNot) {
    Tensor t(TensorShape{4, 4}, dtype::Float32());
    for (int i = 0; i < 16; ++i) t.ptr<float>()[i] = float(i);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_ptr()) % 64, 0u);
    // Column 1 as a strided view.
    TensorLayout col({4}, dtype::Float32());
    col.stride[0] = 4;
    Tensor c = t.view(col, 4);
    EXPECT_EQ(c.at(2), 9.0);
    EXPECT_EQ(c.storage().block_id(), t.storage().block_id());
    Tensor cc = c.contiguous();
    EXPECT_NE(cc.storage().block_id(), t.storage().block_id());
    EXPECT_EQ(cc.at(3), 13.0);
    Tensor r = t.reshape({2, 8});
    EXPECT_EQ(r.at(15), 15.0);
    t.ptr<float>()[15] = -1;
    EXPECT_EQ(r.at(15), -1.0);
    EXPECT_THROW(c.reshape({2, 2}), ShapeError);
    EXPECT_THROW(t.reshape({5}), ShapeError);
    EXPECT_THROW(t.view(TensorLayout({5, 4}, dtype::Float32())), ShapeError); // overruns
    EXPECT_THROW(t.ptr<double>(), DTypeError);
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
    std::vector<std::atomic<int>> hits(100000);
    parallel_for(hits.size(), 1000, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    EXPECT_THROW(parallel_for(10000, 10,
                              [](size_t b, size_t) {
                                  if (b > 5000) throw ValueError("chunk failed");
                              }),
                 ValueError);
}
