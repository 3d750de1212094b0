// bench_ops: per-operator throughput against an anchor measured in the same run.
// Each case prints one JSON line:
//   {"bench":"ops","case":...,"shape":...,"braid":...,"anchor":...,"unit":...,"ratio":...}
// where ratio = braid's throughput / the anchor's (1.0 is parity).
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace braid::bench {

struct OpsOptions {
    bool json = false;
    std::string comp_node = "cpu0";
    std::string filter;       //!< run only cases whose name contains this
    double min_seconds = 0.3; //!< time each measurement at least this long
};

//! Median seconds per call of fn over repeated timed batches lasting >= min_seconds.
double time_per_call(const std::function<void()>& fn, double min_seconds);

//! Prints one case line. `anchor_name` says what the anchor is (e.g. "cblas_sgemm").
void report_case(const OpsOptions& opt, const std::string& name, const std::string& shape,
                 double braid_value, double anchor_value, const std::string& unit,
                 const std::string& anchor_name);

//! True when the case should run under opt.filter.
bool case_selected(const OpsOptions& opt, const std::string& name);

//! Elementwise, normalization and reduction cases (bench_ops_elemwise.cpp).
void run_elemwise_cases(const OpsOptions& opt);
//! Dense cases: gemm, attention, conv2d (bench_ops_dense.cpp).
void run_dense_cases(const OpsOptions& opt);

} // namespace braid::bench
