#include "operators/max_pool_vector.h"

#include "base/cpu_isa.h"
#include "operators/simd_vec.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace braid::opr {
namespace {

BRAID_TARGET_REGION("avx512f")
namespace pool_avx512 {
using Vec = simd::Avx512;
using V = Vec::V;
#include "operators/max_pool_vector.inc"
} // namespace pool_avx512
BRAID_TARGET_REGION_END

BRAID_TARGET_REGION("avx2,fma")
namespace pool_avx2 {
using Vec = simd::Avx2;
using V = Vec::V;
#include "operators/max_pool_vector.inc"
} // namespace pool_avx2
BRAID_TARGET_REGION_END

} // namespace

bool max_pool_vector_applies(const PoolGeometry& g) {
    return (g.sw == 1 || g.sw == 2) && cpu_isa_at_least(CpuIsa::AVX2);
}

void max_pool_vector(const PoolGeometry& g, const float* x, float* y, size_t begin, size_t end) {
    // The row buffer: pw columns of -inf, the row's w maxima, then -inf up to the last read of
    // the last output vector (2 vectors past its start at stride 2), rounded up a vector.
    constexpr ptrdiff_t MAX_LANES = 16;
    ptrdiff_t vectors = (g.ow + MAX_LANES - 1) / MAX_LANES;
    size_t size = size_t(g.pw + std::max(g.w, vectors * MAX_LANES * g.sw + g.kw) + 2 * MAX_LANES);
    std::vector<float> buf(size, -std::numeric_limits<float>::infinity());
    if (cpu_isa_at_least(CpuIsa::AVX512))
        pool_avx512::run(g, x, y, begin, end, buf);
    else
        pool_avx2::run(g, x, y, begin, end, buf);
}

} // namespace braid::opr
