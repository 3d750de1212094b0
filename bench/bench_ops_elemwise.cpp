// Elementwise, normalization and reduction cases of bench_ops.
#include "bench/bench_ops.h"

namespace braid::bench {

void run_elemwise_cases(const OpsOptions&) {}

} // namespace braid::bench
