#include "base/cpu_isa.h"

#include "base/error.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

namespace braid {

namespace {

CpuIsa detect() {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        return CpuIsa::AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::AVX2;
#endif
    return CpuIsa::SCALAR;
}

CpuIsa parse_cap(const char* value) {
    std::string v(value);
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    if (v == "scalar" || v == "sse41" || v == "sse4.1" || v == "none") return CpuIsa::SCALAR;
    if (v == "avx2" || v == "avx2_vnni" || v == "avx2_vnni_2") return CpuIsa::AVX2;
    if (v == "avx512" || v.rfind("avx512", 0) == 0 || v == "all" || v == "default")
        return CpuIsa::AVX512;
    throw ValueError(fmt::format("BRAID_MAX_CPU_ISA=\"{}\" is not an instruction set braid knows; "
                                 "expected scalar, avx2 or avx512",
                                 value));
}

} // namespace

CpuIsa cap_cpu_isa(CpuIsa detected, const char* cap) {
    return cap && *cap ? std::min(detected, parse_cap(cap)) : detected;
}

CpuIsa cpu_isa_detected() {
    static const CpuIsa isa = detect();
    return isa;
}

CpuIsa cpu_isa() {
    static const CpuIsa isa = cap_cpu_isa(cpu_isa_detected(), std::getenv("BRAID_MAX_CPU_ISA"));
    return isa;
}

const char* cpu_isa_name(CpuIsa isa) {
    switch (isa) {
    case CpuIsa::SCALAR:
        return "scalar";
    case CpuIsa::AVX2:
        return "avx2";
    case CpuIsa::AVX512:
        return "avx512";
    }
    return "scalar";
}

std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) != 0) continue;
        auto colon = line.find(':');
        if (colon == std::string::npos) break;
        auto begin = line.find_first_not_of(" \t", colon + 1);
        return begin == std::string::npos ? "unknown" : line.substr(begin);
    }
    return "unknown";
}

} // namespace braid
