// The instruction-set cap (base/cpu_isa.h): how BRAID_MAX_CPU_ISA values cap the detected level,
// and that the process's level follows the variable it was started with (the ISA-capped ctest
// runs rely on it).
#include "base/cpu_isa.h"
#include "base/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

using namespace braid;

TEST(CpuIsa, TheCapLowersTheDetectedLevelAndNeverRaisesIt) {
    EXPECT_EQ(cap_cpu_isa(CpuIsa::AVX512, "avx2"), CpuIsa::AVX2);
    EXPECT_EQ(cap_cpu_isa(CpuIsa::AVX512, "AVX2"), CpuIsa::AVX2); // oneDNN's spelling
    EXPECT_EQ(cap_cpu_isa(CpuIsa::AVX512, "scalar"), CpuIsa::SCALAR);
    EXPECT_EQ(cap_cpu_isa(CpuIsa::AVX512, "AVX512_CORE"), CpuIsa::AVX512);
    EXPECT_EQ(cap_cpu_isa(CpuIsa::AVX2, "avx512"), CpuIsa::AVX2);
    EXPECT_EQ(cap_cpu_isa(CpuIsa::SCALAR, "avx2"), CpuIsa::SCALAR);
    EXPECT_EQ(cap_cpu_isa(CpuIsa::AVX2, nullptr), CpuIsa::AVX2);
    EXPECT_EQ(cap_cpu_isa(CpuIsa::AVX2, ""), CpuIsa::AVX2);
}

TEST(CpuIsa, AnUnknownCapIsAnErrorNamingTheVariable) {
    try {
        cap_cpu_isa(CpuIsa::AVX512, "avx3");
        FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("BRAID_MAX_CPU_ISA=\"avx3\""));
        EXPECT_THAT(e.what(), ::testing::HasSubstr("scalar, avx2 or avx512"));
    }
}

TEST(CpuIsa, TheProcessLevelFollowsTheEnvironment) {
    EXPECT_EQ(cpu_isa(), cap_cpu_isa(cpu_isa_detected(), std::getenv("BRAID_MAX_CPU_ISA")));
    EXPECT_LE(int(cpu_isa()), int(cpu_isa_detected()));
    EXPECT_NE(cpu_model_name(), "");
}
