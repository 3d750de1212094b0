// .npy reading and writing.
#include "helpers.h"
#include "serialization/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace braid;
using namespace braid::test;
using ::testing::HasSubstr;

namespace {

std::vector<uint8_t> npy_bytes(const std::string& header_dict, const std::vector<uint8_t>& data,
                               uint8_t major = 1) {
    std::string header = header_dict;
    size_t prefix = major == 1 ? 10 : 12;
    while ((prefix + header.size() + 1) % 64) header += ' ';
    header += '\n';
    std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', major, 0};
    out.push_back(uint8_t(header.size()));
    out.push_back(uint8_t(header.size() >> 8));
    if (major != 1) {
        out.push_back(0);
        out.push_back(0);
    }
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), data.begin(), data.end());
    return out;
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
    try {
        parse_npy(bytes, "in.npy");
    } catch (const SerializationError& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST(Npy, EveryDtypeRoundTrips) {
    for (DType dt : {dtype::Float32(), dtype::Float16(), dtype::Int8(), dtype::Uint8(),
                     dtype::Int32(), dtype::Int64(), dtype::Bool()}) {
        for (TensorShape shape :
             {TensorShape{}, TensorShape{5}, TensorShape{2, 3, 4}, TensorShape{0, 3}}) {
            Tensor t(shape, dt);
            for (size_t i = 0; i < shape.total_nr_elems(); ++i)
                store_from_double(dt, t.raw_ptr(), i, double(i % 2 ? i % 7 : 1));
            auto bytes = encode_npy(t);
            EXPECT_EQ((bytes.size() - t.nr_bytes()) % 64, 0u); // data 64-byte aligned
            Tensor back = parse_npy(bytes, "x.npy");
            EXPECT_TRUE(bit_identical(back, t)) << dt.name() << " " << shape.to_string();
        }
    }
}

TEST(Npy, ReadsWhatNumpyWrites) {
    // np.save of np.arange(6, dtype=np.int32).reshape(2, 3), and the same as version 2.0.
    std::vector<uint8_t> data;
    for (int32_t i = 0; i < 6; ++i)
        for (int b = 0; b < 4; ++b) data.push_back(uint8_t(i >> (8 * b)));
    for (uint8_t major : {1, 2, 3}) {
        auto bytes =
            npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", data, major);
        Tensor t = parse_npy(bytes, "a.npy");
        EXPECT_EQ(t.shape(), (TensorShape{2, 3}));
        EXPECT_EQ(t.dtype(), dtype::Int32());
        EXPECT_EQ(t.at(5), 5.0);
    }
    auto scalar = npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (), }", {1});
    EXPECT_EQ(parse_npy(scalar, "s.npy").shape(), TensorShape{});
}

TEST(Npy, ClearErrors) {
    std::vector<uint8_t> four(24, 0);
    EXPECT_THAT(
        parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", four)),
        HasSubstr("in.npy: Fortran-order arrays are not supported"));
    EXPECT_THAT(
        parse_error(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", four)),
        HasSubstr("in.npy: dtype '<c8' is not supported"));
    EXPECT_THAT(parse_error(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }",
                                      std::vector<uint8_t>(12))),
                HasSubstr("dtype '>f4' is not supported"));
    EXPECT_THAT(
        parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }", four)),
        HasSubstr("in.npy: truncated: float32 {7} needs 28 data bytes, the file has 24"));
    EXPECT_THAT(parse_error({'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0}), HasSubstr("not a .npy file"));
    EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'shape': (3,), }", four)),
                HasSubstr("malformed .npy header"));
    EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999"
                                      "999999999999, 2), }",
                                      four)),
                HasSubstr("malformed .npy header: a dimension is too large"));
    Tensor bf(TensorShape{2}, dtype::BFloat16());
    EXPECT_THROW(encode_npy(bf), SerializationError);
}

TEST(Npy, FilesOnDisk) {
    TempDir dir;
    Tensor t = random_input({3, 4}, 1);
    write_npy(dir.file("t.npy"), t);
    EXPECT_TRUE(bit_identical(read_npy(dir.file("t.npy")), t));
    EXPECT_THROW(read_npy(dir.file("missing.npy")), SerializationError);
}
