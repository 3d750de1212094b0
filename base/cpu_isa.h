// Which x86-64 vector instruction set braid's own kernels may use, chosen once per process.
//
// braid's kernels (softmax, norms, elementwise math, transpose) have AVX-512, AVX2 + FMA and
// portable paths, picked at run time from what the CPU has. BRAID_MAX_CPU_ISA caps that choice
// (`scalar`, `avx2` or `avx512`; oneDNN's spellings `AVX2`, `AVX512_CORE` are accepted too), so
// that one machine can run the paths of a CPU with fewer features: the test suite runs with the
// cap at avx2 as well as uncapped. The cap also reaches oneDNN's JIT kernels (dense_kernels.cpp
// passes it to dnnl_set_max_cpu_isa) unless ONEDNN_MAX_CPU_ISA is set explicitly. OpenBLAS
// picks its kernels when it loads, before braid runs; cap it with OPENBLAS_CORETYPE (e.g.
// Haswell for AVX2). Thread-safe.
#pragma once

#include <string>

namespace braid {

//! Instruction-set levels, ordered: a level implies the ones below it.
enum class CpuIsa { SCALAR = 0, AVX2 = 1, AVX512 = 2 };

//! The level braid's kernels use: what the CPU supports (AVX2 counts only with FMA; AVX-512
//! means AVX-512F), capped by BRAID_MAX_CPU_ISA. Read once; throws ValueError naming the
//! variable and the accepted values when BRAID_MAX_CPU_ISA holds anything else.
CpuIsa cpu_isa();

//! The level the CPU itself supports, ignoring the cap.
CpuIsa cpu_isa_detected();

//! `detected` capped by a BRAID_MAX_CPU_ISA value (null or empty: no cap); what cpu_isa() uses.
//! Throws ValueError for a value it does not know.
CpuIsa cap_cpu_isa(CpuIsa detected, const char* cap);

//! True when kernels may use the code of `level` (cpu_isa() is `level` or above).
inline bool cpu_isa_at_least(CpuIsa level) {
    return int(cpu_isa()) >= int(level);
}

//! "scalar", "avx2" or "avx512".
const char* cpu_isa_name(CpuIsa isa);

//! The CPU's model name as the kernel reports it (/proc/cpuinfo "model name"), or "unknown".
std::string cpu_model_name();

} // namespace braid
