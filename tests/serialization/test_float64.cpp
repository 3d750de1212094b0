// float64 in model files and .npy files: tensors, vars and params keep every bit.
#include "helpers.h"
#include "model_patch.h"
#include "serialization/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

using namespace braid;
using namespace braid::test;
using ::testing::HasSubstr;

namespace {

//! A float64 tensor whose values are not float32 values.
Tensor f64_values(const TensorShape& shape, double scale) {
    Tensor t(shape, dtype::Float64());
    for (size_t i = 0; i < shape.total_nr_elems(); ++i)
        t.ptr<double>()[i] = scale * (0.1 * double(i) + 1e-13) - 1.0 / 3.0;
    return t;
}

} // namespace

TEST(Float64Model, RoundTripKeepsFloat64TensorsVarsAndParams) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float64(), {2, 3});
    auto w = opr::SharedParam::make(*g, std::make_shared<Tensor>(f64_values({3, 4}, 1.5)), "w");
    auto c = opr::ImmutableTensor::make(*g, f64_values({4}, 1e-9));
    auto y = (opr::matmul(x, w) + c).rename("y");
    auto z =
        (opr::exp(opr::reduce_sum(y, {1})) + opr::fill(*g, {2}, 0.1, dtype::Float64())).rename("z");
    auto n = y.astype(dtype::Float32()).rename("narrow");
    std::vector<uint8_t> bytes;
    dump({y, z, n}, bytes);

    auto loaded = load(bytes);
    ASSERT_EQ(loaded.inputs.size(), 1u);
    EXPECT_EQ(loaded.inputs[0].dtype, dtype::Float64());
    EXPECT_EQ(loaded.output("y").dtype, dtype::Float64());
    EXPECT_EQ(loaded.output("narrow").dtype, dtype::Float32());

    std::vector<std::pair<std::string, Tensor>> inputs = {{"x", f64_values({2, 3}, -0.7)}};
    std::vector<OutputSpec> specs = {y, z, n};
    auto original = g->compile(specs);
    auto expect = run_copy(*original, inputs, 3);
    auto exec = loaded.compile();
    auto actual = run_copy(*exec, inputs, 3);
    for (size_t i = 0; i < 3; ++i)
        EXPECT_TRUE(bit_identical(actual[i], expect[i])) << "output " << i;
    // The stored weights are the doubles themselves, not float32 roundings.
    EXPECT_EQ(actual[0].dtype(), dtype::Float64());
    double y00 = 1e-9 * 1e-13 - 1.0 / 3.0;
    for (size_t k = 0; k < 3; ++k)
        y00 += inputs[0].second.at(k) * (1.5 * (0.1 * double(k * 4) + 1e-13) - 1.0 / 3.0);
    EXPECT_NEAR(actual[0].at(0), y00, 1e-15);
}

TEST(Float64Model, FileWithFloat64IsDescribedAndTheNextCodeIsRejected) {
    TempDir dir;
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float64(), {3});
    dump({(x * 2.0).rename("y")}, dir.file("f64.braid"));
    auto desc = describe_model(dir.file("f64.braid"));
    ASSERT_EQ(desc.inputs.size(), 1u);
    EXPECT_EQ(desc.inputs[0].dtype, dtype::Float64());
    // Code 8 is float64; code 13 (after uint64) is no dtype.
    auto bytes = read_file(dir.file("f64.braid"));
    auto* vars = mutable_model(bytes)->mutable_vars();
    bool edited = false;
    for (flatbuffers::uoffset_t i = 0; i < vars->size() && !edited; ++i)
        if (vars->Get(i)->dtype() == fbs::DType(DTypeEnum::FLOAT64))
            edited = vars->GetMutableObject(i)->mutate_dtype(fbs::DType(13));
    ASSERT_TRUE(edited);
    reseal(bytes);
    try {
        load(bytes);
        FAIL() << "a var of dtype code 13 loaded";
    } catch (const SerializationError& e) {
        EXPECT_THAT(e.what(), HasSubstr("invalid dtype code 13"));
    }
}

TEST(Float64Npy, WritesAndReadsLittleEndianF8) {
    TempDir dir;
    Tensor t = f64_values({2, 5}, 3.0);
    write_npy(dir.file("d.npy"), t);
    auto bytes = read_file(dir.file("d.npy"));
    std::string header(bytes.begin(), bytes.begin() + 64);
    EXPECT_THAT(header, HasSubstr("'descr': '<f8'"));
    Tensor back = read_npy(dir.file("d.npy"));
    EXPECT_TRUE(bit_identical(back, t));
    EXPECT_EQ(npy_descr(dtype::Float64()), "<f8");
}
