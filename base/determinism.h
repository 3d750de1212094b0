// Deterministic mode: kernels whose reduction order depends only on the model and on each
// output element's own inputs (docs/determinism.md).
//
// The mode is a property of the thread running a kernel: an executable sets it on the threads
// that run its operators (GraphOptions::deterministic, or the thread that started the run), and
// parallel_for carries it to the pool workers of each region. A kernel asks
// deterministic_kernels() and takes its fixed-order path: GEMMs through ordered_sgemm
// (operators/ordered_gemm.h), convolutions through im2col and that GEMM, reductions without
// splitting the reduced axis by thread count.
#pragma once

namespace braid {

//! Whether kernels run on this thread must use their fixed-order paths.
bool deterministic_kernels();

//! Sets this thread's mode for the scope's lifetime (the previous one comes back after).
class DeterministicScope {
public:
    explicit DeterministicScope(bool on);
    ~DeterministicScope();
    DeterministicScope(const DeterministicScope&) = delete;
    DeterministicScope& operator=(const DeterministicScope&) = delete;

private:
    bool m_prev;
};

//! BRAID_DETERMINISTIC=1 in the environment (read once; "0" or unset: off; anything else is a
//! ValueError naming the variable).
bool deterministic_from_env();

} // namespace braid
