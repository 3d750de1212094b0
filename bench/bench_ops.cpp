// bench_ops [--json] [--comp-node CN] [--filter NAME] [--min-seconds S]
#include "bench/bench_ops.h"
#include "bench/bench_cli.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace braid::bench {

double time_per_call(const std::function<void()>& fn, double min_seconds) {
    using clock = std::chrono::steady_clock;
    fn(); // warm-up
    std::vector<double> samples;
    auto start_all = clock::now();
    size_t reps = 1;
    while (samples.size() < 5 ||
           std::chrono::duration<double>(clock::now() - start_all).count() < min_seconds) {
        auto t0 = clock::now();
        for (size_t i = 0; i < reps; ++i) fn();
        double s = std::chrono::duration<double>(clock::now() - t0).count() / double(reps);
        samples.push_back(s);
        if (s * double(reps) < 0.01) reps *= 2;
        if (samples.size() > 200) break;
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
}

//! Cases reported so far: a filter that selects none is an error, not an empty run.
size_t g_reported = 0;

void report_case(const OpsOptions& opt, const std::string& name, const std::string& shape,
                 double braid_value, double anchor_value, const std::string& unit,
                 const std::string& anchor_name) {
    ++g_reported;
    double ratio = anchor_value > 0 ? braid_value / anchor_value : 0;
    if (opt.json)
        std::printf("{\"bench\":\"ops\",\"case\":\"%s\",\"shape\":\"%s\",\"braid\":%.3f,"
                    "\"anchor\":%.3f,\"anchor_name\":\"%s\",\"unit\":\"%s\",\"ratio\":%.3f,"
                    "\"comp_node\":\"%s\"}\n",
                    name.c_str(), shape.c_str(), braid_value, anchor_value, anchor_name.c_str(),
                    unit.c_str(), ratio, opt.comp_node.c_str());
    else
        std::printf("%-12s %-28s braid %10.2f %s   %s %10.2f   ratio %.3f\n", name.c_str(),
                    shape.c_str(), braid_value, unit.c_str(), anchor_name.c_str(), anchor_value,
                    ratio);
    std::fflush(stdout);
}

bool case_selected(const OpsOptions& opt, const std::string& name) {
    return opt.filter.empty() || name.find(opt.filter) != std::string::npos;
}

} // namespace braid::bench

int main(int argc, char** argv) {
    braid::bench::OpsOptions opt;
    CLI::App app{"bench_ops: per-operator throughput against an anchor (OpenBLAS sgemm, memcpy) "
                 "measured in the same run"};
    app.option_defaults()->always_capture_default();
    app.add_flag("--json", opt.json, "one JSON object per case instead of a table line");
    app.add_option("--comp-node", opt.comp_node, "comp node the graphs run on");
    app.add_option("--filter", opt.filter, "run only the cases whose name contains this");
    app.add_option("--min-seconds", opt.min_seconds, "time each measurement at least this long")
        ->check(CLI::Range(0.0, 3600.0));
    if (auto status = braid::bench::parse_command_line(app, argc, argv)) return *status;
    braid::bench::run_elemwise_cases(opt);
    braid::bench::run_dense_cases(opt);
    if (braid::bench::g_reported == 0) {
        std::fprintf(stderr, "bench_ops: no case matches --filter \"%s\" in this build\n",
                     opt.filter.c_str());
        return 1;
    }
    return 0;
}
