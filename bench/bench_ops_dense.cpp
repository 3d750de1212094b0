// Dense cases of bench_ops: gemm, attention, conv2d.
#include "bench/bench_ops.h"

namespace braid::bench {

void run_dense_cases(const OpsOptions&) {}

} // namespace braid::bench
